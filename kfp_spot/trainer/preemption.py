"""The preemption notice: SIGTERM means "save once more and go", not "die now".

Compute Engine (and the local emulator) sends SIGTERM to a Spot VM's processes, waits a grace
period (about 30 s) and then kills them. :class:`PreemptionNotice` turns the signal into a flag the
training loop polls between steps, so the loop finishes the step it is in, saves, and exits.

The grace period is the job's (:func:`job_grace_period`): ``$KFP_SPOT_GRACE_PERIOD`` where it is
set (the emulator sets it to its own, e.g. 10 s for ``kfp-spot run``), else the 30 s of Compute
Engine's Spot preemption notice. Vertex AI sets no variable for it: on Vertex the 30 s apply.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import Any

from kfp_spot.checkpoints.numeric import real_number

log = logging.getLogger(__name__)

DEFAULT_GRACE_PERIOD = 30.0
"""Seconds between SIGTERM and SIGKILL on a preempted Compute Engine VM (about 30 s)."""

GRACE_PERIOD_VAR = "KFP_SPOT_GRACE_PERIOD"
"""The job's grace period in seconds, where the platform says it (the emulator does)."""


def is_grace_period(value: Any) -> bool:
    """Whether ``value`` is a grace period: a finite number of seconds >= 0 (not a bool)."""
    number = real_number(value)
    return number is not None and math.isfinite(number) and number >= 0


def job_grace_period(environ: Mapping[str, str] | None = None) -> float:
    """The grace period of the job this process runs in, in seconds.

    ``$KFP_SPOT_GRACE_PERIOD`` (the emulator sets it to its own grace period; a job may set it in
    its environment), else :data:`DEFAULT_GRACE_PERIOD`, Compute Engine's Spot preemption notice,
    which is what a Vertex AI job gets (Vertex AI sets no variable for it). Read when called.

    Raises:
        ValueError: the variable is set but is not a number of seconds >= 0.
    """
    text = (os.environ if environ is None else environ).get(GRACE_PERIOD_VAR, "").strip()
    if not text:
        return DEFAULT_GRACE_PERIOD
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not is_grace_period(value):
        raise ValueError(
            f"{GRACE_PERIOD_VAR}={text!r}: must be a number of seconds >= 0 (e.g. 30), or unset "
            f"for the {DEFAULT_GRACE_PERIOD:g} s of a Spot VM's preemption notice"
        )
    return value


_Handler = Callable[[int, FrameType | None], Any] | int | None


class PreemptionNotice:
    """Marks "preemption requested" when a termination signal arrives.

    The handler only sets a flag and records the time (it never raises into the training step),
    then calls whatever handler was installed before it, unless that was the default (which would
    kill the process) or "ignore".

    Args:
        grace_period: seconds the platform allows between the signal and SIGKILL; None: the
            job's (:func:`job_grace_period`).
        signals: the signals that mean "you are being preempted".
        clock: a monotonic clock (tests may pass their own).

    Raises:
        ValueError: ``grace_period`` is not a finite number >= 0, or ``signals`` is empty.
    """

    def __init__(
        self,
        grace_period: float | None = None,
        signals: Iterable[int] = (signal.SIGTERM,),
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if grace_period is None:
            grace_period = job_grace_period()
        if not is_grace_period(grace_period):
            raise ValueError(f"grace_period must be a number of seconds >= 0, got {grace_period!r}")
        self.grace_period = float(grace_period)
        self.signals = tuple(signals)
        if not self.signals:
            raise ValueError("signals must name at least one signal (e.g. signal.SIGTERM)")
        self._clock = clock
        # A plain flag, not a threading.Event: Event.set() takes a lock that the interrupted
        # main thread may be holding, so calling it from a signal handler can deadlock.
        self._requested = False
        self._requested_at: float | None = None
        self._signum: int | None = None
        self._reason = ""
        self._requested_wall: float | None = None
        self._previous: dict[int, _Handler] = {}

    @property
    def requested(self) -> bool:
        """Whether a preemption notice has arrived."""
        return self._requested

    @property
    def requested_at(self) -> float | None:
        """Monotonic time the notice arrived, or None."""
        return self._requested_at

    @property
    def requested_wall_time(self) -> float | None:
        """Unix time the notice arrived, or None."""
        return self._requested_wall

    @property
    def reason(self) -> str | None:
        """What requested preemption (the signal's name, or the program's reason), or None."""
        if not self._requested:
            return None
        if self._signum is not None:
            return f"received {signal.Signals(self._signum).name}"
        return self._reason

    @property
    def installed(self) -> bool:
        """Whether the handler is installed."""
        return bool(self._previous)

    def remaining(self) -> float:
        """Seconds left of the grace period (``inf`` before any notice, never below 0)."""
        if self._requested_at is None:
            return float("inf")
        return max(0.0, self.grace_period - (self._clock() - self._requested_at))

    def request(self, reason: str = "requested by the program") -> None:
        """Mark preemption requested without a signal (the loop then saves and stops)."""
        if not self._requested:
            self._reason = reason
            self._requested_at = self._clock()
            self._requested_wall = time.time()
            self._requested = True
            log.warning("preemption notice: %s; saving once more and stopping", reason)

    def install(self) -> PreemptionNotice:
        """Install the handler for every signal in ``signals`` (main thread only).

        Raises:
            RuntimeError: called from another thread than the main one (Python's rule).
        """
        if self.installed:
            return self
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "PreemptionNotice.install() must run in the main thread (Python delivers "
                "signals only there)"
            )
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def displaced(self) -> dict[str, str]:
        """The signals (by name) whose handler was set back to ignore or to the default action.

        The program or a library it imports did it after the notice was installed
        (``signal.signal(SIGTERM, SIG_IGN)``): the notice never arrives. A handler of its own
        may call the one it replaced (Lightning's does), so only these two are sure. Empty when
        not installed.
        """
        out = {}
        for signum in self._previous:
            current = signal.getsignal(signum)
            if current in (signal.SIG_IGN, signal.SIG_DFL):
                out[signal.Signals(signum).name] = _describe(current)
        return out

    def uninstall(self) -> None:
        """Put back the handlers that were installed before."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early on a notice; returns whether one arrived."""
        deadline = time.monotonic() + max(0.0, seconds)
        while not self._requested:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.05))
        return True

    def __enter__(self) -> PreemptionNotice:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # No logging here: logging takes locks the interrupted thread may hold. The loop reports.
        if not self._requested:
            self._signum = signum
            self._requested_at = self._clock()
            self._requested_wall = time.time()
            self._requested = True
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)


def _describe(handler: object) -> str:
    """SIG_IGN or SIG_DFL as a person reads it."""
    if handler == signal.SIG_IGN:
        return "ignored: SIG_IGN, so SIGKILL ends the process after the grace period"
    return "the default action: SIG_DFL, which ends the process at once"
