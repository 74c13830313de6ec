"""Shutdown-time cleanup: the user's own work on the preemption notice, inside the grace period.

A preempted process has what is left of the grace period (about 30 s from SIGTERM) before
SIGKILL. The checkpoint comes first; after it, training code often has a little more to do:
flush metrics, upload logs, release a lock, tell a scheduler. :class:`CleanupHooks` runs those
*after* the save, each in a helper thread bounded by the time left (less a reserve for closing
the attempt record and exiting). A hook that raises is logged and the next one runs; a hook still
running at its deadline is cut off (left behind in its daemon thread, logged) so it can never
cost the checkpoint or turn a clean preemption into a SIGKILL. Hooks never make the process fail.

:class:`kfp_spot.trainer.CheckpointManager` owns one (``ckpt.on_preemption(fn)``), and every
framework integration takes ``on_preemption=`` and passes it on.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kfp_spot.checkpoints.numeric import real_number
from kfp_spot.trainer.preemption import PreemptionNotice

log = logging.getLogger(__name__)

RESERVE_SECONDS = 1.0
"""Seconds of the grace period kept back for closing the attempt record and exiting."""


@dataclass(frozen=True)
class HookResult:
    """How one cleanup hook ended.

    Attributes:
        name: the hook's name.
        status: ``ok``, ``error`` (it raised; logged), ``timeout`` (cut off at its deadline) or
            ``skipped`` (no time was left to start it).
        seconds: how long it ran (up to its deadline).
        error: the exception's text for ``error``.
    """

    name: str
    status: str
    seconds: float
    error: str | None = None


@dataclass(frozen=True)
class _Hook:
    fn: Callable[[], Any]
    name: str
    timeout: float | None


def _name_of(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


class CleanupHooks:
    """Callables to run once on the preemption notice, time-boxed to the grace period left.

    Args:
        notice: the preemption notice whose grace period bounds the hooks.
        reserve: seconds of the grace period kept back (the hooks end this long before
            SIGKILL would come).
        clock: monotonic clock (tests may pass their own).

    Raises:
        ValueError: ``reserve`` is negative.
    """

    def __init__(
        self,
        notice: PreemptionNotice,
        *,
        reserve: float = RESERVE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        seconds = real_number(reserve)
        if seconds is None or not 0 <= seconds < math.inf:
            raise ValueError(f"reserve must be a number of seconds >= 0, got {reserve!r}")
        self.notice = notice
        self.reserve = seconds
        self._clock = clock
        self._hooks: list[_Hook] = []
        self._lock = threading.Lock()
        self._results: list[HookResult] | None = None

    def add(
        self,
        fn: Callable[[], Any],
        *,
        name: str | None = None,
        timeout: float | None = None,
    ) -> Callable[[], Any]:
        """Register ``fn()`` to run on the preemption notice, after the save.

        Hooks run in the order they were added. Usable as a decorator.

        Args:
            fn: called with no arguments.
            name: how logs name it (default: its qualified name).
            timeout: at most this many seconds for this hook (it never gets more than the
                grace period left, less the reserve).

        Returns:
            ``fn``.

        Raises:
            TypeError: ``fn`` is not callable.
            ValueError: ``timeout`` is not a positive number.
        """
        if not callable(fn):
            raise TypeError(f"a cleanup hook must be callable, got {type(fn).__name__}")
        limit = None if timeout is None else real_number(timeout)
        if timeout is not None and (limit is None or not limit > 0):
            raise ValueError(f"timeout must be a number of seconds > 0 or None, got {timeout!r}")
        with self._lock:
            self._hooks.append(_Hook(fn, name or _name_of(fn), limit))
        return fn

    def extend(self, hooks: Callable[[], Any] | Iterable[Callable[[], Any]] | None) -> None:
        """Add one hook or several (``None``: nothing), as integrations' ``on_preemption=``."""
        if hooks is None:
            return
        for fn in [hooks] if callable(hooks) else list(hooks):
            self.add(fn)

    def __len__(self) -> int:
        return len(self._hooks)

    @property
    def results(self) -> list[HookResult] | None:
        """What the run did (None until the hooks ran)."""
        return None if self._results is None else list(self._results)

    def _time_left(self) -> float:
        return self.notice.remaining() - self.reserve

    def run(self) -> list[HookResult]:
        """Run every hook once (later calls return the first run's results).

        Each hook runs in a daemon thread; the caller waits at most until the hook's own
        ``timeout`` or the grace period left less the reserve, whichever comes first. Before a
        notice (``remaining()`` is infinite) only the hooks' own timeouts bound them.

        Returns:
            One :class:`HookResult` per hook, in order.
        """
        with self._lock:
            if self._results is not None:
                return list(self._results)
            self._results = []
            hooks = list(self._hooks)
        results = [self._run_one(hook) for hook in hooks]
        with self._lock:
            self._results = results
        return list(results)

    def _run_one(self, hook: _Hook) -> HookResult:
        budget = self._time_left()
        if hook.timeout is not None:
            budget = min(budget, hook.timeout)
        if budget <= 0:
            log.warning(
                "cleanup hook %s skipped: no time left of the %gs grace period",
                hook.name,
                self.notice.grace_period,
            )
            return HookResult(hook.name, "skipped", 0.0)
        failure: list[BaseException] = []

        def target() -> None:
            try:
                hook.fn()
            except Exception as exc:  # a user's hook never fails the shutdown
                failure.append(exc)
                log.error("cleanup hook %s failed", hook.name, exc_info=exc)

        started = self._clock()
        thread = threading.Thread(target=target, name=f"kfp-spot-cleanup-{hook.name}", daemon=True)
        thread.start()
        thread.join(None if budget == float("inf") else budget)
        seconds = self._clock() - started
        if thread.is_alive():
            log.warning(
                "cleanup hook %s cut off after %.1fs: the grace period (%gs) is nearly over; "
                "the checkpoint was saved before it ran",
                hook.name,
                seconds,
                self.notice.grace_period,
            )
            return HookResult(hook.name, "timeout", seconds)
        if failure:
            return HookResult(
                hook.name, "error", seconds, f"{type(failure[0]).__name__}: {failure[0]}"
            )
        log.info("cleanup hook %s done in %.2fs", hook.name, seconds)
        return HookResult(hook.name, "ok", seconds)
