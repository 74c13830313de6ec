"""Fixtures for the serving tests: a scikit-learn model directory and an emulator with clients."""

from __future__ import annotations

import operator
import pickle
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pytest
from google.cloud.aiplatform_v1 import (
    EndpointServiceClient,
    ModelServiceClient,
    PredictionServiceClient,
)
from google.cloud.aiplatform_v1.types import DeployedModel, Endpoint, Model

from kfp_spot.emulator import Emulator
from kfp_spot.vertex.client import make_client, resolve_endpoint

PARENT = "projects/local-project/locations/us-central1"
SKLEARN_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-6:latest"
X = np.random.default_rng(0).normal(size=(60, 3))
Y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)


def wait_for(condition: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it returns something truthy (bounded; never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not met within {timeout} s")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def sklearn_model_dir(tmp_path_factory) -> Path:
    """A directory with ``model.joblib``: a LogisticRegression on three features."""
    from sklearn.linear_model import LogisticRegression  # seconds of CPU: not at collection

    path = tmp_path_factory.mktemp("sklearn-model")
    joblib.dump(LogisticRegression().fit(X, Y), path / "model.joblib")
    return path


@pytest.fixture(scope="session")
def light_model_dir(tmp_path_factory) -> Path:
    """A ``model.pkl`` the scikit-learn image serves without importing scikit-learn: its
    ``predict`` sums each instance's features (a linear model with unit weights).

    A replica that loads a scikit-learn model spends about a CPU-second importing scikit-learn;
    one that loads this, a few hundredths. For the tests about what the emulator does with a
    deployment (names, requests, preemptions, undeploys, restarts), which no model's weights
    decide; the tests about what a model predicts serve ``sklearn_model_dir``.
    """
    path = tmp_path_factory.mktemp("light-model")
    model = types.SimpleNamespace(predict=operator.methodcaller("sum", axis=1))
    (path / "model.pkl").write_bytes(pickle.dumps(model))
    return path


@pytest.fixture(scope="session")
def slow_model_dir(tmp_path_factory) -> Path:
    """A ``model.pkl`` whose loading takes 60 s: a deployment that stays in progress."""
    path = tmp_path_factory.mktemp("slow-model")

    class Slow:
        def __reduce__(self):
            return (time.sleep, (60,))

    (path / "model.pkl").write_bytes(pickle.dumps(Slow()))
    return path


@dataclass
class Serving:
    """A running emulator and the GAPIC clients of the serving APIs, pointed at it."""

    emu: Emulator
    models: ModelServiceClient
    endpoints: EndpointServiceClient
    predictions: PredictionServiceClient

    def upload(self, artifact_uri: Path | str, image: str = SKLEARN_IMAGE) -> str:
        op = self.models.upload_model(
            parent=PARENT,
            model=Model(
                display_name="m",
                artifact_uri=str(artifact_uri),
                container_spec={"image_uri": image},
            ),
        )
        return op.result(timeout=30).model

    def endpoint(self) -> str:
        return (
            self.endpoints.create_endpoint(parent=PARENT, endpoint=Endpoint(display_name="e"))
            .result(timeout=30)
            .name
        )

    def deploy(self, model: str, endpoint: str, replicas: int = 2, spot: bool = True) -> str:
        op = self.deploy_op(model, endpoint, replicas, spot)
        return op.result(timeout=120).deployed_model.id

    def deploy_op(self, model: str, endpoint: str, replicas: int = 2, spot: bool = True) -> Any:
        return self.endpoints.deploy_model(
            endpoint=endpoint,
            deployed_model=DeployedModel(
                model=model,
                dedicated_resources={
                    "machine_spec": {"machine_type": "n1-standard-4"},
                    "min_replica_count": replicas,
                    "spot": spot,
                },
            ),
            traffic_split={"0": 100},
        )

    def states(self, endpoint: str, dm_id: str) -> list[tuple[str, int]]:
        return [(r["state"], r["life"]) for r in self.emu.serving_replicas(endpoint, dm_id)]


def make_serving(emu: Emulator) -> Serving:
    api = resolve_endpoint("us-central1", emu.endpoint)
    return Serving(
        emu,
        make_client(ModelServiceClient, api),
        make_client(EndpointServiceClient, api),
        make_client(PredictionServiceClient, api),
    )


@pytest.fixture
def serving(tmp_path, env_cache) -> Iterator[Serving]:
    """An emulator (1 s grace period) with Model/Endpoint/Prediction clients."""
    with Emulator(tmp_path / "emu", grace_period=1.0, env_cache_dir=env_cache) as emu:
        yield make_serving(emu)
