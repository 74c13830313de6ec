"""What ``python -m trainer.task`` runs: an ordinary ``xgb.train`` with kfp-spot's callback."""

from __future__ import annotations

import argparse
import time

import xgboost as xgb

from kfp_spot import fs
from kfp_spot.trainer.integrations.xgboost import SpotCheckpoint
from trainer import data


class Pacing(xgb.callback.TrainingCallback):
    """Makes each round last at least ``seconds`` (wakes early on the preemption notice)."""

    def __init__(self, seconds: float, spot: SpotCheckpoint) -> None:
        super().__init__()
        self.seconds, self.spot, self._started = seconds, spot, 0.0

    def before_iteration(self, model, epoch, evals_log):
        self._started = time.monotonic()
        return False

    def after_iteration(self, model, epoch, evals_log):
        self.spot.manager.notice.sleep(self.seconds - (time.monotonic() - self._started))
        return False


def run(args: argparse.Namespace) -> int:
    """Train as ``args`` (from :func:`trainer.task.parse_args`) say; returns the exit status."""
    X_train, y_train, _, _ = data.split(args.split_seed)
    dtrain = xgb.DMatrix(X_train, label=y_train)
    params = {
        "objective": "multi:softprob",
        "num_class": 10,
        "max_depth": args.max_depth,
        "eta": args.eta,
        "tree_method": "hist",
        "seed": args.seed,
        "nthread": args.nthread,
        "eval_metric": "mlogloss",
    }
    spot = SpotCheckpoint(
        args.rounds,
        args.checkpoint_dir,
        interval=args.checkpoint_every,
        keep_last=args.keep_last,
        grace_period=args.grace_period,
        params=params,
    )
    # Pacing first: the checkpoint callback then sees the round's whole duration.
    callbacks = ([Pacing(args.round_seconds, spot)] if args.round_seconds else []) + [spot]
    booster = xgb.train(
        params,
        dtrain,
        num_boost_round=spot.remaining_rounds,
        xgb_model=spot.booster,
        evals=[(dtrain, "train")],
        verbose_eval=10,
        callbacks=callbacks,
    )
    if spot.manager.writer:
        fs.atomic_write(fs.join(args.model_dir, "model.ubj"), bytes(booster.save_raw("ubj")))
    print(f"finished {args.rounds} rounds; model written to {args.model_dir}", flush=True)
    return 0
