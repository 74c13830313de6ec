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
from collections.abc import Iterable
from typing import Any

from kfp_spot import checkpoints
from kfp_spot.checkpoints import AttemptRecord, ExitReason, storage_errors

log = logging.getLogger(__name__)

_WRITER_CHECKS = 3
"""At how many heartbeats an attempt looks for another process writing to its root."""

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
        # Other processes' records still open when this attempt started -> their updated_time
        # then; a later heartbeat checks whether any is still being updated (a live writer).
        self._open_elsewhere: dict[str, float] = {}
        self._checks_left = _WRITER_CHECKS

    def start(self, first_step: int, earlier: Iterable[AttemptRecord] = ()) -> None:
        """Write the opening record; ``first_step`` is the step the attempt resumes from.

        ``earlier``: the root's records read before this one was written; those of other
        processes not closed yet are watched for a writer alive beside this one.
        """
        with self._lock:
            self._update(first_step=int(first_step))
            self._started = True
            self._write()
            own = (self.record.host, self.record.pid)
            self._open_elsewhere = {
                r.attempt_id: r.updated_time or r.start_time
                for r in earlier
                if r.end_time is None
                and r.attempt_id != self.attempt_id
                and (r.host, r.pid) != own  # this process: its managers are counted apart
            }

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
        self._check_other_writers()

    def _check_other_writers(self) -> None:
        """Warn once when an attempt open at this one's start has updated its record since.

        An attempt killed without notice never updates its record again, so one that does is a
        process writing checkpoints to this root now: a second training run, or a replica that
        is not the chief. Each one's ``keep_last`` deletes the other's steps, and a step both
        save is overwritten by the later save. Checked at the first few heartbeats only, so it
        costs a few reads of ``_attempts`` per attempt; a writer started after this one finds
        this one the same way.
        """
        if not self._open_elsewhere or self._checks_left <= 0:
            return
        self._checks_left -= 1
        try:
            records = checkpoints.read_attempt_records(self.root)
        except storage_errors() as exc:
            log.debug("could not read attempt records to look for other writers: %s", exc)
            return
        for other in records:
            then = self._open_elsewhere.get(other.attempt_id)
            now = other.updated_time
            if then is not None and other.end_time is None and now is not None and now > then:
                self._open_elsewhere = {}
                log.warning(
                    "another process is writing checkpoints to %s now (attempt %s, host %s, "
                    "pid %s, which has updated its attempt record since this attempt started): "
                    "each one's keep_last deletes the other's steps, and a step number both save "
                    "is overwritten by the later save. Give each run its own root; with several "
                    "replicas only the chief (RANK=0) writes",
                    self.root,
                    other.attempt_id,
                    other.host,
                    other.pid,
                )
                return

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
