"""The component under kfp.local: inputs reach the runtime; outputs (new URIs too) come back."""

# No "from __future__ import annotations": KFP reads the pipeline's annotations as types.

import pytest
from kfp import dsl, local
from kfp.dsl import Artifact
from recording_server import RecordingServer, Script

from kfp_spot.components.launch_spot_job import LaunchSpotJobOp


@pytest.fixture
def local_runner(tmp_path):
    local.init(local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    return tmp_path / "root"


def test_component_runs_a_spot_job_and_sets_outputs(local_runner):
    with RecordingServer() as server:

        @dsl.pipeline
        def launch_only(endpoint: str) -> str:
            package = dsl.importer(
                artifact_uri="gs://bucket/pkg/trainer-0.1.tar.gz",
                artifact_class=Artifact,
                metadata={
                    "python_module": "trainer.task",
                    "package_uris": ["gs://bucket/pkg/trainer-0.1.tar.gz"],
                },
            )
            launch = LaunchSpotJobOp(
                project="test-proj",
                package=package.output,
                args=["--epochs", "2"],
                api_endpoint=endpoint,
                poll_interval_seconds=0.05,
            )
            return launch.outputs["Output"]

        task = launch_only(endpoint=server.endpoint)
    assert task.output == "SUCCEEDED"
    (body,) = server.created()
    pool = body["jobSpec"]["workerPoolSpecs"][0]
    assert pool["pythonPackageSpec"]["args"] == ["--epochs", "2"]
    base = body["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
    assert base.startswith(str(local_runner))


def test_component_outputs_directly(local_runner):
    with RecordingServer() as server:
        task = LaunchSpotJobOp(
            project="test-proj",
            container_image_uri="us-docker.pkg.dev/p/r/trainer:1",
            api_endpoint=server.endpoint,
            poll_interval_seconds=0.05,
        )
    (body,) = server.created()
    base = body["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
    assert task.outputs["Output"] == "SUCCEEDED"
    assert task.outputs["checkpoint"].uri == f"{base}/checkpoints"
    assert task.outputs["model"].uri == f"{base}/model"
    assert task.outputs["checkpoint"].metadata["latest_step"] == -1
    assert task.outputs["job_report"].metadata["attempts"] == 1


def test_user_error_fails_the_task_with_the_jobs_message(local_runner, capfd):
    script = Script(
        ["JOB_STATE_RUNNING", "JOB_STATE_FAILED"],
        error={
            "code": 3,
            "message": "The replica workerpool0-0 exited with a non-zero status of 7.",
        },
    )
    with RecordingServer(scripts=[script]) as server, pytest.raises(RuntimeError):
        LaunchSpotJobOp(
            project="test-proj",
            container_image_uri="us-docker.pkg.dev/p/r/trainer:1",
            api_endpoint=server.endpoint,
            poll_interval_seconds=0.05,
        )
    assert "USER_ERROR: The replica workerpool0-0 exited with a non-zero status of 7." in "".join(
        capfd.readouterr()
    )
