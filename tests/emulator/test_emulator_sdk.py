"""The Python SDK call of Vertex AI's *Use Spot VMs with training* page, unmodified, against the
emulator."""

from __future__ import annotations

import json

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1.types import Scheduling


@pytest.fixture
def sdk(emulator):
    # The SDK takes seconds to import (it loads v1beta1 too): only the worker running this test
    # imports it, not every worker that collects the module.
    from google.cloud import aiplatform
    from google.cloud.aiplatform import initializer

    # aiplatform.init is bound to this very object at import: restore its state, never replace it
    config = initializer.global_config
    saved = dict(vars(config))
    aiplatform.init(
        project="demo-project",
        location="us-central1",
        api_endpoint=emulator.endpoint,
        api_transport="rest",
        credentials=AnonymousCredentials(),
    )
    try:
        yield aiplatform
    finally:
        vars(config).clear()
        vars(config).update(saved)  # leave no global state behind


def test_seed_sdk_call_runs_a_spot_job(sdk, emulator, toy_package, tmp_path):
    worker_pool_spec = [
        {
            "machine_spec": {"machine_type": "n1-standard-4"},
            "replica_count": 1,
            "python_package_spec": {
                "executor_image_uri": "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest",
                "package_uris": [toy_package],
                "python_module": "toytrain.task",
                "args": ["--steps", "2", "--env-out", str(tmp_path / "env")],
            },
        }
    ]
    custom_job = sdk.CustomJob(
        display_name="seed-sdk",
        worker_pool_specs=worker_pool_spec,
        staging_bucket=str(tmp_path / "staging"),  # a local path: the SDK makes it gs:///...
    )
    custom_job.run(scheduling_strategy=sdk.compat.types.custom_job.Scheduling.Strategy.SPOT)

    assert custom_job.state.name == "JOB_STATE_SUCCEEDED"
    stored = emulator.job(custom_job.resource_name)
    assert stored.job_spec.scheduling.strategy == Scheduling.Strategy.SPOT
    env = json.loads((tmp_path / "env" / "workerpool0-0.json").read_text())
    # the SDK's output dir under the local staging path, as a local path the trainer can use
    assert env["AIP_MODEL_DIR"].startswith(str(tmp_path / "staging") + "/aiplatform-custom-job-")
    assert [r["endReason"] for r in emulator.attempts(custom_job.resource_name)] == ["SUCCEEDED"]
