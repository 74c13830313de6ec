"""deploy_spot_endpoint's requests carry what GCPC's ops send: the model version, the pipeline
run's system labels and the CMEK key.

The requests are read where they arrive: a loopback proxy in front of the emulator records every
request the real GAPIC clients send and forwards it unchanged. The deployments serve
``light_model_dir``: no replica needs to import scikit-learn for what these tests read.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kfp_spot.serving.deploy import DeployInputError
from kfp_spot.serving.entry import deploy_spot_endpoint
from kfp_spot.vertex.pipeline_context import SYSTEM_LABELS_ENV
from tests.jobs.artifacts import FakeArtifact

KEY = "projects/test-proj/locations/us-central1/keyRings/ring/cryptoKeys/key"
SYSTEM = {"vertex-ai-pipelines-run-billing-id": "8812", "team": "system"}


class Recorder:
    """Forwards every request to ``target`` and records (method, path, JSON body)."""

    def __init__(self, target: str) -> None:
        self.requests: list[tuple[str, str, object]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else None
                body = json.loads(data) if data else None
                recorder.requests.append((self.command, self.path, body))
                request = urllib.request.Request(target + self.path, data=data, method=self.command)
                request.add_header("Content-Type", "application/json")
                try:
                    with urllib.request.urlopen(request, timeout=60) as answer:
                        status, payload = answer.status, answer.read()
                except urllib.error.HTTPError as err:
                    status, payload = err.code, err.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_DELETE = do_PATCH = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def bodies(self, suffix: str) -> list[object]:
        return [b for m, p, b in self.requests if m == "POST" and p.split("?")[0].endswith(suffix)]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def recorder(serving) -> Iterator[Recorder]:
    rec = Recorder(serving.emu.endpoint)
    yield rec
    rec.close()


def _deploy(recorder: Recorder, tmp_path, **inputs):
    endpoint, vertex_model = FakeArtifact(uri=str(tmp_path / "endpoint")), FakeArtifact()
    deployed = deploy_spot_endpoint(
        endpoint=endpoint,
        vertex_model=vertex_model,
        gcp_resources=str(tmp_path / "gcp_resources"),
        api_endpoint=recorder.endpoint,
        min_replica_count=1,
        **{"project": "test-proj", **inputs},
    )
    return deployed, endpoint, vertex_model


def test_upload_and_endpoint_carry_system_labels_and_the_cmek_key(
    serving, recorder, light_model_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv(SYSTEM_LABELS_ENV, json.dumps(SYSTEM))
    _, endpoint, vertex_model = _deploy(
        recorder,
        tmp_path,
        model=FakeArtifact(uri=str(light_model_dir)),
        labels={"team": "ml"},
        encryption_spec_key_name=KEY,
    )
    (upload,) = recorder.bodies("/models:upload")
    (create,) = recorder.bodies("/endpoints")
    for sent in (upload["model"], create):
        assert sent["encryptionSpec"] == {"kmsKeyName": KEY}
        labels = sent["labels"]
        # The system labels, the user's winning on a clash, and the deployment's own label.
        assert labels["vertex-ai-pipelines-run-billing-id"] == "8812"
        assert labels["team"] == "ml" and "kfp_spot_deployment" in labels
    # The deploy request names the version the upload created, and so does the output.
    (deploy,) = recorder.bodies(":deployModel")
    assert deploy["deployedModel"]["model"].endswith("@1")
    assert vertex_model.metadata["resourceName"] == deploy["deployedModel"]["model"]
    # What the emulator stored answers with the same labels and key.
    model = serving.models.get_model(name=deploy["deployedModel"]["model"])
    assert model.encryption_spec.kms_key_name == KEY and model.labels["team"] == "ml"
    stored = serving.endpoints.get_endpoint(name=endpoint.metadata["resourceName"])
    assert stored.encryption_spec.kms_key_name == KEY


def test_an_uploaded_model_is_deployed_at_the_version_it_names(
    serving, recorder, light_model_dir, tmp_path
):
    from google.cloud.aiplatform_v1.types import Model

    from tests.serving.conftest import SKLEARN_IMAGE

    model = Model(
        display_name="m",
        artifact_uri=str(light_model_dir),
        container_spec={"image_uri": SKLEARN_IMAGE},
    )
    parent = "projects/test-proj/locations/us-central1"
    bare = serving.models.upload_model(parent=parent, model=model).result(timeout=30).model
    for name, sent in ((bare, f"{bare}@1"), (f"{bare}@default", f"{bare}@default")):
        out = tmp_path / name.rsplit("@", 1)[-1].rsplit("/", 1)[-1]
        _, _, vertex_model = _deploy(
            recorder,
            out,
            uploaded_model=FakeArtifact(metadata={"resourceName": name}),
        )
        assert recorder.bodies(":deployModel")[-1]["deployedModel"]["model"] == sent
        assert vertex_model.metadata["resourceName"] == sent


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("my-key", "projects/PROJECT/locations/REGION/keyRings/KEY_RING/cryptoKeys/KEY"),
        (KEY.replace("us-central1", "europe-west4"), "needs a key in the resource's own region"),
    ],
)
def test_a_bad_cmek_key_is_refused_before_any_call(key, says, light_model_dir, tmp_path):
    with pytest.raises(DeployInputError, match=says) as refused:
        deploy_spot_endpoint(
            project="test-proj",
            model=FakeArtifact(uri=str(light_model_dir)),
            endpoint=FakeArtifact(uri=str(tmp_path / "e")),
            vertex_model=FakeArtifact(),
            gcp_resources=str(tmp_path / "gcp_resources"),
            api_endpoint="http://127.0.0.1:9",  # nothing listens: any call would fail otherwise
            encryption_spec_key_name=key,
        )
    assert refused.value.field == "encryption_spec_key_name"


def test_the_emulator_refuses_a_key_outside_the_resources_region(serving):
    from google.api_core import exceptions
    from google.cloud.aiplatform_v1.types import Endpoint

    from tests.serving.conftest import PARENT

    endpoint = Endpoint(
        display_name="e",
        encryption_spec={"kms_key_name": KEY.replace("us-central1", "europe-west4")},
    )
    with pytest.raises(exceptions.BadRequest, match=r"encryption_spec\.kms_key_name"):
        serving.endpoints.create_endpoint(parent=PARENT, endpoint=endpoint)


def test_labels_too_many_with_the_runs_are_the_labels_input_not_a_traceback(
    light_model_dir, tmp_path, monkeypatch
):
    """64 labels and the run's billing label: merging them raised a bare InvalidValueError, a
    traceback ending the deploy task on Vertex AI, where the input refused should be named."""
    monkeypatch.setenv(SYSTEM_LABELS_ENV, json.dumps(SYSTEM))
    with pytest.raises(DeployInputError, match="2 of the pipeline run's VERTEX_AI") as refused:
        deploy_spot_endpoint(
            project="test-proj",
            model=FakeArtifact(uri=str(light_model_dir)),
            endpoint=FakeArtifact(uri=str(tmp_path / "e")),
            vertex_model=FakeArtifact(),
            gcp_resources=str(tmp_path / "gcp_resources"),
            api_endpoint="http://127.0.0.1:9",  # nothing listens: any call would fail otherwise
            labels={f"k{i}": "v" for i in range(64)},
        )
    assert refused.value.field == "labels"
