"""Alarms: call a function with a key at a wall-clock time, from one thread, without polling.

The emulator uses one to wake the scheduler when a FLEX_START job's wait for capacity is over
(the scheduler itself sleeps until something happens, never on a timer).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Alarms:
    """A thread that calls ``fire(key)`` once each alarm's time has come.

    Args:
        fire: called with the alarm's key, from the alarms thread.
    """

    def __init__(self, fire: Callable[[str], None]) -> None:
        self._fire = fire
        self._heap: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="emulator-alarms", daemon=True)

    def start(self) -> None:
        """Start the alarms thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; pending alarms are dropped (they are re-armed by the next start)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    def at(self, when: float, key: str) -> None:
        """Call ``fire(key)`` at wall time ``when`` (at once when it has passed)."""
        with self._cond:
            heapq.heappush(self._heap, (when, key))
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and (not self._heap or self._heap[0][0] > time.time()):
                    timeout = self._heap[0][0] - time.time() if self._heap else None
                    self._cond.wait(timeout)
                if self._stopping:
                    return
                _, key = heapq.heappop(self._heap)
            try:
                self._fire(key)
            except Exception:  # an alarm must never stop the others
                log.exception("alarm %s failed", key)
