"""Pipeline cancellation reaches the launcher as SIGTERM (or SIGINT): turn it into an exception."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator

log = logging.getLogger("kfp_spot.jobs.launcher")


class LaunchInterruptedError(BaseException):
    """SIGTERM/SIGINT reached the launcher (pipeline cancellation).

    A BaseException, so that nothing in the loop swallows it.
    """

    def __init__(self, signum: int):
        super().__init__(f"received signal {signum}")
        self.signum = signum
        self.cancel_error = ""  # set when what was started could not be cancelled: why


@contextlib.contextmanager
def cancel_on_signals(
    error: Callable[[int], BaseException] = LaunchInterruptedError,
) -> Iterator[None]:
    """Turn the first SIGTERM/SIGINT into ``error(signum)`` (main thread only).

    ``error`` should be a BaseException, so that nothing in the caller's loop swallows it: the
    launcher's LaunchInterruptedError, deploy_spot_endpoint's DeployInterruptedError.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = {"done": False}

    def handler(signum: int, _frame: object) -> None:
        if fired["done"]:
            log.warning("signal %d again: already cancelling", signum)
            return
        fired["done"] = True
        raise error(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
