"""Both components through their KFP interfaces under kfp.local: prepare → evaluate."""

import hashlib
from pathlib import Path
from typing import NamedTuple

from kfp import dsl, local
from kfp.dsl import Artifact, ClassificationMetrics, Markdown, Metrics

from kfp_spot.components.evaluate_checkpoint import EvaluateCheckpointOp
from kfp_spot.components.prepare_package import PreparePackageOp
from tests.evaluation.conftest import write_checkpoint
from tests.packaging.tiny import write_project


class Outputs(NamedTuple):
    passed: bool
    package: Artifact
    metrics: Metrics
    classification: ClassificationMetrics
    report: Markdown


@dsl.pipeline(name="prepare-and-evaluate")
def prepare_and_evaluate(
    source: str, staging_uri: str, checkpoint_uri: str, thresholds: dict
) -> Outputs:
    package = PreparePackageOp(source=source, staging_uri=staging_uri)
    checkpoint = dsl.importer(artifact_uri=checkpoint_uri, artifact_class=Artifact)
    evaluation = EvaluateCheckpointOp(
        checkpoint=checkpoint.output,
        package=package.outputs["package"],
        entry_point="tinytrainer.evaluate:evaluate",
        params={"classification": True},
        thresholds=thresholds,
    )
    return Outputs(
        passed=evaluation.outputs["Output"],
        package=package.outputs["package"],
        metrics=evaluation.outputs["metrics"],
        classification=evaluation.outputs["classification_metrics"],
        report=evaluation.outputs["report"],
    )


def test_prepare_then_evaluate_under_kfp_local(tmp_path, env_cache, monkeypatch):
    monkeypatch.setenv("KFP_SPOT_CACHE_DIR", str(env_cache))
    project = write_project(tmp_path / "src")
    root = tmp_path / "run" / "checkpoints"
    write_checkpoint(root, 5, 0.7)
    write_checkpoint(root, 10, 0.9)
    local.init(
        local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "pipeline_root")
    )
    task = prepare_and_evaluate(
        source=str(project),
        staging_uri=str(tmp_path / "stage"),
        checkpoint_uri=str(root),
        thresholds={"accuracy": ">=0.85", "loss": "<=0.05"},
    )
    out = task.outputs
    package = out["package"]
    assert package.uri.startswith(str(tmp_path / "stage" / "tiny-trainer"))
    assert package.metadata["sha256"] == hashlib.sha256(Path(package.uri).read_bytes()).hexdigest()
    assert package.metadata["python_module"] == "tinytrainer.task"
    assert package.metadata["package_uris"] == [package.uri]

    # loss is 0.1 > 0.05: the gate fails although accuracy passes.
    assert out["passed"] is False
    metrics = out["metrics"].metadata
    assert int(metrics["checkpoint_step"]) == 10 and int(metrics["seen_step"]) == 10
    manifest = (root / "step-10" / "manifest.json").read_bytes()
    assert metrics["checkpoint_manifest_sha256"] == hashlib.sha256(manifest).hexdigest()
    assert metrics["passed"] is False
    matrix = out["classification"].metadata["confusionMatrix"]
    assert [s["displayName"] for s in matrix["annotationSpecs"]] == ["cat", "dog"]
    assert [r["row"] for r in matrix["rows"]] == [[5, 1], [2, 7]]
    report = Path(out["report"].path).read_text()
    assert "FAILED" in report and "| step | 10 " in report
    assert "loss <= 0.05" in report and "FAIL |" in report
