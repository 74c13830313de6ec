"""Pipeline cancellation reaches the launcher as SIGTERM (or SIGINT): turn it into an exception.

Python runs a signal handler between any two bytecodes of the main thread, which may be inside a
finalizer (an object's ``__del__``, a weakref callback). An exception raised there is dropped:
Python prints "Exception ignored in ..." and goes on. So the handler's error is also kept, and a
dropped one is raised again at the next wait (:func:`sleep`, :func:`deliver_dropped`): a
cancelled task never forgets that it was cancelled.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger("kfp_spot.jobs.launcher")


class LaunchInterruptedError(BaseException):
    """SIGTERM/SIGINT reached the launcher (pipeline cancellation).

    A BaseException, so that nothing in the loop swallows it.
    """

    def __init__(self, signum: int):
        super().__init__(f"received signal {signum}")
        self.signum = signum
        self.cancel_error = ""  # set when what was started could not be cancelled: why


class _Delivery:
    """One ``cancel_on_signals`` block's signal: its error, and whether Python dropped it."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.dropped = False
        self.holding = False  # inside held(): the error waits for the block's end
        self.held = False  # the error came while holding and is not raised yet


_active: list[_Delivery] = []  # the innermost block last (main thread only)


def deliver_dropped() -> None:
    """Raise the signal's error here if Python dropped it where it was first raised.

    Call it where the main thread waits; :func:`sleep` does (in another thread it does nothing:
    the signal was the main thread's).
    """
    if not _active or not _active[-1].dropped:
        return
    if threading.current_thread() is not threading.main_thread():
        return
    delivery = _active[-1]
    delivery.dropped = False
    assert delivery.error is not None
    raise delivery.error


def sleep(seconds: float) -> None:
    """``time.sleep``, raising first a cancellation that a finalizer dropped."""
    deliver_dropped()
    time.sleep(seconds)


@contextlib.contextmanager
def cancel_on_signals(
    error: Callable[[int], BaseException] = LaunchInterruptedError,
) -> Iterator[None]:
    """Turn the first SIGTERM/SIGINT into ``error(signum)`` (main thread only).

    ``error`` should be a BaseException, so that nothing in the caller's loop swallows it: the
    launcher's LaunchInterruptedError, deploy_spot_endpoint's DeployInterruptedError. If it is
    raised inside a finalizer, where Python drops exceptions, the next :func:`sleep` in the block
    raises it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    delivery = _Delivery()

    def handler(signum: int, _frame: object) -> None:
        if delivery.error is not None:
            log.warning("signal %d again: already cancelling", signum)
            return
        delivery.error = error(signum)
        if delivery.holding:
            delivery.held = True
            return
        raise delivery.error

    previous_hook = sys.unraisablehook

    def unraisable(args: Any) -> None:
        if delivery.error is not None and args.exc_value is delivery.error:
            delivery.dropped = True
            log.info("%s arrived inside a finalizer: cancelling at the next wait", delivery.error)
            return
        previous_hook(args)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    sys.unraisablehook = unraisable
    _active.append(delivery)
    try:
        yield
    finally:
        _active.remove(delivery)
        sys.unraisablehook = previous_hook
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Inside :func:`cancel_on_signals`: a signal arriving in this block is raised as it ends.

    For a step that must not be cut in the middle: ``subprocess.Popen`` interrupted after its
    fork raises with the child running and no handle to stop it, so the child outlived the task.
    Outside a ``cancel_on_signals`` block, or in another thread, it does nothing.
    """
    if not _active or threading.current_thread() is not threading.main_thread():
        yield
        return
    delivery = _active[-1]
    delivery.holding = True
    try:
        yield
    finally:
        delivery.holding = False
        if delivery.held:  # raised even over the block's own error: the task was stopped
            delivery.held = False
            assert delivery.error is not None
            raise delivery.error
