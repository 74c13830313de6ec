"""What every framework integration does the same way: its manager, the notice, the end."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

from kfp_spot.trainer.manager import PREEMPTED_EXIT_CODE, CheckpointManager

log = logging.getLogger("kfp_spot.trainer.integrations")

Hooks = Callable[[], Any] | Iterable[Callable[[], Any]] | None


def missing_framework(integration: str, framework: str, exc: ImportError) -> ImportError:
    """The one-line error of an integration whose framework cannot be imported.

    The kfp-spot-trainer wheel brings no framework: the training package (or its executor
    image) does, at the version it chose.
    """
    return ImportError(
        f"kfp_spot.trainer.integrations.{integration} needs {framework}, which cannot be "
        f"imported here ({exc}): add it to your training package's dependencies or run in an "
        "executor image that has it (kfp-spot brings no framework of its own)"
    )


def manager_for(
    manager: CheckpointManager | None, on_preemption: Hooks, **kwargs: Any
) -> CheckpointManager:
    """The given manager, or a new one from ``kwargs``; ``on_preemption`` hooks added to it."""
    manager = manager or CheckpointManager(**kwargs)
    manager.cleanup.extend(on_preemption)
    return manager


def save_fits_notice(manager: CheckpointManager, step: int, save_seconds: float) -> bool:
    """Whether to save ``step`` on the notice: not when it is committed or would not fit.

    For integrations whose framework saves by itself (Hugging Face, Lightning): the manager's
    ``maybe_save`` makes the same decision for the others.
    """
    remaining = manager.notice.remaining()
    if manager.last_committed_step == step:
        log.warning("step %d is already committed; stopping", step)
        return False
    if save_seconds > remaining:
        log.warning(
            "not saving step %d: the last save took %.1fs but only %.1fs of the grace period "
            "is left; the next attempt resumes from step %s",
            step,
            save_seconds,
            remaining,
            manager.last_committed_step,
        )
        return False
    return True


def finish(
    manager: CheckpointManager,
    step: int,
    *,
    preempted: bool,
    exit_on_preemption: bool,
    save_final: Callable[[], Any] | None = None,
) -> None:
    """End of training: commit the final step (unless preempted), close, exit 143 if asked.

    Args:
        manager: the integration's manager.
        step: the step training ended at.
        preempted: whether it stopped on a notice.
        exit_on_preemption: raise ``SystemExit(143)`` after a preemption.
        save_final: commits ``step`` (called when not preempted and not committed yet).

    Raises:
        SystemExit: preempted and ``exit_on_preemption``.
    """
    try:
        if save_final is not None and not preempted and manager.last_committed_step != step:
            save_final()
    finally:
        manager.close()
    if preempted and exit_on_preemption:
        exit_preempted(step)


def exit_preempted(step: int) -> NoReturn:
    """Leave the process as Vertex AI expects of a preempted replica: status 143."""
    log.warning("preempted at step %d: exiting with status %d", step, PREEMPTED_EXIT_CODE)
    raise SystemExit(PREEMPTED_EXIT_CODE)


class SpotCallback:
    """The part every integration's callback shares (mixed in before the framework's base)."""

    manager: CheckpointManager
    exit_on_preemption: bool
    preempted: bool

    def _setup_spot(
        self,
        manager: CheckpointManager | None,
        on_preemption: Hooks,
        exit_on_preemption: bool,
        download_to: str | None = None,
        **manager_args: Any,
    ) -> None:
        self.manager = manager_for(manager, on_preemption, **manager_args)
        self.exit_on_preemption = bool(exit_on_preemption)
        self.preempted = False
        self.download_to = download_to
        self._found: list[Any] = []  # the restored directory step, looked up once
        self._save_seconds = 0.0  # the longest save (frameworks that save themselves)

    def on_preemption(self, fn: Callable[[], Any], *, timeout: float | None = None) -> Any:
        """Add a cleanup hook (see :meth:`CheckpointManager.on_preemption`)."""
        return self.manager.on_preemption(fn, timeout=timeout)

    def _restored_directory(self) -> Any:
        """The newest committed directory step (looked up once per callback), or None."""
        if not self._found:
            self._found.append(self.manager.restore_directory(download_to=self.download_to))
        return self._found[0]

    # -- callbacks that save through the manager (Keras, XGBoost) ----------------------------
    def _step_end(
        self, step: int, state: Callable[[], Mapping[str, Any]], metrics: Mapping[str, Any]
    ) -> bool:
        """After a step: save when due or on the notice; whether training must stop now."""
        self.manager.maybe_save(step, state, metrics=metrics)
        if self.manager.should_stop:
            self.preempted = True
        return self.preempted

    def _end(self, step: int, state: Callable[[], Mapping[str, Any]]) -> None:
        """End of training: commit ``state()`` as ``step`` unless preempted; exit 143 if asked."""
        finish(
            self.manager,
            step,
            preempted=self.preempted,
            exit_on_preemption=self.exit_on_preemption,
            save_final=lambda: self.manager.save(step, state(), blocking=True),
        )

    # -- callbacks whose framework saves by itself (Hugging Face, Lightning) -----------------
    def _new_notice(self, step: int) -> bool | None:
        """On the first look at a preemption notice: whether to save ``step`` (it fits).

        Marks the callback preempted. None when there is no notice, or it was seen before.
        """
        if not self.manager.should_stop or self.preempted:
            return None
        self.preempted = True
        return save_fits_notice(self.manager, step, self._save_seconds)

    def _saved_on_notice(self, step: int, saved: bool = True) -> None:
        """After the save on the notice (or the decision not to): the user's cleanup hooks."""
        if saved:
            log.warning("saved step %d on the preemption notice; stopping", step)
        self.manager.cleanup.run()
