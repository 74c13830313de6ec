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

This module reads the command line; the training is in ``trainer/train.py``, imported only once
the arguments are valid: a mistyped flag or ``--help`` answers at once instead of after the
second or two XGBoost (and the scikit-learn it loads) takes to import.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from kfp_spot.trainer import add_output_dir_arguments, interval_argument, resolve_output_dirs


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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m trainer.task``."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parse_args(argv)
    from trainer import train  # XGBoost: a second or two of import, after the arguments

    return train.run(args)


if __name__ == "__main__":
    sys.exit(main())
