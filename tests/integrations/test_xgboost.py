"""XGBoost, for real: preempted at random points, the same final booster, bit for bit."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

import pytest

from kfp_spot import checkpoints
from tests.integrations.examples_lib import (
    newest,
    preempt_randomly,
    run_example,
    sha256,
    uninterrupted_run,
)
from tests.shared import once_per_run

# XGBoost imports scikit-learn and SciPy (a second of CPU): the module does not import it (every
# xdist worker collects every module), only the tests that call it here, through ``xgb``.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("xgboost") is None, reason="XGBoost is not installed"
)

ROUNDS = 30
ARGS = ["--rounds", str(ROUNDS), "--checkpoint-every", "4"]


@pytest.fixture(scope="module")
def xgb():
    """XGBoost in this process. Module-scoped, so the tests using it share one worker
    (tests/conftest.py groups them): XGBoost is imported by one worker, not by all."""
    return pytest.importorskip("xgboost")


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory):
    """The never-preempted run the tests compare with (read only): one per run, every worker's."""

    def run(base: Path) -> str:
        return str(uninterrupted_run("xgboost", base, ARGS))

    return Path(once_per_run(tmp_path_factory, "xgb-clean", run))


# The random run takes two of the three kinds of preemption, and
# test_resume_trains_only_the_remaining_rounds the notice and a torn save at set rounds: every
# kind is seen, the torn save twice.
SPLIT_KINDS = [(22, ("kill@step", "kill@save-mid"))]


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "kinds"), SPLIT_KINDS)
def test_preempted_at_random_points_ends_with_bitwise_the_same_booster(
    uninterrupted, tmp_path, seed, kinds
):
    root, model = tmp_path / "ckpt", tmp_path / "model"
    events = preempt_randomly(
        "xgboost", root, model, ARGS, total=ROUNDS, every=4, seed=seed, kinds=kinds
    )
    for failpoint, _, resumed in events:  # term@step: preempt_randomly checked no round was lost
        kind, step = failpoint.rsplit(":", 1)
        if kind == "kill@step":
            assert resumed is None or resumed < int(step)
    assert sha256(model / "model.ubj") == sha256(uninterrupted / "model" / "model.ubj")
    final = root / f"step-{ROUNDS}" / "booster.ubj"
    assert sha256(final) == sha256(uninterrupted / "ckpt" / f"step-{ROUNDS}" / "booster.ubj")
    assert len(checkpoints.read_attempt_records(str(root))) == len(kinds) + 1


def test_resume_trains_only_the_remaining_rounds(xgb, uninterrupted, tmp_path):
    root, model = tmp_path / "ckpt", tmp_path / "model"
    assert run_example("xgboost", root, model, ARGS, failpoints="term@step:9").returncode == 143
    assert json.loads((root / "step-9" / "rounds.json").read_text()) == {"rounds": 9}
    # Resumed, it is killed in the middle of saving round 16: that step is torn, 12 is the newest.
    torn = run_example("xgboost", root, model, ARGS, failpoints="kill@save-mid:16")
    assert torn.returncode == -9, torn.output[-3000:]
    assert "resuming xgboost.train after round 9 of 30" in torn.output
    assert newest(root) == 12
    resumed = run_example("xgboost", root, model, ARGS)
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert "resuming xgboost.train after round 12 of 30" in resumed.output
    booster = xgb.Booster(model_file=str(model / "model.ubj"))
    assert booster.num_boosted_rounds() == ROUNDS
    assert newest(root) == ROUNDS
    assert sha256(model / "model.ubj") == sha256(uninterrupted / "model" / "model.ubj")
    assert len(checkpoints.read_attempt_records(str(root))) == 3


def test_sampling_is_warned_about_and_bad_rounds_refused(xgb, tmp_path, caplog):
    from kfp_spot.trainer.integrations.xgboost import SpotCheckpoint

    with caplog.at_level(logging.WARNING):
        SpotCheckpoint(10, str(tmp_path), params={"subsample": 0.8})
    assert "subsample < 1: XGBoost samples differently after a resume" in caplog.text
    with pytest.raises(ValueError, match="num_boost_round must be an int >= 1"):
        SpotCheckpoint(0, str(tmp_path))


def test_in_process_with_cleanup_hook_and_no_exit(xgb, tmp_path):
    """The callback in the caller's own process: exit_on_preemption=False returns the booster."""
    from sklearn.datasets import load_digits

    from kfp_spot.trainer.integrations.xgboost import SpotCheckpoint

    X, y = load_digits(return_X_y=True)
    dtrain = xgb.DMatrix(X, label=y)
    params = {"objective": "multi:softprob", "num_class": 10, "max_depth": 2, "nthread": 1}
    flushed = []
    spot = SpotCheckpoint(
        12,
        str(tmp_path),
        interval="100",
        exit_on_preemption=False,
        on_preemption=lambda: flushed.append(newest(tmp_path)),
    )

    class NoticeAtRound5(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            if epoch == 4:
                spot.manager.notice.request("test")
            return False

    booster = xgb.train(
        params,
        dtrain,
        num_boost_round=spot.remaining_rounds,
        xgb_model=spot.booster,
        callbacks=[NoticeAtRound5(), spot],
    )
    assert spot.preempted and booster.num_boosted_rounds() == 5
    assert flushed == [5]  # the hook ran after step 5 was committed
    again = SpotCheckpoint(12, str(tmp_path), interval="100")
    assert again.remaining_rounds == 7 and again.booster.num_boosted_rounds() == 5
