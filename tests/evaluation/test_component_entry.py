"""The evaluation adapter reads the artifacts it is given as KFP hands them over."""

from types import SimpleNamespace

import pytest
from kfp.dsl import ClassificationMetrics

from kfp_spot.evaluation import component_entry
from kfp_spot.evaluation.component import latest_step_of
from kfp_spot.evaluation.entry_point import resolve_entry_point


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


def test_an_empty_entry_point_calls_the_one_the_package_names(
    ckpt, package, env_cache, tmp_path, monkeypatch
):
    """A pipeline's empty ``evaluation_entry_point`` takes the package's own (recorded by
    prepare_package from its ``[tool.kfp-spot]``), not the bundled example's."""
    monkeypatch.setenv("KFP_SPOT_CACHE_DIR", str(env_cache))
    meta = {**package.metadata(), "evaluation_entry_point": "tinytrainer.evaluate:evaluate"}
    metrics = SimpleNamespace(metadata={})
    passed = component_entry(
        checkpoint=SimpleNamespace(uri=str(ckpt), metadata={"latest_step": 20.0}),
        package=SimpleNamespace(uri=package.uri, metadata=meta),
        metrics=metrics,
        classification_metrics=SimpleNamespace(metadata={}),
        report=SimpleNamespace(path=str(tmp_path / "report.md"), metadata={}),
        thresholds={"accuracy": 0.9},
    )
    assert passed is True and metrics.metadata["seen_step"] == 20


@pytest.mark.parametrize(
    ("given", "metadata", "called"),
    [
        ("pkg.ev:score", {"evaluation_entry_point": "other:f"}, "pkg.ev:score"),
        ("", {"evaluation_entry_point": "other:f"}, "other:f"),
        # neither: evaluate() reads the package itself, as for any caller, else the default
        ("", {}, ""),
        ("", {"evaluation_entry_point": ""}, ""),
    ],
)
def test_which_entry_point_an_evaluation_calls(given, metadata, called):
    assert resolve_entry_point(given, metadata) == called


def test_a_package_artifact_without_the_recorded_entry_point_calls_the_declared_one(
    ckpt, declared_package, env_cache, tmp_path, monkeypatch
):
    """A package artifact another step made (its metadata: package_uris only) is evaluated with
    the function its pyproject.toml declares, as evaluate() called without entry_point is."""
    monkeypatch.setenv("KFP_SPOT_CACHE_DIR", str(env_cache))
    meta = {"package_uris": list(declared_package.package_uris)}
    metrics = SimpleNamespace(metadata={})
    component_entry(
        checkpoint=SimpleNamespace(uri=str(ckpt), metadata={}),
        package=SimpleNamespace(uri=declared_package.uri, metadata=meta),
        metrics=metrics,
        classification_metrics=SimpleNamespace(metadata={}),
        report=SimpleNamespace(path=str(tmp_path / "report.md"), metadata={}),
    )
    assert metrics.metadata["seen_step"] == 30


def test_a_gate_and_params_given_as_json_text_are_read_as_the_launch_reads_them(
    ckpt, package, env_cache, tmp_path, monkeypatch
):
    """A dict reaches a task as its JSON text where it passes through a string (a component
    loaded from its YAML, a `--param`); the launch reads that, so must the gate after it."""
    monkeypatch.setenv("KFP_SPOT_CACHE_DIR", str(env_cache))
    metrics = SimpleNamespace(metadata={})
    passed = component_entry(
        checkpoint=SimpleNamespace(uri=str(ckpt), metadata={"latest_step": 20.0}),
        package=SimpleNamespace(uri=package.uri, metadata=package.metadata()),
        metrics=metrics,
        classification_metrics=SimpleNamespace(metadata={}),
        report=SimpleNamespace(path=str(tmp_path / "report.md"), metadata={}),
        entry_point="tinytrainer.evaluate:evaluate",
        params='{"classification": true}',
        thresholds='{"accuracy": ">=0.99"}',
        fallback_to_previous="false",
        allow_foreign_layout="false",
    )
    assert passed is False and metrics.metadata["passed"] is False  # 0.99 was read as the bound


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ({"fallback_to_previous": "yes"}, "fallback_to_previous: expected true or false"),
        ({"thresholds": "accuracy>=0.9"}, "thresholds: is not valid JSON"),
        ({"thresholds": ["accuracy"]}, "thresholds: expected a dict"),
        # The last value was kept silently (a gate on >=0.1 alone), where --param refuses it.
        (
            {"thresholds": '{"accuracy": ">=0.9", "accuracy": ">=0.1"}'},
            """thresholds: key 'accuracy' is given twice (">=0.9" and ">=0.1"); a JSON object """
            "holds each key once: give it once",
        ),
        ({"params": '{"a": 1, "b": {"c": 1, "c": 2}}'}, "params: key 'c' is given twice (1 and 2)"),
    ],
)
def test_a_bad_parameter_is_one_line_naming_it(ckpt, package, tmp_path, given, needle):
    with pytest.raises(SystemExit) as info:
        component_entry(
            checkpoint=SimpleNamespace(uri=str(ckpt), metadata={}),
            package=SimpleNamespace(uri=package.uri, metadata=package.metadata()),
            metrics=SimpleNamespace(metadata={}),
            classification_metrics=SimpleNamespace(metadata={}),
            report=SimpleNamespace(path=str(tmp_path / "report.md"), metadata={}),
            **given,
        )
    assert needle in str(info.value.code)


@pytest.mark.parametrize(
    ("package_uris", "got"),
    [
        ("notalist", "is not valid JSON"),
        (5, "got int"),
        ('{"a": 1}', "got dict"),
        (["gs://b/p.tar.gz", 3], "got an item 3"),
    ],
)
def test_bad_package_uris_metadata_names_it_and_what_it_must_be(tmp_path, package_uris, got):
    # "package: is not valid JSON" named neither the metadata field nor what it should hold.
    with pytest.raises(SystemExit) as info:
        component_entry(
            checkpoint=SimpleNamespace(uri=str(tmp_path), metadata={}),
            package=SimpleNamespace(uri="", metadata={"package_uris": package_uris}),
            metrics=SimpleNamespace(metadata={}),
            classification_metrics=SimpleNamespace(metadata={}),
            report=SimpleNamespace(path=str(tmp_path / "report.md"), metadata={}),
        )
    message = str(info.value.code)
    assert message.startswith("evaluate_checkpoint: package: metadata package_uris ")
    assert "a list of the package's gs:// URIs or local paths" in message
    assert got in message
    assert not (tmp_path / "report.md").exists()


def test_a_step_in_a_newer_format_fails_the_task_on_one_line(ckpt, package, tmp_path):
    # A newer kfp-spot's step 30: step 20 was evaluated in its place, as if 30 were torn.
    import json

    from kfp_spot import checkpoints

    manifest = ckpt / "step-30" / checkpoints.MANIFEST_NAME
    doc = json.loads(manifest.read_bytes())
    doc.pop("manifest_sha256")
    manifest.write_bytes(checkpoints.seal({**doc, "format": "kfp-spot-checkpoint/3"}))
    with pytest.raises(SystemExit) as info:
        component_entry(
            checkpoint=SimpleNamespace(uri=str(ckpt), metadata={}),
            package=SimpleNamespace(uri=package.uri, metadata=package.metadata()),
            metrics=SimpleNamespace(metadata={}),
            classification_metrics=SimpleNamespace(metadata={}),
            report=SimpleNamespace(path=str(tmp_path / "report.md"), metadata={}),
            fallback_to_previous=True,
        )
    message = str(info.value.code)
    assert message.startswith("evaluate_checkpoint: step 30 (") and "\n" not in message
    assert "'kfp-spot-checkpoint/3'" in message and "upgrade kfp-spot" in message
    assert not (tmp_path / "report.md").exists()
