"""Bad inputs to evaluate(): each a clear error naming the problem."""

import math
from pathlib import Path

import pytest

from kfp_spot.checkpoints import CheckpointError
from kfp_spot.evaluation import EvaluationError, EvaluationInputError, evaluate, parse_thresholds
from tests.evaluation.conftest import write_checkpoint

ENTRY = "tinytrainer.evaluate:evaluate"


def run(ckpt, package, env_cache, **kwargs):
    kwargs.setdefault("entry_point", ENTRY)
    return evaluate(str(ckpt), list(package.package_uris), cache_dir=env_cache, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"entry_point": "tinytrainer.evaluate"}, r"entry_point: .* is not module:function"),
        ({"entry_point": "tiny trainer:evaluate"}, r"entry_point: .* is not module:function"),
        ({"step": "newest"}, r"step: 'newest' is not valid; use \"latest\""),
        ({"step": "-3"}, r"step: '-3' is not valid"),
        ({"thresholds": {"accuracy": "at least 0.9"}}, r"thresholds\['accuracy'\]: 'at least"),
        ({"thresholds": {"accuracy": ">=high"}}, r"thresholds\['accuracy'\]: '>=high'"),
        ({"thresholds": {"accuracy": True}}, r"thresholds\['accuracy'\]: True is not a bound"),
        # an infinite bound holds for every number or none: a gate in name only
        ({"thresholds": {"loss": "<=inf"}}, r"thresholds\['loss'\]: '<=inf' is not a bound"),
        ({"thresholds": {"loss": "<=1e400"}}, r"thresholds\['loss'\]: '<=1e400' is not a bound"),
        ({"thresholds": {"loss": -math.inf}}, r"thresholds\['loss'\]: -inf is not a bound"),
        ({"thresholds": ["accuracy"]}, r"thresholds: must be a mapping"),
        ({"params": {"when": object()}}, r"params: must be JSON-serialisable"),
        ({"params": [1, 2]}, r"params: must be a mapping"),
    ],
)
def test_invalid_inputs_fail_before_any_work(ckpt, package, tmp_path, kwargs, pattern):
    # The cache dir does not exist: validation must fail before an environment is built.
    with pytest.raises(EvaluationInputError, match=pattern):
        run(ckpt, package, tmp_path / "never-created", **kwargs)
    assert not (tmp_path / "never-created").exists()


def test_empty_checkpoint_uri(package, env_cache):
    with pytest.raises(EvaluationInputError, match=r"checkpoint: the checkpoint URI is empty"):
        evaluate("", list(package.package_uris), cache_dir=env_cache)


def test_no_package(ckpt, env_cache):
    with pytest.raises(EvaluationInputError, match=r"package: no package URIs"):
        evaluate(str(ckpt), [], cache_dir=env_cache)


def test_missing_package_file(ckpt, tmp_path, env_cache):
    with pytest.raises(EvaluationInputError, match=r"package: .*gone-1.0.tar.gz.* does not exist"):
        evaluate(str(ckpt), [str(tmp_path / "gone-1.0.tar.gz")], cache_dir=env_cache)


def test_step_that_does_not_exist(ckpt, package, env_cache):
    with pytest.raises(EvaluationInputError, match=r"step: step 25 does not exist .*10, 20, 30"):
        run(ckpt, package, env_cache, step="25")


def test_best_by_a_metric_no_manifest_records(ckpt, package, env_cache):
    # only what the training recorded: not the state index's version (state_format)
    with pytest.raises(
        EvaluationInputError, match=r"records 'f1' .*\(recorded metrics: accuracy, loss\)$"
    ):
        run(ckpt, package, env_cache, step="best:f1")


def test_best_by_a_metric_recorded_as_text_says_so(tmp_path, package, env_cache):
    # metrics={"val/auc": f"{auc:.4f}"} (a trainer without keep_best): "no committed step records
    # 'val/auc' (recorded metrics: none)" denied what the manifests plainly hold.
    root = tmp_path / "run" / "checkpoints"
    for step, auc in ((10, "0.91"), (20, "0.95")):
        write_checkpoint(root, step, 0.5, metrics={"val/auc": auc})
    with pytest.raises(EvaluationInputError) as info:
        run(root, package, env_cache, step="best:val/auc")
    assert str(info.value) == (
        f"step: best:val/auc: the committed steps under {root} record 'val/auc', but as no number "
        "(step 20: '0.95'), so none ranks; record it as a number (save(..., metrics={'val/auc': "
        "float(...)})) or evaluate a step by number"
    )


def test_no_checkpoint_at_all(tmp_path, package, env_cache):
    with pytest.raises(
        CheckpointError, match=r"no checkpoint under .*empty: the directory is empty"
    ):
        run(tmp_path / "empty", package, env_cache)


def test_entry_point_module_not_in_the_package(ckpt, package, env_cache):
    with pytest.raises(EvaluationInputError, match=r"^entry_point: cannot import module 'trainer"):
        run(ckpt, package, env_cache, entry_point="trainer.evaluate:evaluate")


def test_entry_point_function_missing(ckpt, package, env_cache):
    with pytest.raises(EvaluationInputError, match=r"^entry_point: module '\w+.evaluate' has no "):
        run(ckpt, package, env_cache, entry_point="tinytrainer.evaluate:score")


def test_entry_point_module_missing_is_one_line(ckpt, package, env_cache):
    with pytest.raises(EvaluationInputError) as info:
        run(ckpt, package, env_cache, entry_point="tinytrainer.evaluat:evaluate")
    assert str(info.value) == (
        "entry_point: cannot import module 'tinytrainer.evaluat': No module named "
        "'tinytrainer.evaluat' (neither the package nor its dependencies hold it)"
    )


def test_entry_point_that_is_not_a_function_says_what_it_is(ckpt, package, env_cache):
    with pytest.raises(EvaluationInputError) as info:
        run(ckpt, package, env_cache, entry_point="tinytrainer.evaluate:PASSING_ACCURACY")
    assert str(info.value) == (
        "entry_point: tinytrainer.evaluate:PASSING_ACCURACY is a float, not a function; it must "
        "be evaluate(checkpoint_dir, params) -> dict of metric name -> number"
    )


def test_entry_point_with_the_wrong_parameters_is_named_before_it_is_called(
    ckpt, package, env_cache
):
    with pytest.raises(EvaluationInputError) as info:
        run(ckpt, package, env_cache, entry_point="tinytrainer.evaluate:score_without_params")
    assert str(info.value) == (
        "entry_point: tinytrainer.evaluate:score_without_params cannot be called with "
        "(checkpoint_dir, params): too many positional arguments; it must be "
        "evaluate(checkpoint_dir, params) -> dict of metric name -> number"
    )


def test_entry_point_returning_a_number_no_float_holds(ckpt, package, env_cache):
    with pytest.raises(EvaluationError) as info:
        run(ckpt, package, env_cache, params={"return": "huge"})
    assert str(info.value) == (
        f"{ENTRY} returned metric 'accuracy' = an integer of 401 digits, which is not a number "
        "a metric can hold (a float: at most about 1.8e308)"
    )


def test_entry_point_that_raises_shows_its_traceback(ckpt, package, env_cache):
    with pytest.raises(EvaluationError, match=r"(?s)raised.*RuntimeError: the evaluation data"):
        run(ckpt, package, env_cache, params={"fail": True})


@pytest.mark.parametrize("status", [3, 0, "data missing"])
def test_entry_point_that_exits_is_named_with_its_status(ckpt, package, env_cache, status):
    # 3 is also the runner's own status for an entry point it cannot import
    with pytest.raises(EvaluationError) as info:
        run(ckpt, package, env_cache, params={"exit": status})
    first = str(info.value).splitlines()[1]
    assert first == (
        f"{ENTRY} called sys.exit({status!r}) instead of returning its metrics (a dict of "
        "metric name -> number)"
    )


def test_entry_point_returning_no_dict(ckpt, package, env_cache):
    with pytest.raises(EvaluationError, match=r"returned list; it must return a dict"):
        run(ckpt, package, env_cache, params={"return": "list"})


def test_entry_point_returning_a_non_number(ckpt, package, env_cache):
    with pytest.raises(EvaluationError, match=r"metric 'accuracy' = 'high', which is not a number"):
        run(ckpt, package, env_cache, params={"return": "text"})


def test_entry_point_returning_a_bool_says_to_give_it_as_a_number(ckpt, package, env_cache):
    # True is an int to Python, so "which is not a number" alone read as a contradiction.
    with pytest.raises(EvaluationError) as info:
        run(ckpt, package, env_cache, params={"return": "bool"})
    assert str(info.value) == (
        f"{ENTRY} returned metric 'converged' = True, which is not a number: a bool; return "
        "float(...) of it (1.0 or 0.0) to report or gate on it"
    )


def test_entry_point_returning_a_metric_without_a_name(ckpt, package, env_cache):
    with pytest.raises(EvaluationError, match=r"returned a metric with an empty name \(' '\)"):
        run(ckpt, package, env_cache, params={"return": "unnamed"})


def test_threshold_on_a_metric_that_was_not_returned(ckpt, package, env_cache):
    with pytest.raises(EvaluationInputError, match=r"thresholds: metric 'acc' is not among .*"):
        run(ckpt, package, env_cache, thresholds={"acc": 0.9})


@pytest.mark.parametrize(
    ("uri", "pattern"),
    [
        ("s3://bucket/run/checkpoints", r"'s3://bucket/run/checkpoints' is not a location"),
        ("https://example.com/ckpt", r"'https://example.com/ckpt' is not a location a task"),
        ("gs://My_Bucket/checkpoints", r"'My_Bucket' is not a Cloud Storage bucket name"),
        ("gs:///checkpoints", r"'gs:///checkpoints' names no bucket"),
        # One slash short: read as the local folder "gs:", "the job saved nothing there".
        ("gs:/bucket/run/checkpoints", r"'gs:/bucket/run/checkpoints' is not a URI \(gs: "),
    ],
)
def test_checkpoint_uri_a_task_cannot_read_is_refused_naming_the_valid_forms(
    package, tmp_path, uri, pattern
):
    # An s3:// URI was read as a local path and reported as "no checkpoint under ...: the job
    # saved nothing there"; a bad bucket went out as a request and came back as a network error.
    with pytest.raises(EvaluationInputError, match=rf"^checkpoint: {pattern}") as caught:
        evaluate(uri, list(package.package_uris), cache_dir=tmp_path / "never-created")
    assert "gs://BUCKET/PATH, /gcs/BUCKET/PATH or a local path" in str(caught.value) or (
        "bucket name" in str(caught.value)
    )
    assert not (tmp_path / "never-created").exists()


def pid_written(pid_file: Path) -> bool:
    """Whether the shell wrote its pid (``echo $$ > FILE`` creates the file, then writes)."""
    return pid_file.exists() and bool(pid_file.read_text().strip())


@pytest.mark.parametrize("stopped", ["while it waits", "before its output is read", "as it starts"])
def test_a_stopped_evaluation_ends_its_entry_points_process(tmp_path, stopped):
    # The evaluate_checkpoint task stopped with SIGTERM (a local run interrupted with kill or
    # timeout stops its task so) died at once and left the entry point's process running.
    # "before its output is read": the signal comes as the task starts the threads that log the
    # entry point's output (on a busy machine, after the entry point started), which once
    # left it waiting for the entry point to end on its own. "as it starts": the signal comes
    # inside subprocess.Popen, after its fork (on a busy machine, as the child writes its pid),
    # which raised with no handle on the child and left it running.
    import os
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    pid_file = tmp_path / "entry-point.pid"
    fake_python = tmp_path / "python"  # stands in for the package environment's interpreter
    fake_python.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 120\n")
    fake_python.chmod(0o755)
    task = textwrap.dedent(
        f"""
        from pathlib import Path
        from kfp_spot.evaluation import invoke
        invoke.environ_for = lambda python, entry_point, base: dict(base)
        python, where = Path({str(fake_python)!r}), Path({str(tmp_path)!r})
        if {stopped == "before its output is read"!r}:
            import os, signal, threading, time

            class Stopped(threading.Thread):
                def start(self):
                    pid = Path({str(pid_file)!r})
                    while not (pid.exists() and pid.read_text().strip()):
                        time.sleep(0.01)
                    os.kill(os.getpid(), signal.SIGTERM)
                    super().start()

            invoke.threading = type("T", (), {{"Thread": Stopped}})
        if {stopped == "as it starts"!r}:
            import os, signal, subprocess, time

            class Interrupted(subprocess.Popen):
                def __init__(self, *args, **kwargs):
                    super().__init__(*args, **kwargs)
                    pid = Path({str(pid_file)!r})
                    while not (pid.exists() and pid.read_text().strip()):
                        time.sleep(0.01)
                    os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before we return

            subprocess.Popen = Interrupted
        invoke.run_entry_point(python, "m:f", where, {{}}, None)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", task])
    try:
        deadline = time.monotonic() + 60
        # The task signals itself once the pid is written, so it may end before this loop sees
        # the pid: only a task that ended (or a minute that passed) with none written fails.
        while not pid_written(pid_file):
            ended = process.poll() is not None
            assert not (ended and not pid_written(pid_file)) and time.monotonic() < deadline
            time.sleep(0.05)
        entry_point = int(pid_file.read_text())
        if stopped == "while it waits":  # else the task signals itself
            process.send_signal(signal.SIGTERM)
        status = process.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(entry_point, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(entry_point, signal.SIGKILL)
            pytest.fail("the entry point's process outlived the stopped evaluation")
        assert status == 128 + signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()


def test_a_result_whose_keys_collide_as_json_text_is_refused_not_one_value_dropped():
    # JSON's keys are text: {1: 0.5, "1": 0.9} became one metric "1", the other value lost
    from kfp_spot.evaluation.runner import to_jsonable

    with pytest.raises(TypeError, match=r"keys 1 and '1' are the same key in JSON, '1'"):
        to_jsonable({1: 0.5, "1": 0.9})
    with pytest.raises(TypeError, match="same key"):
        to_jsonable({"per_class": {0: 0.5, "0": 0.7}})
    assert to_jsonable({"per_class": {0: 0.5, 1: 0.7}}) == {"per_class": {"0": 0.5, "1": 0.7}}


def _result_error(result):
    """The error the evaluator gives for ``result`` returned by the entry point (in-process)."""
    from kfp_spot.evaluation.result import parse_result

    with pytest.raises(EvaluationError) as info:
        parse_result(ENTRY, result)
    return str(info.value)


def test_every_value_that_is_no_metric_is_named_at_once_with_what_to_return():
    # Before, the first one only: a user fixed it, waited for the whole evaluation again, and
    # met the next. A nested dict, None and a list each say what to return instead.
    lines = _result_error(
        {"val": {"mse": 0.1}, "auc": None, "per_class": [0.9, 0.8], "accuracy": 0.9}
    ).splitlines()
    assert lines == [
        f"{ENTRY} returned metric 'val' = {{'mse': 0.1}}, which is not a number: a mapping; "
        "return each number in it as a metric of its own name (e.g. 'val/mse')",
        f"{ENTRY} returned metric 'auc' = None, which is not a number: None; return a number "
        "(float('nan') for one that could not be computed: it is reported, and fails any "
        "threshold on it)",
        f"{ENTRY} returned metric 'per_class' = [0.9, 0.8], which is not a number: a list; return "
        "one number per metric (e.g. its mean, or one metric per item)",
    ]


def test_an_entry_point_returning_none_is_asked_whether_it_lacks_a_return():
    assert _result_error(None) == (
        f"{ENTRY} returned None (does it end without a return?); it must return a dict of "
        "metric name -> number (optionally with 'confusion_matrix')"
    )


@pytest.mark.parametrize(
    ("cell", "shown"),
    [(math.nan, "nan"), (math.inf, "inf"), (10**400, "an integer of 401 digits")],
    ids=["nan", "inf", "huge"],
)
def test_a_confusion_matrix_cell_that_is_no_finite_number_is_refused_naming_it(cell, shown):
    # kfp.local wrote it into the ClassificationMetrics metadata as bare NaN/Infinity, which the
    # KFP backend's launcher on Vertex AI refuses: the task failed there after its whole work.
    error = _result_error(
        {
            "accuracy": 0.5,
            "confusion_matrix": {"labels": ["cat", "dog"], "matrix": [[5, 0], [cell, 7]]},
        }
    )
    assert error.endswith(
        f": matrix[1][0] (true 'dog', predicted 'cat') is {shown}; every cell must be a finite "
        "number (a count, or a rate), as ClassificationMetrics metadata on Vertex AI Pipelines "
        "must hold"
    ), error


def test_thresholds_on_metrics_not_returned_are_named_at_once_with_what_was_returned():
    # Before: the first one only, and the returned values nowhere (the failed task outputs no
    # metrics), after the whole evaluation.
    from kfp_spot.evaluation.core import check_thresholds

    returned = {"accuracy": 0.93, "val_mse": 0.01, "r2": float("nan")}
    with pytest.raises(EvaluationInputError) as info:
        check_thresholds(
            ENTRY,
            parse_thresholds({"acc": 0.9, "f1": ">=0.5", "r2": 0.5, "val_mae": "<=3"}),
            returned,
        )
    assert str(info.value) == (
        f"thresholds: metrics 'acc', 'f1', 'val_mae' are not among what {ENTRY} returned "
        "(accuracy=0.93, r2=nan, val_mse=0.01); did you mean 'accuracy' for 'acc', 'val_mse' for "
        "'val_mae'?"
    )
    with pytest.raises(EvaluationInputError) as info:
        check_thresholds(ENTRY, parse_thresholds({"Accuracy": 0.9}), returned)
    assert str(info.value).endswith(
        "(accuracy=0.93, r2=nan, val_mse=0.01); did you mean 'accuracy'?"
    )
    checks = check_thresholds(ENTRY, parse_thresholds({"accuracy": 0.95, "r2": 0.5}), returned)
    first = checks[0]
    assert (str(first.threshold), first.value, first.passed) == ("accuracy >= 0.95", 0.93, False)
    assert not checks[1].passed  # NaN never passes
