"""Checkpoint directories that a trainer wrote in its own layout (no kfp-spot manifest)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from kfp_spot.evaluation import EvaluationInputError, component_entry, evaluate
from kfp_spot.layout import inspect_layout
from kfp_spot.packaging import prepare_package
from tests.evaluation.foreign import write_foreign_checkpoints, write_foreign_project

EXPECTED_ERROR = (
    "checkpoint: no kfp-spot checkpoint under {root}: expected step-<n>/manifest.json directories "
    "(the layout kfp_spot.trainer writes), found checkpoint.json, ckpt-1.pkl, ckpt-10.pkl, "
    "ckpt-11.pkl, ckpt-12.pkl and 14 more. To evaluate this directory as it is (the entry point "
    "gets the whole directory, unverified), set allow_foreign_layout=True."
)


@pytest.fixture(scope="module")
def foreign_package(tmp_path_factory):
    root = tmp_path_factory.mktemp("foreign")
    project = write_foreign_project(root / "src")
    return prepare_package(str(project), str(root / "stage"))


@pytest.fixture
def foreign_ckpt(tmp_path):
    root = tmp_path / "run" / "checkpoints"
    write_foreign_checkpoints(root)
    return root


def test_without_the_input_the_error_names_the_layout_what_was_found_and_the_input(
    foreign_ckpt, foreign_package, env_cache
):
    with pytest.raises(EvaluationInputError) as info:
        evaluate(
            str(foreign_ckpt),
            [foreign_package.uri],
            cache_dir=env_cache,
        )
    assert str(info.value) == EXPECTED_ERROR.format(root=foreign_ckpt)
    assert info.value.field == "checkpoint"
    assert "\n" not in str(info.value)


def test_with_the_input_the_entry_point_gets_the_whole_directory_unverified(
    foreign_ckpt, foreign_package, env_cache
):
    result = evaluate(
        str(foreign_ckpt),
        [foreign_package.uri],
        allow_foreign_layout=True,
        thresholds={"accuracy": ">=0.85"},
        cache_dir=env_cache,
    )
    assert result.metrics == {"accuracy": pytest.approx(0.9), "trained_steps": 18.0}
    assert result.passed and result.layout == "foreign" and result.verified is False
    assert result.step == -1 and result.manifest_digest == ""
    meta = result.metrics_metadata()
    assert meta["checkpoint_layout"] == "foreign" and meta["checkpoint_verified"] is False
    with pytest.raises(EvaluationInputError, match=r'has none .* use step="latest"'):
        evaluate(
            str(foreign_ckpt),
            [foreign_package.uri],
            allow_foreign_layout=True,
            step="18",
            cache_dir=env_cache,
        )


def test_the_component_fails_with_one_line_not_a_traceback(
    foreign_ckpt, foreign_package, env_cache, tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("KFP_SPOT_CACHE_DIR", str(env_cache))

    def artifact(**kw):
        return SimpleNamespace(metadata={}, uri="", path=str(tmp_path / "out" / "x"), **kw)

    outputs = {
        "metrics": artifact(),
        "classification_metrics": artifact(),
        "report": SimpleNamespace(metadata={}, path=str(tmp_path / "report.md")),
    }
    checkpoint = SimpleNamespace(uri=str(foreign_ckpt), metadata={"latest_step": -1.0})
    package = SimpleNamespace(uri=foreign_package.uri, metadata={})
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as exited:
        component_entry(checkpoint=checkpoint, package=package, **outputs)
    assert exited.value.code == "evaluate_checkpoint: " + EXPECTED_ERROR.format(root=foreign_ckpt)
    passed = component_entry(
        checkpoint=checkpoint, package=package, allow_foreign_layout=True, **outputs
    )
    assert passed is True
    assert outputs["metrics"].metadata["checkpoint_layout"] == "foreign"
    report = (tmp_path / "report.md").read_text()
    assert "| verified | **no**" in report and "foreign layout" in report


def test_layouts_are_told_apart(tmp_path, foreign_ckpt):
    from tests.evaluation.conftest import write_checkpoint

    assert inspect_layout(str(tmp_path / "missing")).kind == "empty"
    found = inspect_layout(str(foreign_ckpt))
    assert found.kind == "foreign" and len(found.names) == 19
    ours = tmp_path / "ours"
    write_checkpoint(ours, 3, 0.5)
    assert inspect_layout(str(ours)).kind == "kfp-spot"


def test_the_launcher_records_the_layout_and_warns_when_nothing_was_committed(
    foreign_ckpt, tmp_path, caplog
):
    from kfp_spot.jobs.entry import _set_outputs

    def outputs(checkpoint_dir):
        result = SimpleNamespace(
            checkpoint_dir=str(checkpoint_dir),
            latest=None,
            resumed_from=None,
            model_dir=str(tmp_path / "model"),
        )
        checkpoint = SimpleNamespace(uri="", metadata={})
        with caplog.at_level(logging.WARNING):
            _set_outputs(result, checkpoint, None, None)
        return checkpoint.metadata

    meta = outputs(foreign_ckpt)
    assert meta["layout"] == "foreign" and meta["latest_step"] == -1
    assert (
        f"the job committed no kfp-spot checkpoint step under {foreign_ckpt} (found "
        "checkpoint.json, ckpt-1.pkl, ckpt-10.pkl, ckpt-11.pkl, ckpt-12.pkl and 14 more); "
        "evaluate_checkpoint scores this layout with allow_foreign_layout=True"
    ) in caplog.text
    caplog.clear()
    assert outputs(tmp_path / "nothing")["layout"] == "empty"
    assert "(found nothing: the directory is empty or does not exist)" in caplog.text


@pytest.mark.parametrize("given", ["step", "run"])
def test_a_step_or_run_directory_given_as_the_checkpoint_names_the_root_not_a_foreign_layout(
    tmp_path, foreign_package, env_cache, given
):
    # evaluate_checkpoint's checkpoint_uri given as .../step-3 or as the kfp-spot run directory:
    # allow_foreign_layout would score it unverified; the checkpoint root is what was meant
    from tests.evaluation.conftest import write_checkpoint

    root = tmp_path / "run" / "job" / "checkpoints"
    write_checkpoint(root, 3, 0.5)
    uri = root / "step-3" if given == "step" else tmp_path / "run"
    with pytest.raises(EvaluationInputError) as info:
        evaluate(str(uri), [foreign_package.uri], cache_dir=env_cache)
    where = (
        f"{uri} is itself the directory of step 3, not a checkpoint root: give the directory "
        f"above it, {root} with step=3"
        if given == "step"
        else f"{uri} holds its checkpoints in {root}: give that directory"
    )
    assert str(info.value) == (
        f"checkpoint: no kfp-spot checkpoint under {uri}: expected step-<n>/manifest.json "
        f"directories (the layout kfp_spot.trainer writes); {where}"
    )
    assert info.value.field == "checkpoint"
