"""The example pipeline end to end on the emulator: train on Spot, gate, deploy on Spot, predict."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from google.cloud.aiplatform_v1 import EndpointServiceClient, PredictionServiceClient

from kfp_spot import accounting
from kfp_spot.emulator import Emulator
from kfp_spot.pipelines import catalog
from kfp_spot.pipelines.local_run import (
    EXAMPLE_SOURCE,
    LOCAL_LOCATION,
    LOCAL_PROJECT,
    run_local,
    summarize,
)
from kfp_spot.vertex.client import make_client, resolve_endpoint
from tests.serving.conftest import wait_for


@pytest.mark.slow
def test_the_gated_model_is_served_on_spot_and_predicts_what_the_checkpoint_does(tmp_path):
    result = run_local(
        tmp_path,
        training_args=("--epochs", "8", "--checkpoint-every", "2"),
        preemptions=0,
        template=catalog.pipeline_path("spot_training_and_serving"),
        progress=None,
    )
    assert result.outcome == "SUCCEEDED" and result.passed is True
    # The run's ledger and report show the Spot serving replicas and what they cost.
    assert {r["strategy"] for r in result.serving} == {"SPOT"} and len(result.serving) >= 2
    assert sum(r["spotCost"] for r in result.serving) < sum(
        r["onDemandCost"] for r in result.serving
    )
    assert "## Serving replicas (serving ledger)" in (tmp_path / "report.md").read_text()
    # ... from the one accounting summary, which run.json keeps and the printout shows.
    serving = result.serving_summary
    assert serving is not None and serving.spot_lives == len(result.serving) >= 2
    recorded = json.loads((tmp_path / "run.json").read_text())["serving_accounting"]
    assert recorded["replica_lives"] == len(result.serving)
    assert recorded["cost_usd"] == serving.costs.paid_usd < recorded["cost_on_demand_usd"]
    printed = summarize(result)
    assert (
        f"serving:            {len(serving.lives)} replica lives ({serving.spot_lives} on Spot)"
        in printed
    )
    assert f"serving cost:       {accounting.describe_cost(serving.costs)}" in printed

    # The run's emulator stopped with the run; on its state dir the deployment comes back.
    with Emulator(tmp_path / "emulator", grace_period=1.0) as emu:
        api = resolve_endpoint(LOCAL_LOCATION, emu.endpoint)
        endpoints = make_client(EndpointServiceClient, api)
        (endpoint,) = endpoints.list_endpoints(
            parent=f"projects/{LOCAL_PROJECT}/locations/{LOCAL_LOCATION}"
        )
        (deployed,) = endpoint.deployed_models
        assert deployed.dedicated_resources.spot is True
        assert deployed.dedicated_resources.min_replica_count == 2
        wait_for(
            lambda: (
                [r["state"] for r in emu.serving_replicas(endpoint.name, deployed.id)]
                == ["READY", "READY"]
            ),
            timeout=120,
            what="the replicas back",
        )
        sys.path.insert(0, str(EXAMPLE_SOURCE))
        try:
            from trainer import data, model

            from kfp_spot.trainer import load_checkpoint

            state = load_checkpoint(f"{result.checkpoint_uri}/step-{result.latest_step}").state
            _, _, X_test, _ = data.split(int(state["config"]["split_seed"]))
            local = model.predict_proba(state["params"], X_test).argmax(axis=1)
        finally:
            sys.path.remove(str(EXAMPLE_SOURCE))
        served = make_client(PredictionServiceClient, api).predict(
            endpoint=endpoint.name, instances=X_test.tolist()
        )
        assert np.array_equal(np.asarray(served.predictions, dtype=int), local)
        assert float(result.metrics["step"]) == result.latest_step  # the evaluated checkpoint
