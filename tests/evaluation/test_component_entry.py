"""The evaluation adapter reads the artifacts it is given as KFP hands them over."""

from types import SimpleNamespace

import pytest
from kfp.dsl import ClassificationMetrics

from kfp_spot.evaluation import component_entry
from kfp_spot.evaluation.component import latest_step_of


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"latest_step": 40}, 40),
        ({"latest_step": 40.0}, 40),  # kfp.local hands integers back as floats
        ({"latest_step": -1}, None),  # the launcher's "no checkpoint"
        ({}, None),
        (None, None),
        ({"latest_step": "40"}, None),
    ],
)
def test_latest_step_of(metadata, expected):
    assert latest_step_of(metadata) == expected


def test_component_entry_fills_every_output(ckpt, package, env_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("KFP_SPOT_CACHE_DIR", str(env_cache))
    checkpoint = SimpleNamespace(uri=str(ckpt), metadata={"latest_step": 20.0})
    package_artifact = SimpleNamespace(uri=package.uri, metadata=package.metadata())
    metrics = SimpleNamespace(metadata={})
    classification = SimpleNamespace(metadata={})
    report = SimpleNamespace(path=str(tmp_path / "out" / "report.md"), metadata={})
    passed = component_entry(
        checkpoint=checkpoint,
        package=package_artifact,
        metrics=metrics,
        classification_metrics=classification,
        report=report,
        entry_point="tinytrainer.evaluate:evaluate",
        params={"classification": True},
        thresholds={"accuracy": 0.9},
    )
    assert passed is True
    assert metrics.metadata["checkpoint_step"] == 20 and metrics.metadata["seen_step"] == 20
    assert metrics.metadata["passed"] is True
    # Exactly what kfp's own ClassificationMetrics.log_confusion_matrix writes.
    expected = ClassificationMetrics()
    expected.log_confusion_matrix(["cat", "dog"], [[5, 1], [2, 7]])
    assert classification.metadata == expected.metadata
    text = (tmp_path / "out" / "report.md").read_text()
    assert text.startswith("# Checkpoint evaluation: PASSED")
    assert package.sha256 in text and "accuracy >= 0.9" in text
