"""Train a Keras MLP on the digits; one callback makes it survive Spot preemption.

``python -m trainer.task --epochs N [--checkpoint-every K] [--batch-seconds S] [--seed N]``

The training code is an ordinary ``model.fit``; the only kfp-spot line is the callback:

- checkpoints (Keras' own ``model.weights.h5`` plus the data position) go to
  ``$AIP_CHECKPOINT_DIR`` (or ``--checkpoint-dir``); a restarted run resumes from the newest
  committed step, in the middle of an epoch if that is where it stopped;
- on SIGTERM (the preemption notice) it saves after the batch that is running and exits 143;
- at the end it writes ``model.keras`` to ``$AIP_MODEL_DIR`` (or ``--model-dir``) and exits 0.

This module reads the command line; the training is in ``trainer/train.py``, imported only once
the arguments are valid: a mistyped flag or ``--help`` answers at once instead of after the
seconds Keras takes to import.

The same seed gives the same final weights, bit for bit, however often the run was preempted.
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
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--checkpoint-every",
        type=interval_argument,
        default="10",
        help="batches (10), a duration (30s) or 'auto'",
    )
    parser.add_argument("--seed", type=int, default=0, help="initialisation, dropout, data order")
    parser.add_argument("--split-seed", type=int, default=0, help="the held-out split")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--learning-rate", type=float, default=1e-2)
    parser.add_argument("--keep-last", type=int, default=3)
    parser.add_argument(
        "--grace-period", type=float, default=None, help="default: the job's (30 s on Vertex AI)"
    )
    parser.add_argument(
        "--batch-seconds",
        type=float,
        default=0.0,
        help="pacing: minimum wall time per batch so a demo can be preempted (never changes "
        "the weights)",
    )
    add_output_dir_arguments(parser)
    args = parser.parse_args(argv)
    resolve_output_dirs(parser, args)  # gs:// through Vertex AI's /gcs mount: no gcsfs needed
    for name in ("epochs", "batch_size", "hidden", "keep_last"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m trainer.task``."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parse_args(argv)
    from trainer import train  # Keras: seconds of import, after the arguments are checked

    return train.run(args)


if __name__ == "__main__":
    sys.exit(main())
