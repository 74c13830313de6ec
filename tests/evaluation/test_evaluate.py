"""evaluate(): verified checkpoint step → the package's evaluate() → metrics and verdict."""

import hashlib
from pathlib import Path

import pytest

from kfp_spot.checkpoints import CheckpointCorruptError
from kfp_spot.evaluation import evaluate
from kfp_spot.evaluation.errors import EvaluationInputError

ENTRY = "tinytrainer.evaluate:evaluate"


def run(ckpt, package, env_cache, **kwargs):
    kwargs.setdefault("entry_point", ENTRY)
    return evaluate(str(ckpt), list(package.package_uris), cache_dir=env_cache, **kwargs)


def test_latest_step_is_verified_and_scored(ckpt, package, env_cache):
    result = run(ckpt, package, env_cache)
    assert result.step == 30
    assert result.metrics["seen_step"] == 30  # the entry point loaded step 30's files
    assert result.metrics["accuracy"] == pytest.approx(0.9)
    manifest = (ckpt / "step-30" / "manifest.json").read_bytes()
    assert result.manifest_digest == hashlib.sha256(manifest).hexdigest()
    assert result.passed and result.checks == []


def test_latest_follows_the_checkpoint_artifact(ckpt, package, env_cache):
    result = run(ckpt, package, env_cache, latest_step=20)
    assert result.step == 20 and result.metrics["seen_step"] == 20


def test_a_given_step(ckpt, package, env_cache):
    assert run(ckpt, package, env_cache, step="10").metrics["seen_step"] == 10


def test_best_by_metric_max_and_min(ckpt, package, env_cache):
    assert run(ckpt, package, env_cache, step="best:accuracy").step == 20
    # "loss" is minimised without being told; an explicit direction wins.
    assert run(ckpt, package, env_cache, step="best:loss").step == 20
    assert run(ckpt, package, env_cache, step="best:accuracy:min").step == 10


def test_thresholds_decide_passed(ckpt, package, env_cache):
    good = run(ckpt, package, env_cache, thresholds={"accuracy": ">=0.85", "loss": "<=0.2"})
    assert good.passed and all(c.passed for c in good.checks)
    bad = run(ckpt, package, env_cache, thresholds={"accuracy": 0.95, "loss": "<0.5"})
    assert not bad.passed
    assert [c.passed for c in bad.checks] == [False, True]


def test_params_reach_the_entry_point(ckpt, package, env_cache):
    result = run(ckpt, package, env_cache, params={"scale": 0.5})
    assert result.metrics["accuracy"] == pytest.approx(0.45)


def test_what_the_entry_point_writes_to_stderr_reaches_the_log_when_it_succeeds(
    ckpt, package, env_cache, caplog
):
    # Before: stderr was read only for a failure's last lines; a library's warnings (a metric
    # ill-defined, a deprecation) were dropped from a run that succeeded.
    with caplog.at_level("INFO", logger="kfp_spot.evaluation.invoke"):
        result = run(ckpt, package, env_cache, params={"warn": True})
    assert result.metrics["accuracy"] == pytest.approx(0.9)
    lines = [r.getMessage() for r in caplog.records]
    assert any(
        line.startswith("evaluate (stderr): ")
        and line.endswith("UserWarning: the held-out split has 3 examples")
        for line in lines
    ), lines
    assert "evaluate: evaluating step 30 from " in "\n".join(lines)


def test_a_long_evaluations_output_reaches_the_log_while_it_runs(
    ckpt, package, env_cache, tmp_path
):
    # Before: its output was logged only once the process ended (and a print without flush sat
    # in its buffer): a slow evaluation showed nothing in the task's log while it ran. This one
    # ends only once its line was logged: without streaming it runs into the timeout.
    import logging

    release = tmp_path / "release"

    class Release(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == "evaluate: still evaluating":
                release.touch()

    logger = logging.getLogger("kfp_spot.evaluation.invoke")
    handler, level = Release(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        result = run(ckpt, package, env_cache, params={"wait_for": str(release)}, timeout_s=60)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert release.exists() and result.metrics["accuracy"] == pytest.approx(0.9)


def test_output_that_is_no_text_does_not_stop_the_evaluation(ckpt, package, env_cache):
    # Undecodable bytes must not stop the reading of its output: the process would block on a
    # full pipe, and the evaluation with it.
    result = run(ckpt, package, env_cache, params={"bytes": True}, timeout_s=60)
    assert result.metrics["accuracy"] == pytest.approx(0.9)


def test_torn_latest_checkpoint_is_an_error_that_says_so(ckpt, package, env_cache):
    (ckpt / "step-30" / "manifest.json").unlink()
    with pytest.raises(CheckpointCorruptError, match=r"latest checkpoint step-30 .* torn"):
        run(ckpt, package, env_cache)


def test_corrupted_latest_checkpoint_is_an_error_naming_the_file(ckpt, package, env_cache):
    (ckpt / "step-30" / "model.json").write_text('{"accuracy": 1.0, "step": 30}')
    with pytest.raises(CheckpointCorruptError, match=r"step-30.*model\.json"):
        run(ckpt, package, env_cache)


def test_fallback_to_previous_evaluates_the_newest_step_that_verifies(ckpt, package, env_cache):
    (ckpt / "step-30" / "model.json").write_text("garbage")
    result = run(ckpt, package, env_cache, fallback_to_previous=True)
    assert result.step == 20 and result.metrics["seen_step"] == 20
    assert [step for step, _ in result.skipped] == [30]
    assert "fell back to step 20" in result.selection


def test_confusion_matrix_is_returned(ckpt, package, env_cache):
    result = run(ckpt, package, env_cache, params={"classification": True})
    assert result.confusion_matrix.labels == ("cat", "dog")
    assert result.confusion_matrix_metadata() == {
        "annotationSpecs": [{"displayName": "cat"}, {"displayName": "dog"}],
        "rows": [{"row": [5, 1]}, {"row": [2, 7]}],
    }
    assert "confusion_matrix" not in result.metrics


def test_local_checkpoint_is_not_modified(ckpt, package, env_cache):
    before = {p: p.read_bytes() for p in Path(ckpt).rglob("*") if p.is_file()}
    run(ckpt, package, env_cache)
    assert {p: p.read_bytes() for p in Path(ckpt).rglob("*") if p.is_file()} == before


def test_best_step_that_is_corrupted_is_refused_or_replaced_by_the_next_best(
    ckpt, package, env_cache
):
    (ckpt / "step-20" / "model.json").write_text("tampered")
    with pytest.raises(CheckpointCorruptError, match=r"best checkpoint by accuracy \(step-20\)"):
        run(ckpt, package, env_cache, step="best:accuracy")
    result = run(ckpt, package, env_cache, step="best:accuracy", fallback_to_previous=True)
    assert result.step == 30 and [s for s, _ in result.skipped] == [20]


def test_latest_named_by_the_artifact_but_missing_is_torn(ckpt, package, env_cache):
    # The launcher said step 40 was committed, but there is no such step: refuse to guess.
    with pytest.raises(CheckpointCorruptError, match=r"latest checkpoint step-40 .*torn"):
        run(ckpt, package, env_cache, latest_step=40)


def test_a_module_only_this_machines_pythonpath_holds_is_not_imported(
    ckpt, package, env_cache, tmp_path, monkeypatch
):
    # On Vertex AI the evaluation imports the installed packages only: a source tree on this
    # machine's PYTHONPATH must not make a module importable that the package does not hold.
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "strayeval.py").write_text("def evaluate(d, p):\n    return {'accuracy': 1.0}\n")
    monkeypatch.setenv("PYTHONPATH", str(stray))
    with pytest.raises(EvaluationInputError, match=r"cannot import module .strayeval."):
        run(ckpt, package, env_cache, entry_point="strayeval:evaluate")
    assert run(ckpt, package, env_cache).step == 30  # the package's own still imports


def test_a_variable_only_this_machine_sets_is_not_seen_by_the_entry_point(
    ckpt, package, env_cache, monkeypatch, caplog
):
    # On Vertex AI the evaluation runs in the task's container, without this shell's variables.
    monkeypatch.setenv("TINY_EVAL_SETTING", "/home/me/eval-data")
    result = run(ckpt, package, env_cache, params={"env": True})
    assert result.metrics["env_set"] == 0.0
    assert "TINY_EVAL_SETTING (read at tinytrainer/evaluate.py, line" in caplog.text
    assert "task.set_env_variable" in caplog.text


def test_without_an_entry_point_the_package_declared_one_is_called(
    ckpt, declared_package, env_cache
):
    # its [tool.kfp-spot] evaluation-entry-point, read from the staged sdist as prepare_package
    # reads it from the source; not the bundled example's trainer.evaluate:evaluate
    assert declared_package.evaluation_entry_point == ENTRY
    result = evaluate(str(ckpt), list(declared_package.package_uris), cache_dir=env_cache)
    assert result.entry_point == ENTRY and result.metrics["seen_step"] == 30


def test_a_package_declaring_none_is_told_the_default_was_used_and_how_to_set_one(
    ckpt, package, env_cache
):
    with pytest.raises(EvaluationInputError) as info:
        evaluate(str(ckpt), list(package.package_uris), cache_dir=env_cache)
    message = str(info.value)
    assert message.startswith("entry_point: cannot import module 'trainer.evaluate'")
    assert message.endswith(
        "; trainer.evaluate:evaluate is the default (the bundled example's), used because none "
        "was given and the package declares none: pass entry_point='MODULE:FUNCTION', or declare "
        'evaluation-entry-point = "MODULE:FUNCTION" under [tool.kfp-spot] in its pyproject.toml'
    )
