"""The checkpoint manager's save path: when a save is due, what it writes, the notice's last save.

:class:`Saver` keeps the interval bookkeeping (:class:`~kfp_spot.trainer.interval.IntervalPolicy`,
heartbeats, what saves stalled the loop), encodes the state into files and a manifest's metadata,
and hands them to the :class:`~kfp_spot.trainer.writer.StepWriter` in the caller or in the
background. On a preemption notice it decides whether one more save fits in the grace period left.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from kfp_spot import checkpoints
from kfp_spot.checkpoints import CheckpointError, CheckpointFormatError, Manifest
from kfp_spot.checkpoints.numeric import real_number
from kfp_spot.checkpoints.paths import check_step
from kfp_spot.trainer import adapters
from kfp_spot.trainer.attempts import AttemptRecorder, storage_errors
from kfp_spot.trainer.interval import IntervalPolicy, SaveInterval
from kfp_spot.trainer.preemption import PreemptionNotice
from kfp_spot.trainer.writer import StepWriter, clean_metrics

log = logging.getLogger(__name__)

StateLike = Mapping[str, Any] | Callable[[], Mapping[str, Any]]

MANY_FILES = 256
"""More state keys (one file each) than this are warned about once: a dict of arrays is one file."""


class Saver:
    """Decides when to save and saves; see :class:`~kfp_spot.trainer.CheckpointManager`.

    Args:
        writer: commits the steps.
        interval: the save interval.
        recorder: the attempt record (commits, stalls, heartbeats, the notice), or None.
        is_writer: whether this replica writes; when not, saves only note the step.
        async_save: write in the background by default.
        allow_pickle: allow pickle-based adapters when encoding.
        heartbeat_seconds: rewrite the attempt record at most this often from :meth:`maybe_save`.
        clock: monotonic clock.
        ranked: the metric ``keep_best`` ranks steps by, whose values must be numbers; or None.
    """

    def __init__(
        self,
        writer: StepWriter,
        interval: SaveInterval,
        *,
        recorder: AttemptRecorder | None,
        is_writer: bool,
        async_save: bool,
        allow_pickle: bool,
        heartbeat_seconds: float,
        clock: Callable[[], float],
        ranked: str | None = None,
    ) -> None:
        self.interval = interval
        self.ranked = ranked
        self.is_writer = is_writer
        self.async_save = async_save
        self.allow_pickle = allow_pickle
        self.last_requested: int | None = None  # newest step saved or being saved
        self._writer = writer
        self._recorder = recorder
        self._clock = clock
        self._policy = IntervalPolicy(interval, now=clock())
        self._heartbeat_seconds = float(heartbeat_seconds)
        self._last_heartbeat = clock()
        self._warned_wait = False
        self._announced_notice = False
        self.closed = False  # the manager was closed: saves are written before they return
        self._ranked_seen = False  # a save recorded the metric keep_best ranks by
        self._ranked_told = False
        self._told_many = False  # a state of more than MANY_FILES keys was warned about
        # One save at a time: saves from two threads interleaved their files, their retention
        # deleted each other's steps mid-write (committed with files missing) and joined a
        # thread not started yet.
        self._lock = threading.RLock()

    def restart(self, records: Iterable[checkpoints.AttemptRecord]) -> None:
        """Start the interval over, learning the preemption rate from earlier attempt records."""
        self._policy = IntervalPolicy(self.interval, records, now=self._clock())

    def resumed(self, step: int) -> None:
        """``step`` was restored: it is the newest committed (and requested) step."""
        self._writer.last_committed = self.last_requested = step

    def maybe_save(self, step: int, state: StateLike, metrics: Mapping[str, Any] | None) -> bool:
        """Save when the interval says so (no notice); a failed save is logged, not raised."""
        now = self._clock()
        if self._recorder is not None and now - self._last_heartbeat >= self._heartbeat_seconds:
            self._last_heartbeat = now
            self._recorder.heartbeat()
        if not self._policy.due(step, now):
            return False
        if self._writer.writing() and self.interval.steps is None:
            return False  # a background write is still going: save once it is done
        self.join_quietly()
        try:
            self.save(step, state() if callable(state) else state, metrics=metrics)
        except storage_errors(CheckpointError) as exc:
            self._policy.record_failure(self._clock())  # try again after an interval
            log.error("checkpoint of step %d failed; training goes on: %s", step, exc)
            return False
        return True

    def join_quietly(self) -> None:
        """Wait for the background write; a failure of it was logged already."""
        with contextlib.suppress(CheckpointError):
            self._writer.wait()

    def announce_notice(self, notice: PreemptionNotice) -> float:
        """Log the notice and record it in the attempt record, once; the grace period left (s)."""
        remaining = notice.remaining()
        if not self._announced_notice:
            self._announced_notice = True
            log.warning(
                "preemption notice (%s): %.1fs of the %gs grace period left",
                notice.reason,
                remaining,
                notice.grace_period,
            )
            if self._recorder is not None:
                self._recorder.preemption_noticed(notice.requested_wall_time or time.time())
        return remaining

    def final_save(
        self,
        step: int,
        state: StateLike,
        metrics: Mapping[str, Any] | None,
        notice: PreemptionNotice,
    ) -> bool:
        """Save ``step`` once more on the notice, unless it is saved or would not finish in time."""
        remaining = self.announce_notice(notice)
        if self.last_requested == step:
            self.join_quietly()
            if self._writer.last_committed == step:
                log.warning("step %d is already saved; stopping", step)
                return False
        expected = self._writer.slowest
        if expected > remaining:
            log.warning(
                "not saving step %d: the last saves took up to %.1fs but only %.1fs of the grace "
                "period is left; the next attempt resumes from step %s",
                step,
                expected,
                remaining,
                self._writer.last_committed,
            )
            self.join_quietly()
            return False
        self.join_quietly()
        try:
            self.save(step, state() if callable(state) else state, metrics=metrics, blocking=True)
        except storage_errors(CheckpointError) as exc:
            log.error(
                "the save of step %d on the preemption notice failed (%s); the next attempt "
                "resumes from step %s",
                step,
                exc,
                self._writer.last_committed,
            )
            return False
        log.warning("saved step %d on the preemption notice; stopping", step)
        return True

    def save(
        self,
        step: int,
        state: Mapping[str, Any],
        *,
        metrics: Mapping[str, Any] | None = None,
        blocking: bool | None = None,
    ) -> Manifest | None:
        """See :meth:`kfp_spot.trainer.CheckpointManager.save`."""
        with self._lock:
            return self._save(step, state, metrics=metrics, blocking=blocking)

    def _save(
        self,
        step: int,
        state: Mapping[str, Any],
        *,
        metrics: Mapping[str, Any] | None,
        blocking: bool | None,
    ) -> Manifest | None:
        step = check_step(step)
        metrics = clean_metrics(metrics)
        check_ranked(metrics, self.ranked)
        self._tell_unranked(metrics)
        if not self.is_writer:
            self.last_requested = step
            return None
        t0 = self._clock()
        if self._writer.writing() and self.interval.steps is not None and not self._warned_wait:
            self._warned_wait = True
            log.warning(
                "a background checkpoint write is still going when the next save is due: the "
                "loop waits for it (save less often than every %d steps to avoid this)",
                self.interval.steps,
            )
        self._writer.wait()  # one write at a time, in step order; snapshot buffers free after it
        if blocking is None:
            # After close() nothing waits for a background write: the process would exit with
            # the step half-written (the run's last save, made after the with block, lost).
            blocking = not self.async_save or self.closed
        if step == self._writer.last_committed:
            committed = self._committed(step, blocking, metrics)
            if committed is not False:
                return committed
        files, index = adapters.encode_state(state, allow_pickle=self.allow_pickle)
        if len(files) > MANY_FILES and not self._told_many:
            self._told_many = True
            log.warning(
                "the state has %d keys, and each is a file of its own: a save writes %d files "
                "(one upload each on gs://), which a save on the preemption notice may not "
                "finish in time; put small arrays under one key as a dict of arrays, which is "
                "stored as one .npz ({'params': {'layer1/W': ..., ...}})",
                len(files),
                len(files),
            )
        metadata = {
            "state": index,
            checkpoints.STATE_FORMAT_KEY: checkpoints.STATE_FORMAT,
            "metrics": metrics,
            "attempt_id": self._recorder.attempt_id if self._recorder else None,
        }
        self.last_requested = step
        if blocking:
            manifest = self._writer.write(step, files, metadata, t0)
            self._record_stall(self._clock() - t0)
            return manifest
        snapshot = self._writer.snapshot(files)
        stall = self._clock() - t0
        self._writer.start(step, snapshot, metadata, t0)
        self._record_stall(stall, write=self._writer.last_duration)
        return None

    def _committed(
        self, step: int, blocking: bool, metrics: Mapping[str, Any]
    ) -> Manifest | Literal[False] | None:
        """The save of ``step`` when this run committed (or restored) it already: not written.

        Writing it again would first remove its commit, so a rewrite killed or failed half-way
        would leave no copy of the step (with ``keep_last=1``, none of the run), and the loop's
        final ``save(step, state)`` after ``maybe_save(step, ..., metrics=...)`` committed that
        step would drop the metrics ``best:<metric>`` ranks it by. False when its manifest is
        gone (it is written again). ``metrics`` given now that differ from the commit's are
        not recorded, and the log says so.

        Raises:
            CheckpointFormatError: a newer kfp-spot committed the step since, in its format:
                writing it again would delete that commit.
        """
        try:
            manifest = checkpoints.read_manifest(self._writer.root, step)
        except CheckpointFormatError:
            raise
        except storage_errors(CheckpointError):  # gone, or unreadable now: write it again
            return False
        kept = manifest.metadata.get("metrics") or {}
        if metrics and dict(metrics) != kept:
            log.warning(
                "step %d is already committed (with metrics %s): not writing it again, so the "
                "metrics given now (%s) are not recorded; give them to the maybe_save or save "
                "that commits the step",
                step,
                kept,
                dict(metrics),
            )
        else:
            log.info("step %d is already committed; not writing it again", step)
        self.last_requested = step
        return manifest if blocking else None

    def save_directory(
        self, step: int, source: str, *, metrics: Mapping[str, Any] | None = None
    ) -> Manifest | None:
        """See :meth:`kfp_spot.trainer.CheckpointManager.save_directory`."""
        with self._lock:
            return self._save_directory(step, source, metrics=metrics)

    def _save_directory(
        self, step: int, source: str, *, metrics: Mapping[str, Any] | None
    ) -> Manifest | None:
        from kfp_spot.trainer.integrations import directory

        step = check_step(step)
        if not self.is_writer:
            self.last_requested = step
            return None
        t0 = self._clock()
        cleaned = clean_metrics(metrics)
        check_ranked(cleaned, self.ranked)
        self._tell_unranked(cleaned)
        metadata = directory.layout_metadata(
            cleaned, self._recorder.attempt_id if self._recorder else None
        )
        root = self._writer.root
        with directory.mapped_files(source, checkpoints.step_dir(root, step)) as files:
            self._writer.wait()
            self.last_requested = step
            manifest = self._writer.write(step, files, metadata, t0)
        self._record_stall(self._clock() - t0)
        return manifest

    def _tell_unranked(self, metrics: Mapping[str, Any]) -> None:
        """Warn once when saves record metrics but not the one ``keep_best`` ranks by.

        A step without it never ranks, so retention keeps only the last steps and deletes the
        best ones as the run goes on, silently: a misspelt name (``val_acc`` for
        ``val_accuracy``) must not look like a working ``keep_best``.
        """
        if self.ranked is None or self._ranked_seen:
            return
        if self.ranked in metrics:
            self._ranked_seen = True
        elif metrics and not self._ranked_told:
            self._ranked_told = True
            log.warning(
                "keep_best ranks steps by best_metric=%r, which this save's metrics do not "
                "hold (they hold %s): a step without it never ranks, so only the last steps "
                "are kept and the best ones are deleted. Check the name, or pass it with the "
                "saves it should rank",
                self.ranked,
                ", ".join(repr(name) for name in metrics),
            )

    def _record_stall(self, stall: float, write: float | None = None) -> None:
        self._policy.record_save(stall, self._clock(), write=write)
        if self._recorder is not None:
            self._recorder.stalled(stall)


def check_ranked(metrics: Mapping[str, Any], ranked: str | None) -> None:
    """Refuse a value of the metric ``keep_best`` ranks by that is not a number.

    Such a step never ranks among the best, so retention would delete the best steps as the run
    goes on, silently (a metric formatted for a log, ``f"{auc:.4f}"``, is a string).

    Raises:
        ValueError: naming the metric, its value and what to give instead.
    """
    if ranked is None or ranked not in metrics:
        return
    value = metrics[ranked]
    if real_number(value) is None:
        raise ValueError(
            f"metrics[{ranked!r}] = {value!r} is a {type(value).__name__}, not a number: "
            f"keep_best ranks steps by {ranked!r}, and a step whose value is no number never "
            "ranks, so the best steps would be deleted; give it as a number (float(...))"
        )
