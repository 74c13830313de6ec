"""PyTorch Lightning: a ``Callback`` that makes ``Trainer.fit`` survive Spot preemption.

::

    from kfp_spot.trainer.integrations.lightning import SpotLightningCallback

    spot = SpotLightningCallback(every_n_steps=200)        # root: $AIP_CHECKPOINT_DIR
    trainer = L.Trainer(max_epochs=10, callbacks=[spot])
    trainer.fit(model, datamodule=dm, ckpt_path=spot.ckpt_path())

- On the preemption notice (SIGTERM) the callback saves a Lightning checkpoint
  (``trainer.save_checkpoint``: weights, optimizers, schedulers, loop progress) after the batch
  that is running, commits it as step ``global_step`` under the checkpoint root and sets
  ``trainer.should_stop``; by default the process then exits with status 143.
- ``every_n_steps`` adds periodic commits (insurance against a kill without notice); the final
  step is committed when ``fit`` ends.
- :meth:`SpotLightningCallback.ckpt_path` returns the newest committed ``lightning.ckpt`` that
  verifies (downloaded for ``gs://`` roots), or None on a fresh start.

Works with ``lightning`` (``lightning.pytorch``) or ``pytorch_lightning``, whichever is installed.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from typing import Any

from kfp_spot.checkpoints.numeric import whole_number
from kfp_spot.trainer.integrations._common import (
    Hooks,
    SpotCallback,
    exit_preempted,
    finish,
    missing_framework,
)
from kfp_spot.trainer.manager import CheckpointManager

try:
    from lightning.pytorch import Callback
except ImportError:  # the older standalone package
    try:
        from pytorch_lightning import Callback
    except ImportError as exc:  # the training package brings its own Lightning
        raise missing_framework("lightning", "lightning (or pytorch_lightning)", exc) from None

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "lightning.ckpt"
"""The Lightning checkpoint of a step (``trainer.fit(..., ckpt_path=step_dir/CHECKPOINT_FILE)``)."""


class SpotLightningCallback(SpotCallback, Callback):  # type: ignore[misc]  # lightning: not in dev
    """Lightning checkpoints on the preemption notice, committed as kfp-spot steps.

    Args:
        root: checkpoint root (local path, ``file://`` or ``gs://``); default
            ``$AIP_CHECKPOINT_DIR``.
        every_n_steps: also commit every N optimizer steps (None: only on the notice and at the
            end).
        keep_last: committed steps to keep.
        grace_period: seconds between the notice and SIGKILL; default: the job's
            (``$KFP_SPOT_GRACE_PERIOD``, which the emulator sets, else 30 s).
        on_preemption: cleanup callable(s) run after the save on a notice, time-boxed to the
            grace period left (errors logged, never raised).
        exit_on_preemption: after saving on a notice, leave the process with status 143 instead
            of returning from ``fit``.
        download_to: for a ``gs://`` root, where :meth:`ckpt_path` downloads the step.
        manager: a :class:`~kfp_spot.trainer.CheckpointManager` to use instead.

    Raises:
        ValueError: ``every_n_steps`` is not a positive int or None.
    """

    def __init__(
        self,
        root: str | None = None,
        *,
        every_n_steps: int | None = None,
        keep_last: int | None = 3,
        grace_period: float | None = None,
        on_preemption: Hooks = None,
        exit_on_preemption: bool = True,
        download_to: str | None = None,
        manager: CheckpointManager | None = None,
    ) -> None:
        super().__init__()
        every = None if every_n_steps is None else whole_number(every_n_steps)
        if every_n_steps is not None and (every is None or every < 1):
            raise ValueError(f"every_n_steps must be an int >= 1 or None, got {every_n_steps!r}")
        self.every_n_steps = every
        self._setup_spot(
            manager,
            on_preemption,
            exit_on_preemption,
            download_to,
            root=root,
            keep_last=keep_last,
            grace_period=grace_period,
        )

    def ckpt_path(self) -> str | None:
        """The newest committed step's ``lightning.ckpt`` (for ``fit(ckpt_path=...)``), or None."""
        found = self._restored_directory()
        return found.file(CHECKPOINT_FILE) if found is not None else None

    def _save(self, trainer: Any, step: int) -> None:
        started = time.monotonic()
        staging = tempfile.mkdtemp(prefix="kfp-spot-lightning-")
        try:
            # Collective under distributed strategies: every rank calls it, rank 0 writes.
            trainer.save_checkpoint(os.path.join(staging, CHECKPOINT_FILE))
            if self.manager.writer:
                metrics = {
                    k: float(v)
                    for k, v in (trainer.callback_metrics or {}).items()
                    if _is_number(v)
                }
                self.manager.save_directory(step, staging, metrics=metrics)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self._save_seconds = max(self._save_seconds, time.monotonic() - started)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:  # noqa: D102
        if stage == "fit":
            self.ckpt_path()  # the attempt record names the step resumed from
            self.manager.start()

    def on_train_batch_end(  # noqa: D102
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = int(trainer.global_step)
        save = self._new_notice(step)
        if save is not None:
            if save:
                self._save(trainer, step)
            self._saved_on_notice(step, saved=save)
            if self.exit_on_preemption:
                # Now, not at the end of fit: with min_epochs/min_steps Lightning would not
                # stop, and its own SIGTERM handling raises at the end of this batch anyway.
                self.manager.close()
                exit_preempted(step)
        if self.manager.should_stop:
            trainer.should_stop = True
            return
        if (
            self.every_n_steps
            and step % self.every_n_steps == 0
            and self.manager.last_committed_step != step
        ):
            self._save(trainer, step)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:  # noqa: D102
        step = int(trainer.global_step)
        finish(
            self.manager,
            step,
            preempted=self.preempted,
            exit_on_preemption=False,  # a preempted fit has exited in on_train_batch_end
            save_final=lambda: self._save(trainer, step),
        )

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:  # noqa: D102
        # Lightning's own SIGTERMException, or a failure: close the attempt record either way.
        self.manager.close(None if self.preempted else f"{type(exception).__name__}: {exception}")


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return getattr(value, "numel", lambda: 1)() == 1
