"""Attempt records: one small JSON file per training attempt, next to the checkpoints.

The launcher and the reports read them (:func:`kfp_spot.checkpoints.read_attempt_records`) to
count attempts and to compute goodput. A record is written when the attempt starts, rewritten
after every committed checkpoint, and closed with an exit reason. An attempt killed without
notice (SIGKILL) leaves ``exit_reason: null`` and ``end_time: null``; readers treat it as
preempted and take ``updated_time`` as the last sign of life.

Fields (times are Unix seconds as floats, plus RFC 3339 strings for people):

``attempt_id``, ``job_id`` (``CLOUD_ML_JOB_ID`` or null), ``host``, ``pid``,
``start_time``/``start``, ``end_time``/``end`` (null until the end), ``updated_time``,
``first_step`` (the step it resumed from; 0 for a fresh start), ``last_committed_step`` (null
until one commits), ``exit_reason`` (``finished`` / ``preempted`` / ``error`` / null),
``error`` (the message, for ``error``), ``saves``, ``save_seconds_mean``, ``save_seconds_max``
(the whole save, written), ``save_stall_seconds_mean`` (how long saves blocked the loop),
``preemption_notice_time`` (when the notice arrived), ``grace_period``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

from kfp_spot import checkpoints

log = logging.getLogger(__name__)

EXIT_REASONS = ("finished", "preempted", "error")


def storage_errors() -> tuple[type[BaseException], ...]:
    """Errors a storage write may raise: OSError, plus gcsfs's and aiohttp's once loaded."""
    found: list[type[BaseException]] = [OSError]
    for module, name in (
        ("gcsfs.retry", "HttpError"),
        ("gcsfs.retry", "ChecksumError"),
        ("aiohttp", "ClientError"),
    ):
        kind = getattr(sys.modules.get(module), name, None)
        if isinstance(kind, type) and issubclass(kind, BaseException):
            found.append(kind)
    return tuple(found)


def _rfc3339(t: float | None) -> str | None:
    if t is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


class AttemptRecorder:
    """Writes the attempt record of the running process.

    Args:
        root: the checkpoint root.
        grace_period: the configured grace period (recorded for reports).
        attempt_id: defaults to the start time plus host and pid, which sorts by time.
    """

    def __init__(
        self,
        root: str,
        *,
        grace_period: float | None = None,
        attempt_id: str | None = None,
    ) -> None:
        start = time.time()
        host = os.uname().nodename  # socket.gethostname(), without importing socket
        self.root = root
        self.attempt_id = attempt_id or (
            time.strftime("%Y%m%dT%H%M%S", time.gmtime(start))
            + f"{int(start % 1 * 1e6):06d}Z-{host}-{os.getpid()}"
        ).replace("/", "_")
        self._lock = threading.Lock()
        self._save_times: list[float] = []
        self._stalls: list[float] = []
        self.record: dict[str, Any] = {
            "attempt_id": self.attempt_id,
            "job_id": os.environ.get("CLOUD_ML_JOB_ID"),
            "host": host,
            "pid": os.getpid(),
            "start_time": start,
            "start": _rfc3339(start),
            "end_time": None,
            "end": None,
            "updated_time": start,
            "first_step": 0,
            "last_committed_step": None,
            "exit_reason": None,
            "error": None,
            "saves": 0,
            "save_seconds_mean": None,
            "save_seconds_max": None,
            "save_stall_seconds_mean": None,
            "preemption_notice_time": None,
            "grace_period": grace_period,
        }
        self._started = False

    def start(self, first_step: int) -> None:
        """Write the opening record; ``first_step`` is the step the attempt resumes from."""
        with self._lock:
            self.record["first_step"] = int(first_step)
            self._started = True
            self._write()

    def resumed(self, step: int, *, write: bool = True) -> None:
        """Record that the attempt resumed from checkpoint ``step``."""
        with self._lock:
            self.record["first_step"] = int(step)
            self.record["last_committed_step"] = int(step)
            if write and self._started:
                self._write()

    def committed(self, step: int, save_seconds: float) -> None:
        """Record a committed checkpoint of ``step`` that took ``save_seconds``."""
        with self._lock:
            self._save_times.append(save_seconds)
            last = self.record["last_committed_step"]
            self.record["last_committed_step"] = step if last is None else max(last, step)
            # Kept here too: retention may delete the step's manifest, and reports need to know
            # when this attempt last saved progress to tell kept work from lost work.
            self.record["last_commit_time"] = time.time()
            self.record["saves"] = len(self._save_times)
            self.record["save_seconds_mean"] = sum(self._save_times) / len(self._save_times)
            self.record["save_seconds_max"] = max(self._save_times)
            if self._started:
                self._write()

    def stalled(self, seconds: float) -> None:
        """Note that a save blocked the training loop ``seconds`` (written with the next update).

        For synchronous saves this is the whole save; for async saves only the snapshot. The
        ``auto`` interval of the next attempt starts from it instead of measuring again.
        """
        with self._lock:
            self._stalls.append(seconds)
            self.record["save_stall_seconds_mean"] = sum(self._stalls) / len(self._stalls)

    def heartbeat(self) -> None:
        """Rewrite the record so ``updated_time`` shows the attempt is alive.

        An attempt killed without notice leaves its last heartbeat as its end, which the
        ``auto`` interval uses to measure how long attempts run between preemptions.
        """
        with self._lock:
            if self._started and self.record["end_time"] is None:
                self._write()

    def preemption_noticed(self, when: float) -> None:
        """Note the wall time the preemption notice arrived."""
        with self._lock:
            if self.record["preemption_notice_time"] is None:
                self.record["preemption_notice_time"] = when
                if self._started:
                    self._write()

    def finish(self, reason: str, error: str | None = None) -> None:
        """Close the record with ``reason`` (finished / preempted / error)."""
        if reason not in EXIT_REASONS:
            raise ValueError(f"exit reason must be one of {EXIT_REASONS}, got {reason!r}")
        with self._lock:
            end = time.time()
            self.record.update(end_time=end, end=_rfc3339(end), exit_reason=reason, error=error)
            self._write()

    def _write(self) -> None:
        self.record["updated_time"] = time.time()
        try:
            checkpoints.write_attempt_record(self.root, self.attempt_id, self.record)
        except storage_errors() as exc:
            # A lost record costs a report line, not the training run.
            log.warning("could not write attempt record %s: %s", self.attempt_id, exc)
