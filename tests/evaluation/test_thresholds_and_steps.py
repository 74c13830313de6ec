"""Parsing of thresholds and step selections (pure functions, property-tested)."""

import math
import operator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfp_spot import checkpoints
from kfp_spot.evaluation import EvaluationInputError, parse_step, parse_thresholds

OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


SPACES = st.sampled_from(["", " "])


@given(op=st.sampled_from(sorted(OPS)), bound=finite, value=finite, space=SPACES)
def test_string_bounds_compare_like_python(op, bound, value, space):
    (threshold,) = parse_thresholds({"m": f"{op}{space}{bound!r}"})
    assert threshold.bound == bound
    assert threshold.check(value) == OPS[op](value, bound)


@given(bound=finite | st.integers(-(10**6), 10**6), value=finite)
def test_a_plain_number_means_at_least(bound, value):
    (threshold,) = parse_thresholds({"m": bound})
    assert threshold.op == ">=" and threshold.check(value) == (value >= bound)
    (as_text,) = parse_thresholds({"m": repr(float(bound))})
    assert as_text.check(value) == (value >= bound)


@given(op=st.sampled_from(sorted(OPS)), bound=finite)
def test_nan_never_passes(op, bound):
    (threshold,) = parse_thresholds({"m": f"{op}{bound!r}"})
    assert not threshold.check(math.nan)


@given(text=st.text(max_size=12).filter(lambda t: t.strip().lstrip("<>=").strip() != ""))
def test_anything_else_is_refused_or_parsed_to_a_number(text):
    try:
        (threshold,) = parse_thresholds({"m": text})
    except EvaluationInputError as exc:
        assert exc.field == "thresholds['m']" and "is not a bound" in str(exc)
    else:
        assert math.isfinite(threshold.bound)


@pytest.mark.parametrize(
    ("text", "kind", "step", "metric", "mode"),
    [
        ("latest", "latest", None, "", "max"),
        ("", "latest", None, "", "max"),
        ("40", "step", 40, "", "max"),
        (" 7 ", "step", 7, "", "max"),
        ("best:accuracy", "best", None, "accuracy", "max"),
        ("best:val_loss", "best", None, "val_loss", "min"),
        ("best:top1_error", "best", None, "top1_error", "min"),
        ("best:loss:max", "best", None, "loss", "max"),
        ("best:auc:min", "best", None, "auc", "min"),
        # Before, only the name's end counted: these picked the step with the largest error.
        ("best:rmse_val", "best", None, "rmse_val", "min"),
        ("best:mse-test", "best", None, "mse-test", "min"),
        ("best:loss/valid", "best", None, "loss/valid", "min"),
        ("best:mape", "best", None, "mape", "min"),
        ("best:r2_val", "best", None, "r2_val", "max"),
        ("best:errand_rate", "best", None, "errand_rate", "max"),  # a word, not a suffix
        # Frameworks' own loss names: best: picked the step with the largest loss.
        ("best:val_sparse_categorical_crossentropy", "best", None, None, "min"),
        ("best:binary_crossentropy", "best", None, None, "min"),
        ("best:kl_divergence", "best", None, None, "min"),
        ("best:kld", "best", None, None, "min"),
        ("best:squared_hinge", "best", None, None, "min"),
        ("best:logcosh", "best", None, None, "min"),
        ("best:huber", "best", None, None, "min"),
        ("best:validation_0-poisson-nloglik", "best", None, None, "min"),
        ("best:validation_1-gamma-deviance", "best", None, None, "min"),
        ("best:validation_0-mphe", "best", None, None, "min"),
        ("best:mean_poisson_deviance", "best", None, None, "min"),
        ("best:brier_score", "best", None, None, "min"),
        ("best:cosine_similarity", "best", None, None, "max"),
        ("best:validation_0-aucpr", "best", None, None, "max"),
        # scikit-learn's negated scorers (cross_val_score, GridSearchCV): larger is better.
        ("best:neg_log_loss", "best", None, None, "max"),
        ("best:neg_root_mean_squared_error", "best", None, None, "max"),
        ("best:test_neg_mean_absolute_error", "best", None, None, "max"),
    ],
)
def test_step_forms(text, kind, step, metric, mode):
    request = parse_step(text)
    metric = text.removeprefix("best:").partition(":")[0] if metric is None else metric
    assert (request.kind, request.step, request.metric) == (kind, step, metric)
    if kind == "best":
        assert request.mode == mode


@pytest.mark.parametrize("text", ["best:", "best:acc:up", "last", "1.5", "step-4", True])
def test_bad_step_forms(text):
    with pytest.raises(EvaluationInputError, match=r"^step: "):
        parse_step(text)


def test_best_by_a_metric_nobody_recorded_lists_only_the_trainings_metrics(tmp_path):
    # CheckpointManager writes the state index's version (state_format, a number) beside the
    # metrics: it is no metric to rank by, nor one to suggest.
    import numpy as np

    from kfp_spot.evaluation.selection import metric_of, select_step
    from kfp_spot.trainer import CheckpointManager

    root = str(tmp_path / "ckpt")
    with CheckpointManager(root, handle_signals=False, record_attempts=False) as ckpt:
        ckpt.save(1, {"w": np.zeros(3)}, metrics={"loss": 0.5})
    manifest = checkpoints.read_manifest(root, 1)
    assert metric_of(manifest.metadata, "state_format") is None
    with pytest.raises(EvaluationInputError, match=r"\(recorded metrics: loss\)$"):
        select_step(
            root,
            parse_step("best:state_format"),
            latest_hint=None,
            fallback_to_previous=False,
            load=lambda step: (checkpoints.read_manifest(root, step), tmp_path),
        )


@pytest.mark.parametrize(
    ("metric", "bound", "fix"),
    [
        ("rmse", 0.2, "<=0.2"),
        ("val_loss", "0.3", "<=0.3"),
        ("mae_test", 5, "<=5"),
        ("val_categorical_crossentropy", 0.4, "<=0.4"),
    ],
)
def test_a_bound_without_operator_on_a_smaller_is_better_metric_is_refused(metric, bound, fix):
    # Before: {"rmse": 0.2} meant rmse >= 0.2, a gate that passed only the worse models.
    with pytest.raises(EvaluationInputError) as caught:
        parse_thresholds({metric: bound})
    assert caught.value.field == f"thresholds[{metric!r}]"
    assert f'a smaller {metric} is better: write "{fix}"' in str(caught.value)


def test_a_bound_without_operator_still_means_at_least_elsewhere():
    assert [str(t) for t in parse_thresholds({"r2": 0.9, "accuracy": "0.8"})] == [
        "r2 >= 0.9",
        "accuracy >= 0.8",
    ]
    (explicit,) = parse_thresholds({"rmse": "<=0.2"})
    assert (explicit.op, explicit.bound) == ("<=", 0.2)


@pytest.mark.parametrize("step", ["latest", "5"])
@pytest.mark.parametrize("fallback", [False, True])
def test_a_root_with_no_committed_step_says_so_instead_of_asking_for_one(tmp_path, step, fallback):
    # Before: "Committed steps: none. Evaluate one of them with step="N", or set
    # fallback_to_previous", advice that cannot work when no step was ever committed.
    from kfp_spot.checkpoints import CheckpointCorruptError
    from kfp_spot.evaluation.selection import materialize_step, select_step

    root = tmp_path / "ckpt"
    for n in (5, 10):  # step directories a job wrote without committing them
        (root / f"step-{n}").mkdir(parents=True)
        (root / f"step-{n}" / "w.bin").write_bytes(b"x")
    with pytest.raises(CheckpointCorruptError) as info:
        select_step(
            str(root),
            parse_step(step),
            latest_hint=None,
            fallback_to_previous=fallback,
            load=lambda n: materialize_step(str(root), n, tmp_path),
        )
    text = str(info.value)
    assert text.endswith(
        "No step there is committed (none has a sealed manifest.json: the job stopped before its "
        "first save completed, or its code wrote step directories without committing them): "
        "nothing to evaluate"
    ), text
    assert "fallback_to_previous" not in text and 'step="N"' not in text


def test_every_bad_bound_is_named_at_once():
    # Before: the first only; the next surfaced on the next try (on Vertex AI, after a training).
    with pytest.raises(EvaluationInputError) as caught:
        parse_thresholds({"accuracy": "=>0.9", "f1": ">=0.5", "val_mse": 0.1, "r2": [0.9]})
    assert caught.value.field == "thresholds"
    assert str(caught.value).splitlines() == [
        "thresholds['accuracy']: '=>0.9' is not a bound; use a number (meaning >=) or a string "
        'like ">=0.9", "<=0.5", ">0", "==1"',
        "thresholds['val_mse']: 0.1 has no operator, and a bound without one means >=, but a "
        'smaller val_mse is better: write "<=0.1" (or ">=0.1" if at least that is meant)',
        "thresholds['r2']: [0.9] is not a bound; use a number (meaning >=) or a string like "
        '">=0.9", "<=0.5", ">0", "==1"',
    ]


def test_best_passes_over_an_infinite_value_as_keep_best_does(tmp_path):
    # A step that logged accuracy=inf (a division by an empty split) was "best:accuracy", the
    # one step the trainer's keep_best never ranks among the best.
    from kfp_spot.evaluation.selection import select_step

    root = str(tmp_path / "ckpt")
    for step, accuracy in ((1, 0.5), (2, math.inf), (3, 0.8)):
        checkpoints.write_step(
            root, step, {"m": b"x"}, metadata={"metrics": {"accuracy": accuracy}}
        )

    def best(metric):
        return select_step(
            root,
            parse_step(f"best:{metric}"),
            latest_hint=None,
            fallback_to_previous=False,
            load=lambda step: (checkpoints.read_manifest(root, step), tmp_path),
        )

    assert best("accuracy").manifest.step == 3
    only = str(tmp_path / "only")
    checkpoints.write_step(only, 4, {"m": b"x"}, metadata={"metrics": {"val_loss": -math.inf}})
    root = only
    with pytest.raises(EvaluationInputError) as caught:
        best("val_loss")
    assert str(caught.value) == (
        f"step: best:val_loss: the committed steps under {only} record 'val_loss', but as no "
        "finite number (step 4: -inf), so none ranks; a NaN or infinite value never does (as for "
        "the trainer's keep_best): evaluate a step by number"
    )
