"""Writing this process's attempt record (``<checkpoints>/_attempts/<attempt_id>.json``).

The record's format is :class:`kfp_spot.checkpoints.AttemptRecord` (its fields are listed
there); the launcher and the reports read it back through
:func:`kfp_spot.checkpoints.read_attempt_records`. :class:`AttemptRecorder` writes it when the
attempt starts, after every committed checkpoint and on heartbeats, and closes it with an exit
reason.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Any

from kfp_spot import checkpoints
from kfp_spot.checkpoints import AttemptRecord, ExitReason, storage_errors

log = logging.getLogger(__name__)

__all__ = ["AttemptRecorder", "storage_errors"]


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
        self.record = AttemptRecord(
            attempt_id=self.attempt_id,
            start_time=start,
            job_id=os.environ.get("CLOUD_ML_JOB_ID"),
            host=host,
            pid=os.getpid(),
            updated_time=start,
            first_step=0,
            grace_period=grace_period,
        )
        self._started = False

    def start(self, first_step: int) -> None:
        """Write the opening record; ``first_step`` is the step the attempt resumes from."""
        with self._lock:
            self._update(first_step=int(first_step))
            self._started = True
            self._write()

    def resumed(self, step: int, *, write: bool = True) -> None:
        """Record that the attempt resumed from checkpoint ``step``."""
        with self._lock:
            self._update(first_step=int(step), last_committed_step=int(step))
            if write and self._started:
                self._write()

    def committed(self, step: int, save_seconds: float) -> None:
        """Record a committed checkpoint of ``step`` that took ``save_seconds``."""
        with self._lock:
            self._save_times.append(save_seconds)
            last = self.record.last_committed_step
            self._update(
                last_committed_step=step if last is None else max(last, step),
                # Kept here too: retention may delete the step's manifest, and reports need to
                # know when this attempt last saved progress to tell kept work from lost work.
                last_commit_time=time.time(),
                saves=len(self._save_times),
                save_seconds_mean=sum(self._save_times) / len(self._save_times),
                save_seconds_max=max(self._save_times),
            )
            if self._started:
                self._write()

    def stalled(self, seconds: float) -> None:
        """Note that a save blocked the training loop ``seconds`` (written with the next update).

        For synchronous saves this is the whole save; for async saves only the snapshot. The
        ``auto`` interval of the next attempt starts from it instead of measuring again.
        """
        with self._lock:
            self._stalls.append(seconds)
            self._update(save_stall_seconds_mean=sum(self._stalls) / len(self._stalls))

    def heartbeat(self) -> None:
        """Rewrite the record so ``updated_time`` shows the attempt is alive.

        An attempt killed without notice leaves its last heartbeat as its end, which the
        ``auto`` interval uses to measure how long attempts run between preemptions.
        """
        with self._lock:
            if self._started and self.record.end_time is None:
                self._write()

    def preemption_noticed(self, when: float) -> None:
        """Note the wall time the preemption notice arrived."""
        with self._lock:
            if self.record.preemption_notice_time is None:
                self._update(preemption_notice_time=when)
                if self._started:
                    self._write()

    def finish(self, reason: str, error: str | None = None) -> None:
        """Close the record with ``reason`` (finished / preempted / error)."""
        try:
            exit_reason = ExitReason(reason)
        except ValueError:
            choices = ", ".join(r.value for r in ExitReason)
            raise ValueError(f"exit reason must be one of {choices}, got {reason!r}") from None
        with self._lock:
            self._update(end_time=time.time(), exit_reason=exit_reason, error=error)
            self._write()

    def _update(self, **changes: Any) -> None:
        self.record = dataclasses.replace(self.record, **changes)

    def _write(self) -> None:
        self._update(updated_time=time.time())
        try:
            checkpoints.write_attempt_record(self.root, self.record)
        except storage_errors() as exc:
            # A lost record costs a report line, not the training run.
            log.warning("could not write attempt record %s: %s", self.attempt_id, exc)
