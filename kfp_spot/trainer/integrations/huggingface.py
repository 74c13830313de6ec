"""Hugging Face ``transformers.Trainer``: a ``TrainerCallback`` that survives Spot preemption.

::

    from kfp_spot.trainer.integrations.huggingface import SpotTrainerCallback

    spot = SpotTrainerCallback()                          # root: $AIP_CHECKPOINT_DIR
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[spot])
    trainer.train(resume_from_checkpoint=spot.resume_from_checkpoint())

- On the preemption notice (SIGTERM) the callback sets ``control.should_save`` and
  ``control.should_training_stop`` at the end of the step that is running: the Trainer saves its
  own checkpoint (model, optimizer, scheduler, RNG states, ``trainer_state.json``) and stops. By
  default the process then exits with status 143 (``exit_on_preemption``).
- Every checkpoint the Trainer saves (its ``save_strategy``/``save_steps`` are the periodic
  saves) is committed as step ``global_step`` under the checkpoint root: the files are copied from
  ``output_dir/checkpoint-N`` into ``<root>/step-N`` under a manifest. The Trainer's own
  directories are left as they are (``save_total_limit`` rotates them); ``keep_last`` rotates the
  committed steps.
- :meth:`SpotTrainerCallback.resume_from_checkpoint` returns the newest committed step that
  verifies (downloaded for ``gs://`` roots), or None on a fresh start: the Trainer then restores
  everything it saved, the data position included.
- Attempt records are written, and ``on_preemption`` cleanup hooks run after the save.

The callback needs ``transformers`` (not torch) to import; the Trainer itself needs torch.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, cast

from kfp_spot.trainer.integrations._common import Hooks, SpotCallback, finish, missing_framework
from kfp_spot.trainer.manager import CheckpointManager

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as exc:  # the training package brings its own transformers
    raise missing_framework("huggingface", "transformers", exc) from None

log = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "checkpoint"
"""The Trainer's checkpoint folders are ``<output_dir>/checkpoint-<global_step>``."""


def _last_metrics(state: TrainerState) -> dict[str, float]:
    out: dict[str, float] = {}
    for entry in state.log_history or []:
        for key, value in entry.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "step":
                out[key] = float(value)
    return out


class SpotTrainerCallback(SpotCallback, TrainerCallback):
    """Commits the Trainer's checkpoints as kfp-spot steps and saves on the preemption notice.

    Args:
        root: checkpoint root (local path, ``file://`` or ``gs://``); default
            ``$AIP_CHECKPOINT_DIR``.
        keep_last: committed steps to keep.
        grace_period: seconds between the notice and SIGKILL; default: the job's
            (``$KFP_SPOT_GRACE_PERIOD``, which the emulator sets, else 30 s).
        on_preemption: cleanup callable(s) run after the save on a notice, time-boxed to the
            grace period left (errors logged, never raised).
        exit_on_preemption: after saving on a notice, leave the process with status 143 instead
            of returning from ``trainer.train()``.
        download_to: for a ``gs://`` root, where :meth:`resume_from_checkpoint` downloads the
            step (default: a temporary directory).
        manager: a :class:`~kfp_spot.trainer.CheckpointManager` to use instead.

    Attributes:
        manager: the checkpoint manager (notice, attempt records, commits).
        preempted: whether training stopped on a preemption notice.
    """

    def __init__(
        self,
        root: str | None = None,
        *,
        keep_last: int | None = 3,
        grace_period: float | None = None,
        on_preemption: Hooks = None,
        exit_on_preemption: bool = True,
        download_to: str | None = None,
        manager: CheckpointManager | None = None,
    ) -> None:
        self._setup_spot(
            manager,
            on_preemption,
            exit_on_preemption,
            download_to,
            root=root,
            keep_last=keep_last,
            grace_period=grace_period,
        )
        self._save_started: float | None = None

    def resume_from_checkpoint(self) -> str | None:
        """The newest committed step's local directory (for ``trainer.train``), or None."""
        found = self._restored_directory()
        return found.path if found is not None else None

    def on_train_begin(  # noqa: D102
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.resume_from_checkpoint()  # the attempt record names the step resumed from
        self.manager.start()

    def on_step_end(  # noqa: D102
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        save = self._new_notice(state.global_step)
        if save is not None:
            control.should_save = control.should_save or save
            control.should_training_stop = True
        if control.should_save:
            self._save_started = time.monotonic()

    def on_save(  # noqa: D102
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # Optional only until TrainingArguments.__post_init__ fills it in ("trainer_output").
        output_dir = cast(str, args.output_dir)
        folder = os.path.join(output_dir, f"{CHECKPOINT_PREFIX}-{state.global_step}")
        if self.manager.writer and not os.path.isdir(folder):
            log.warning("the Trainer saved no %s; nothing to commit", folder)
            return
        if self.manager.writer:
            self.manager.save_directory(state.global_step, folder, metrics=_last_metrics(state))
        if self._save_started is not None:
            self._save_seconds = max(self._save_seconds, time.monotonic() - self._save_started)
            self._save_started = None
        if self.preempted:
            self._saved_on_notice(state.global_step)

    def on_train_end(  # noqa: D102
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # The Trainer saves the last step itself (DefaultFlowCallback) and on_save commits it.
        finish(
            self.manager,
            state.global_step,
            preempted=self.preempted,
            exit_on_preemption=self.exit_on_preemption,
        )
