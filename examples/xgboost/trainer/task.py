"""Train an XGBoost classifier on the digits; one callback makes it survive Spot preemption.

``python -m trainer.task --rounds N [--checkpoint-every K] [--round-seconds S]``

The training code is an ordinary ``xgb.train``; kfp-spot adds a ``TrainingCallback`` and passes
the saved booster and the remaining rounds:

- checkpoints (XGBoost's own ``booster.ubj``) go to ``$AIP_CHECKPOINT_DIR`` (or
  ``--checkpoint-dir``); a restarted run resumes after the newest committed round;
- on SIGTERM (the preemption notice) it saves the round that just finished and exits 143;
- at the end it writes ``model.ubj`` to ``$AIP_MODEL_DIR`` (or ``--model-dir``) and exits 0.

Without row/column sampling the boosting rounds are deterministic, so a run preempted any number
of times ends with the same booster, bit for bit, as an uninterrupted one.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

import xgboost as xgb

from kfp_spot import fs
from kfp_spot.trainer import add_output_dir_arguments, interval_argument, resolve_output_dirs
from kfp_spot.trainer.integrations.xgboost import SpotCheckpoint
from trainer import data

log = logging.getLogger("trainer.task")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer.task", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=50, help="boosting rounds in all")
    parser.add_argument(
        "--checkpoint-every",
        type=interval_argument,
        default="5",
        help="rounds (5), a duration (30s) or 'auto'",
    )
    parser.add_argument("--max-depth", type=int, default=4)
    parser.add_argument("--eta", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split-seed", type=int, default=0, help="the held-out split")
    parser.add_argument("--nthread", type=int, default=2)
    parser.add_argument("--keep-last", type=int, default=3)
    parser.add_argument(
        "--grace-period", type=float, default=None, help="default: the job's (30 s on Vertex AI)"
    )
    parser.add_argument(
        "--round-seconds",
        type=float,
        default=0.0,
        help="pacing: minimum wall time per round so a demo can be preempted (never changes "
        "the model)",
    )
    add_output_dir_arguments(parser)
    args = parser.parse_args(argv)
    resolve_output_dirs(parser, args)  # gs:// through Vertex AI's /gcs mount: no gcsfs needed
    for name in ("rounds", "max_depth", "nthread", "keep_last"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m trainer.task``."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
