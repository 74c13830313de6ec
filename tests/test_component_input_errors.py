"""Under kfp.local a component's bad input fails the task with one line naming it, no traceback."""

# No "from __future__ import annotations": KFP reads the pipeline's annotations as types.

import pytest
from kfp import dsl, local

from kfp_spot.components.launch_spot_job import LaunchSpotJobOp
from kfp_spot.components.prepare_package import PreparePackageOp
from kfp_spot.components.promote_model import PromoteModelOp


@pytest.fixture
def local_runner(tmp_path):
    local.init(local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    return tmp_path / "root"


def _task_output(capfd) -> str:
    return "".join(capfd.readouterr())


def test_launch_spot_job_reports_a_bad_input_in_one_line(local_runner, capfd):
    with pytest.raises(RuntimeError):
        LaunchSpotJobOp(
            project="test-proj",
            container_image_uri="us-docker.pkg.dev/p/r/trainer:1",
            timeout="99999999999999999999s",
            api_endpoint="http://127.0.0.1:9",  # never contacted
        )
    out = _task_output(capfd)
    assert "launch_spot_job input 'timeout': expected a duration such as '3600s'" in out
    assert "Traceback" not in out


def test_promote_model_reports_a_missing_model_in_one_line(local_runner, tmp_path, capfd):
    @dsl.pipeline
    def promote_only():
        model = dsl.importer(artifact_uri=str(tmp_path / "no-model"), artifact_class=dsl.Model)
        metrics = dsl.importer(
            artifact_uri=str(tmp_path / "metrics"),
            artifact_class=dsl.Metrics,
            metadata={"accuracy": 0.9},
        )
        PromoteModelOp(model=model.output, metrics=metrics.output)

    with pytest.raises(RuntimeError):
        promote_only()
    out = _task_output(capfd)
    assert "promote_model input 'model':" in out
    assert "is missing or empty; expected the training job's model directory" in out
    assert "Traceback" not in out


def test_prepare_package_reports_a_missing_source_in_one_line(local_runner, tmp_path, capfd):
    with pytest.raises(RuntimeError):
        PreparePackageOp(source=str(tmp_path / "no-such-source"), staging_uri=str(tmp_path / "s"))
    out = _task_output(capfd)
    assert "source:" in out and "no-such-source" in out
    assert "Traceback" not in out
