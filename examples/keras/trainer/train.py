"""What ``python -m trainer.task`` runs: an ordinary ``model.fit`` with kfp-spot's callback."""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from kfp_spot import fs
from kfp_spot.trainer.integrations.keras import SpotCheckpoint
from trainer import data
from trainer.model import build, keras


class Pacing(keras.callbacks.Callback):
    """Makes each batch last at least ``seconds`` (wakes early on the preemption notice)."""

    def __init__(self, seconds: float, spot: SpotCheckpoint) -> None:
        super().__init__()
        self.seconds, self.spot, self._started = seconds, spot, 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self._started = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        self.spot.manager.notice.sleep(self.seconds - (time.monotonic() - self._started))


def write_model(model: keras.Model, model_dir: str) -> None:
    """``model.keras`` into ``model_dir`` (local or gs://)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        with open(path, "rb") as handle:
            fs.atomic_write(fs.join(model_dir, "model.keras"), handle.read())


def run(args: argparse.Namespace) -> int:
    """Train as ``args`` (from :func:`trainer.task.parse_args`) say; returns the exit status."""
    X_train, y_train, _, _ = data.split(args.split_seed)
    keras.utils.set_random_seed(args.seed)
    model = build(hidden=args.hidden, dropout=args.dropout, learning_rate=args.learning_rate)
    spot = SpotCheckpoint(
        args.checkpoint_dir,
        interval=args.checkpoint_every,
        keep_last=args.keep_last,
        grace_period=args.grace_period,
    )
    callbacks = [spot] + ([Pacing(args.batch_seconds, spot)] if args.batch_seconds else [])
    model.fit(
        X_train,
        y_train,
        epochs=args.epochs,
        batch_size=args.batch_size,
        verbose=2,
        callbacks=callbacks,
    )
    if spot.manager.writer:
        write_model(model, args.model_dir)
    print(f"finished {args.epochs} epochs; model written to {args.model_dir}", flush=True)
    return 0
