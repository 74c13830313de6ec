"""Train the digits MLP with checkpoints that survive Spot preemption.

``python -m trainer.task --epochs N --checkpoint-every K [--step-seconds S] [--seed N]``

A step is one epoch of minibatch SGD by default, or a part of one (``--steps-per-epoch``).

- checkpoints go to ``$AIP_CHECKPOINT_DIR`` (or ``--checkpoint-dir``) through
  :class:`kfp_spot.trainer.CheckpointManager`; a restarted run resumes from the newest committed
  step and prints ``resuming from step N``;
- on SIGTERM (the preemption notice) it saves once more if that fits the grace period and exits
  with status 143;
- at the end it writes ``model.npz``, ``model.joblib`` (the same network as a scikit-learn
  ``MLPClassifier``, which Vertex's prebuilt sklearn prediction image serves; not with
  ``--no-sklearn-model``) and, last, ``model.json`` to ``$AIP_MODEL_DIR`` (or ``--model-dir``)
  and exits 0. ``model.json`` names the step and settings it was exported from: an attempt that
  resumes at the final step with that model already written (preempted after the export) exits 0
  at once, without loading the data or scikit-learn.

Everything that decides the weights (initialisation, the data order of each epoch, the position in
the epoch, momentum) is in the checkpoint, so a run preempted any number of times ends with the
same weights, bit for bit, as one that was never interrupted.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from kfp_spot import fs
from kfp_spot.trainer import (
    PREEMPTED_EXIT_CODE,
    CheckpointManager,
    add_output_dir_arguments,
    interval_argument,
    resolve_output_dirs,
)
from trainer import data, model

log = logging.getLogger("trainer.task")

# Settings that decide the weights: a checkpoint written with other values cannot be resumed.
# (--epochs may change: a finished run can be extended.)
_FIXED = (
    "seed",
    "split_seed",
    "hidden",
    "batch_size",
    "learning_rate",
    "momentum",
    "steps_per_epoch",
)


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line's options (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer.task", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--epochs", type=_positive_int, default=10, help="passes over the data")
    parser.add_argument(
        "--checkpoint-every",
        type=interval_argument,
        default="1",
        help="K steps (e.g. 5), a duration (30s, 5m) or 'auto' (Young-Daly); default 1",
    )
    parser.add_argument(
        "--step-seconds",
        type=_non_negative,
        default=0.0,
        help="pacing: minimum wall time per step, so a demo lasts long enough to be preempted "
        "(default 0: as fast as it goes); it never changes the weights",
    )
    parser.add_argument(
        "--steps-per-epoch",
        type=_positive_int,
        default=1,
        help="split each epoch's minibatches into this many steps (checkpoints can then fall "
        "inside an epoch); default 1: a step is an epoch. The weights do not depend on it",
    )
    parser.add_argument("--seed", type=int, default=0, help="initialisation and data order")
    parser.add_argument("--split-seed", type=int, default=0, help="the held-out split")
    parser.add_argument("--hidden", type=_positive_int, default=64, help="hidden units")
    parser.add_argument("--batch-size", type=_positive_int, default=32)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--keep-last", type=_positive_int, default=3, help="checkpoints kept")
    parser.add_argument(
        "--grace-period",
        type=_non_negative,
        default=None,
        help="seconds from SIGTERM to SIGKILL (default: the job's: $KFP_SPOT_GRACE_PERIOD, which "
        "the emulator sets, else the 30 s of a Spot VM)",
    )
    parser.add_argument(
        "--mtbp",
        type=_non_negative,
        default=None,
        help="--checkpoint-every auto: a hint for the mean seconds between preemptions, used "
        "until the run has outlived it (default: none; before its first preemption the run "
        "assumes twice its running time so far); its attempt records replace it once preempted",
    )
    parser.add_argument("--async-save", action="store_true", help="write checkpoints in background")
    parser.add_argument(
        "--sklearn-model",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also write model.joblib, the scikit-learn model Vertex AI's prebuilt sklearn "
        "prediction image serves (--no-sklearn-model: model.npz and model.json only, without "
        "the second or so of importing scikit-learn)",
    )
    add_output_dir_arguments(parser)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # On Vertex AI, gs:// directories are mounted at /gcs: plain file I/O, no gcsfs on the VM.
    resolve_output_dirs(parser, args)
    return args


def _config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "seed": args.seed,
        "split_seed": args.split_seed,
        "hidden": args.hidden,
        "batch_size": args.batch_size,
        "learning_rate": args.learning_rate,
        "momentum": args.momentum,
        "epochs": args.epochs,
        "steps_per_epoch": args.steps_per_epoch,
    }


def _check_resumable(saved: dict[str, Any], config: dict[str, Any]) -> None:
    changed = [k for k in _FIXED if saved.get(k) != config[k]]
    if changed:
        raise SystemExit(
            "the checkpoints were written with other settings ("
            + ", ".join(f"{k}: {saved.get(k)!r} -> {config[k]!r}" for k in changed)
            + "); use a new checkpoint directory or the same settings"
        )


def write_model(
    model_dir: str, params: dict[str, np.ndarray], info: dict[str, Any], sklearn_model: Any = None
) -> None:
    """Write ``model.npz`` (weights), given one ``model.joblib`` (the scikit-learn model Vertex's
    prebuilt sklearn image serves), and last ``model.json`` (settings, steps, training metrics).

    ``model.json`` goes last: once it is there, the export of its step is whole.
    """
    buf = io.BytesIO()
    np.savez(buf, **params)
    fs.atomic_write(fs.join(model_dir, "model.npz"), buf.getvalue())
    if sklearn_model is not None:
        import joblib

        dumped = io.BytesIO()
        joblib.dump(sklearn_model, dumped)
        fs.atomic_write(fs.join(model_dir, "model.joblib"), dumped.getvalue())
    fs.atomic_write(fs.join(model_dir, "model.json"), json.dumps(info, indent=1, sort_keys=True))


def exported(model_dir: str, steps: int, config: dict[str, Any], sklearn_model: bool) -> bool:
    """Whether ``model_dir`` holds the whole export of ``steps`` steps trained with ``config``
    (with ``model.joblib`` when ``sklearn_model``)."""
    local = fs.to_local_path(model_dir)
    if local is None:  # no /gcs mount (a laptop on gs://): export again rather than ask fsspec
        return False
    files = ["model.npz", "model.joblib"] if sklearn_model else ["model.npz"]
    try:
        with open(os.path.join(local, "model.json"), encoding="utf-8") as handle:
            info = json.load(handle)
    except (OSError, ValueError):
        return False
    return (
        isinstance(info, dict)
        and info.get("steps") == steps
        and info.get("config") == config
        and all(os.path.isfile(os.path.join(local, f)) for f in files)
    )


def train(args: argparse.Namespace) -> int:
    """Run (or resume) training; returns the process exit status."""
    config = _config(args)
    n_train = data.n_train(args.split_seed)
    batches = math.ceil(n_train / args.batch_size)  # minibatches in an epoch
    if args.steps_per_epoch > batches:
        raise SystemExit(
            f"--steps-per-epoch {args.steps_per_epoch} is more than the {batches} minibatches of "
            f"an epoch (batch size {args.batch_size}); use 1..{batches}"
        )
    steps_per_epoch = args.steps_per_epoch
    total = args.epochs * steps_per_epoch

    with CheckpointManager(
        args.checkpoint_dir,
        interval=args.checkpoint_every,
        keep_last=args.keep_last,
        async_save=args.async_save,
        grace_period=args.grace_period,
        mtbp=args.mtbp or None,
    ) as ckpt:
        restored = ckpt.restore()
        if restored is not None:
            state = restored.state
            _check_resumable(state["config"], config)
            params, velocity, rng = state["params"], state["velocity"], state["rng"]
            order = state["order"]
            step = int(state["progress"]["step"])
            if step > total:
                raise SystemExit(
                    f"the newest checkpoint is at step {step}, past the {total} steps of "
                    f"--epochs {args.epochs}; pass --epochs >= {math.ceil(step / steps_per_epoch)}"
                )
            print(f"resuming from step {step}", flush=True)
            if step == total and (
                not ckpt.writer or exported(args.model_dir, total, config, args.sklearn_model)
            ):
                # Preempted after the export: nothing left to train or write.
                print(
                    f"finished {total} steps; the model of step {total} is already in "
                    f"{args.model_dir}",
                    flush=True,
                )
                return 0
        else:
            rng = np.random.default_rng(args.seed)
            params = model.init_params(rng, data.N_FEATURES, args.hidden)
            velocity = {k: np.zeros_like(v) for k, v in params.items()}
            order = np.arange(n_train)
            step = 0
            print("starting from step 0 (no committed checkpoint)", flush=True)
        X_train, y_train, _, _ = data.split(args.split_seed)
        print(
            f"training {total} steps ({args.epochs} epochs of {steps_per_epoch} step(s), "
            f"{batches} minibatches each)",
            flush=True,
        )

        def snapshot() -> dict[str, Any]:
            return {
                "params": params,
                "velocity": velocity,
                "rng": rng,
                "order": order,
                "progress": {"step": step},
                "config": config,
            }

        while step < total:
            started = time.monotonic()
            epoch, part = divmod(step, steps_per_epoch)
            if part == 0:
                order = rng.permutation(n_train)
            losses = []
            for batch in range(
                part * batches // steps_per_epoch, (part + 1) * batches // steps_per_epoch
            ):
                rows = order[batch * args.batch_size : (batch + 1) * args.batch_size]
                losses.append(
                    model.sgd_step(
                        params,
                        velocity,
                        X_train[rows],
                        y_train[rows],
                        learning_rate=args.learning_rate,
                        momentum=args.momentum,
                    )
                )
            loss = float(np.mean(losses))
            step += 1
            if part == steps_per_epoch - 1:
                print(f"epoch {epoch + 1}/{args.epochs} step {step} loss {loss:.4f}", flush=True)
            if args.step_seconds:
                ckpt.notice.sleep(args.step_seconds - (time.monotonic() - started))
            ckpt.maybe_save(step, snapshot, metrics={"loss": loss})
            if ckpt.should_stop:
                print(
                    f"preempted after step {step}; the next attempt resumes from step "
                    f"{ckpt.last_committed_step}",
                    flush=True,
                )
                return PREEMPTED_EXIT_CODE
        if ckpt.last_committed_step != total:
            ckpt.save(total, snapshot(), blocking=True)
        probs = model.predict_proba(params, X_train)
        info = {
            "config": config,
            "steps": total,
            "train_accuracy": float((probs.argmax(axis=1) == y_train).mean()),
        }
        if ckpt.writer:  # one replica writes the model (the others hold the same weights)
            sklearn_model = None
            if args.sklearn_model:
                sklearn_model = model.to_sklearn(params, X_train[:50], y_train[:50])
            write_model(args.model_dir, params, info, sklearn_model)
    print(
        f"finished {total} steps; train accuracy {info['train_accuracy']:.4f}; "
        f"model written to {args.model_dir}",
        flush=True,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m trainer.task``."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return train(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
