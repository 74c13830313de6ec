"""XGBoost, for real: preempted at random points, the same final booster, bit for bit."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import pytest

from kfp_spot import checkpoints
from tests.integrations.examples_lib import (
    RANDOM_KINDS,
    XGBOOST_ARGS,
    Preempted,
    newest,
    preempt_three_ways,
    sha256,
)

# XGBoost imports scikit-learn and SciPy (a second of CPU): the module does not import it (every
# xdist worker collects every module), only the tests that call it here, through ``xgb``.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("xgboost") is None, reason="XGBoost is not installed"
)

ROUNDS = 30  # XGBOOST_ARGS' --rounds
ARGS = XGBOOST_ARGS  # the never-preempted run's (tests/integrations/conftest.py)


@pytest.fixture(scope="module")
def xgb():
    """XGBoost in this process. Module-scoped, so the tests using it share one worker
    (tests/conftest.py groups them): XGBoost is imported by one worker, not by all."""
    return pytest.importorskip("xgboost")


@pytest.fixture
def uninterrupted(xgboost_uninterrupted: Path) -> Path:
    """The never-preempted run the tests compare with (read only; tests/integrations/conftest.py:
    one per run, every worker's)."""
    return xgboost_uninterrupted


# The two tests below assert their parts of one run of four attempts (a notice and a torn save at
# set rounds, then SIGKILL at a round chosen at random), not of two runs of three each (an attempt
# is ~1.4 CPU-s, most of it importing XGBoost). Every kind of preemption is seen.
SEED = 22


@pytest.fixture(scope="module")
def preempted(tmp_path_factory: pytest.TempPathFactory) -> Preempted:
    """Noticed at round 9, killed while saving round 16, killed at a random round, then run to the
    end (round 9's rounds.json read as it happens)."""
    base = tmp_path_factory.mktemp("preempted")
    return preempt_three_ways(
        "xgboost",
        base,
        ARGS,
        notice=9,
        torn=16,
        record="rounds.json",
        total=ROUNDS,
        every=4,
        seed=SEED,
    )


@pytest.mark.slow
def test_preempted_at_random_points_ends_with_bitwise_the_same_booster(uninterrupted, preempted):
    root, model, kinds = preempted.root, preempted.model, RANDOM_KINDS
    for failpoint, _, resumed in preempted.events:  # term@step: preempt_randomly checked it
        kind, step = failpoint.rsplit(":", 1)
        if kind == "kill@step":
            assert resumed is None or resumed < int(step)
    assert sha256(model / "model.ubj") == sha256(uninterrupted / "model" / "model.ubj")
    final = root / f"step-{ROUNDS}" / "booster.ubj"
    assert sha256(final) == sha256(uninterrupted / "ckpt" / f"step-{ROUNDS}" / "booster.ubj")
    # the two set preemptions, the random ones, the final attempt
    assert len(checkpoints.read_attempt_records(str(root))) == 2 + len(kinds) + 1


def test_resume_trains_only_the_remaining_rounds(xgb, uninterrupted, preempted):
    root, model = preempted.root, preempted.model
    assert preempted.noticed.returncode == 143, preempted.noticed.output[-3000:]
    assert preempted.at_notice == {"rounds": 9}
    # Resumed, it is killed in the middle of saving round 16: that step is torn, 12 is the newest.
    torn = preempted.torn
    assert torn.returncode == -9, torn.output[-3000:]
    assert "resuming xgboost.train after round 9 of 30" in torn.output
    assert preempted.newest_after_torn == 12
    # The next attempt (killed later at a random round) resumed after round 12.
    resumed, final = preempted.runs[0], preempted.runs[-1]
    assert final.returncode == 0, final.output[-3000:]
    assert "resuming xgboost.train after round 12 of 30" in resumed.output
    booster = xgb.Booster(model_file=str(model / "model.ubj"))
    assert booster.num_boosted_rounds() == ROUNDS
    assert newest(root) == ROUNDS
    assert sha256(model / "model.ubj") == sha256(uninterrupted / "model" / "model.ubj")
    assert len(checkpoints.read_attempt_records(str(root))) == 4


def test_sampling_is_warned_about_and_bad_rounds_refused(xgb, tmp_path, caplog):
    from kfp_spot.trainer.integrations.xgboost import SpotCheckpoint

    with caplog.at_level(logging.WARNING):
        SpotCheckpoint(10, str(tmp_path), params={"subsample": 0.8})
    assert "subsample < 1: XGBoost samples differently after a resume" in caplog.text
    # Parameters as xgb.train takes them too: the scikit-learn API's get_xgb_params() (None
    # for a default) raised float()'s TypeError, a list of pairs an AttributeError.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        SpotCheckpoint(10, str(tmp_path), params=xgb.XGBClassifier().get_xgb_params())
        SpotCheckpoint(10, str(tmp_path), params=[("colsample_bytree", 0.5), ("eta", 0.3)])
    assert caplog.text.count("XGBoost samples differently") == 1
    assert "colsample_bytree < 1" in caplog.text
    with pytest.raises(ValueError, match="num_boost_round must be an int >= 1"):
        SpotCheckpoint(0, str(tmp_path))
    # A round count from a NumPy config is the int it holds; a NumPy bool is none.
    np = pytest.importorskip("numpy")
    assert SpotCheckpoint(np.int64(7), str(tmp_path)).num_boost_round == 7
    with pytest.raises(ValueError, match="num_boost_round must be an int >= 1"):
        SpotCheckpoint(np.bool_(True), str(tmp_path))


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
