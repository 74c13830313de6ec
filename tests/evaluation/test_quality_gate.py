"""A failing quality gate skips the downstream step; a passing one runs it (kfp.local)."""

from pathlib import Path

import pytest
from kfp import dsl, local
from kfp.dsl import Artifact

from kfp_spot.components.evaluate_checkpoint import EvaluateCheckpointOp
from kfp_spot.components.prepare_package import PreparePackageOp
from tests.evaluation.conftest import write_checkpoint
from tests.packaging.tiny import write_project


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def downstream(marker: str):
    """Stands for deployment: leaves a file behind when it runs."""
    with open(marker, "w") as handle:
        handle.write("ran\n")


@dsl.pipeline(name="quality-gate")
def gated(source: str, staging_uri: str, checkpoint_uri: str, thresholds: dict, marker: str):
    package = PreparePackageOp(source=source, staging_uri=staging_uri)
    checkpoint = dsl.importer(artifact_uri=checkpoint_uri, artifact_class=Artifact)
    evaluation = EvaluateCheckpointOp(
        checkpoint=checkpoint.output,
        package=package.outputs["package"],
        entry_point="tinytrainer.evaluate:evaluate",
        thresholds=thresholds,
    )
    with dsl.If(evaluation.outputs["Output"] == True, name="gate"):  # noqa: E712
        downstream(marker=marker)


@pytest.mark.parametrize(
    ("thresholds", "runs"),
    [({"accuracy": ">=0.85"}, True), ({"accuracy": ">=0.95"}, False)],
    ids=["passing-gate-runs-downstream", "failing-gate-skips-downstream"],
)
def test_quality_gate(tmp_path, env_cache, monkeypatch, thresholds, runs):
    monkeypatch.setenv("KFP_SPOT_CACHE_DIR", str(env_cache))
    project = write_project(tmp_path / "src")
    root = tmp_path / "run" / "checkpoints"
    write_checkpoint(root, 10, 0.9)
    marker = tmp_path / "downstream-ran"
    local.init(
        local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "pipeline_root")
    )
    gated(
        source=str(project),
        staging_uri=str(tmp_path / "stage"),
        checkpoint_uri=str(root),
        thresholds=thresholds,
        marker=str(marker),
    )
    assert Path(marker).exists() is runs
