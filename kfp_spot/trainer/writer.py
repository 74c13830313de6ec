"""Writing checkpoint steps: retries, the background (async) writer and its snapshot buffers.

Also who writes (:func:`is_chief`) and what may be written as metrics (:func:`clean_metrics`).

The background writer runs at a lower scheduling priority than the training loop (Linux, where
the nice value is a thread's own): when the loop keeps every core busy its threads win the cores
and the write, which needs little CPU, takes what they leave. Whoever waits for the write (the
next save, the save on a preemption notice, ``close``) first gives it the loop's priority back.

The snapshot itself (the copy, and where its checksum is computed) is :mod:`.snapshot`'s.

Why one module: the retries, the background writer and the buffers it writes from share one
lock and one order of steps (a commit, then its retention, then the next write); split apart,
each part would reach into the others' state.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from kfp_spot import checkpoints
from kfp_spot.checkpoints import CheckpointError, Manifest, checksum
from kfp_spot.nesting import nesting_depth
from kfp_spot.trainer import failpoints, snapshot
from kfp_spot.trainer.attempts import AttemptRecorder, storage_errors

log = logging.getLogger(__name__)

_REMOVED_AT_ONCE = (
    "checkpoint step %d was deleted right after its commit: %s holds higher steps (an earlier "
    "run's, or the step count went back, as a per-epoch counter does), which keep_last keeps "
    "and a restore returns; pass the run's own step count, restore first, or use another root"
)
_BACKGROUND_NICE = 10
"""How much lower the background writer's priority is than the loop's (nice values)."""
_UNFINISHED: set[threading.Thread] = set()
"""Background writes under way in this process: its exit waits for them (:func:`_at_exit`)."""
_UNFINISHED_LOCK = threading.Lock()
_AT_EXIT_REGISTERED = False


def _at_exit() -> None:
    """Let the background writes under way commit before the interpreter ends.

    The writer is a daemon thread, which the interpreter stops wherever it is once the main
    thread ends: a loop that saved asynchronously and ended without ``close()`` (no ``with``)
    lost its last save, with exit status 0. ``close()`` waits for it; this is the same wait
    for a manager never closed.
    """
    with _UNFINISHED_LOCK:
        pending = sorted(_UNFINISHED, key=lambda thread: thread.name)
    for thread in pending:
        log.info("waiting for the background save %s to commit before exiting", thread.name)
        thread.join()


def _track(thread: threading.Thread) -> None:
    """Have the process's exit wait for ``thread`` (see :func:`_at_exit`)."""
    global _AT_EXIT_REGISTERED
    with _UNFINISHED_LOCK:
        if not _AT_EXIT_REGISTERED:
            atexit.register(_at_exit)
            _AT_EXIT_REGISTERED = True
        _UNFINISHED.add(thread)


def _thread_nice() -> int | None:
    """The calling thread's nice value; None where a thread has none of its own.

    Linux only: there the nice value belongs to a thread and ``PRIO_PROCESS`` with a thread id
    names that thread; elsewhere it would name the whole process.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except OSError:  # a sandbox that filters the call: the write keeps the loop's priority
        return None


def is_chief(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this replica writes checkpoints: the first replica of the first worker pool.

    Vertex sets ``CLUSTER_SPEC`` (``task.type`` ``workerpool0``, ``task.index`` 0 is the chief)
    and, for PyTorch, ``RANK``. A single-replica job has neither and is its own chief.
    """
    env = os.environ if environ is None else environ
    rank = env.get("RANK")
    if rank not in (None, ""):
        return rank.strip() == "0"
    spec = env.get("CLUSTER_SPEC") or env.get("TF_CONFIG")
    if spec:
        try:
            task = json.loads(spec).get("task") or {}
        except (ValueError, AttributeError):
            log.warning("unreadable CLUSTER_SPEC/TF_CONFIG; acting as the chief")
            return True
        kind = task.get("type", "workerpool0")
        return kind in ("workerpool0", "chief", "master") and int(task.get("index", 0)) == 0
    return True


METRICS_NESTING = 100
"""How deeply a metric's lists and dicts may nest (a confusion matrix: 2)."""


def _is_json(value: Any) -> bool:
    """Whether ``json`` writes ``value`` (NaN and infinities included)."""
    try:
        json.dumps(value, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def clean_metrics(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """Metrics as plain JSON values (NumPy scalars: numbers; arrays: lists); else ValueError."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise ValueError(f"metrics must be a mapping of names to values, got {metrics!r}")
    out = {}
    for name, value in metrics.items():
        if not isinstance(name, str):  # str(name) made 1 and "1" one metric, the other lost
            raise ValueError(
                f"metrics key {name!r} ({type(name).__name__}) must be a str: a metric is "
                f"recorded, ranked and reported by its name; use {str(name)!r}"
            )
        if isinstance(value, (list, dict)):
            pass
        elif callable(getattr(value, "tolist", None)):  # a numpy (or torch) scalar or array
            value = value.tolist()  # an array of any size: a list (.item() took size 1 only)
        elif callable(getattr(value, "item", None)):
            value = value.item()
        # The depth is counted first: json's own limit (RecursionError) differs by Python. A
        # string is a value here, never JSON text (nesting_depth would count its brackets).
        depth = 0 if isinstance(value, str) else nesting_depth(value, METRICS_NESTING)
        if depth > METRICS_NESTING or not _is_json(value):
            import reprlib  # only for this message

            raise ValueError(
                f"metrics[{name!r}] = {reprlib.repr(value)} is not a JSON value (number, string, "
                f"bool, None, or lists/dicts of them, nested at most {METRICS_NESTING} deep)"
            )
        out[name] = value
    return out


class StepWriter:
    """Commits steps under one root, one at a time and in step order, in the caller or a thread.

    A write that fails on a storage error is tried again ``save_retries`` times with a backoff;
    a step given up is deleted (no commit is left behind a failure). After each commit
    ``retain`` runs (beside the training loop when the write was in the caller's thread).

    Args:
        root: the checkpoint root.
        save_retries: extra attempts at a write that failed on a storage error.
        grace_period: seconds of the preemption grace period (a slower save is warned about).
        recorder: the attempt record told of each commit, or None.
        retain: deletes the steps retention does not keep, returns the committed ones it did.
        clock: monotonic clock.
        cpu_clock: the process's CPU time, every thread (how busy the loop keeps the cores).
    """

    def __init__(
        self,
        root: str,
        *,
        save_retries: int,
        grace_period: float,
        recorder: AttemptRecorder | None,
        retain: Callable[[], Collection[int] | None],
        clock: Callable[[], float],
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self.root = root
        self.save_retries = save_retries
        self.grace_period = grace_period
        self.failed_saves = 0
        self.last_committed: int | None = None
        self._recorder = recorder
        self._retain_fn = retain
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._cores = snapshot.cores()
        self._last_snapshot: tuple[float, float] | None = None  # (CPU time, clock) at the last
        self._placement = snapshot.HashPlacement()  # where a busy loop's saves checksum
        self._pool: dict[str, Any] = {}  # async snapshot buffers by file name, reused
        self._settled: set[str] = set()  # the names whose kept buffer is settled_buffer's
        self._settle_failed = False
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._janitor: threading.Thread | None = None
        self._worker_error: BaseException | None = None
        # The background writer's priority: (its thread id, the loop's nice) once lowered.
        self._lowered: tuple[int, int] | None = None
        self._hurried = False
        self._durations: list[float] = []  # full save time (what a final save needs)
        self._warned_grace = False
        self._warned_removed = False

    @property
    def last_duration(self) -> float | None:
        """How long the newest commit took (from the start of its save), or None."""
        return self._durations[-1] if self._durations else None

    @property
    def slowest(self) -> float:
        """The longest any commit took, 0 when there was none."""
        return max(self._durations, default=0.0)

    def writing(self) -> bool:
        """Whether a background write is still going."""
        return self._worker is not None and self._worker.is_alive()

    def snapshot(self, files: Mapping[str, Any]) -> dict[str, Any]:
        """Copy ``files`` into the snapshot buffers kept for the next save (:func:`.snapshot.take`).

        A large buffer is page-aligned, so the background write hands it to the disk without
        the page cache's copy. When the loop kept every core busy since the last snapshot and
        the checksum runs at memory speed (:func:`.snapshot.hash_in_stall`) each copy is
        checksummed here too, where this process measured that cheaper
        (:class:`.snapshot.HashPlacement`).
        """
        now = (self._cpu_clock(), self._clock())
        last, self._last_snapshot = self._last_snapshot, now
        busy = last is not None and snapshot.hash_in_stall(
            now[0] - last[0],
            now[1] - last[1],
            self._cores,
            memory_speed=checksum.streams_at_memory_speed(),
        )
        placement = self._placement.next() if busy else "background"
        hash_now = placement != "background"
        before = self._pool
        started = time.perf_counter()
        out, self._pool = snapshot.take(
            files, before, hash_now=hash_now, fused=placement == "fused"
        )
        reused = bool(self._pool) and all(b is before.get(n) for n, b in self._pool.items())
        if hash_now and reused:  # a new buffer's first copy says nothing of the next ones
            self._placement.record(placement, time.perf_counter() - started)
        self._settled = {n for n in self._settled if self._pool.get(n) is before.get(n)}
        return out

    def release_buffers(self) -> None:
        """Drop the snapshot buffers kept between async saves."""
        with self._lock:
            self._pool = {}
            self._settled = set()

    def _settle_buffers(self, written: dict[str, Any]) -> None:
        """Move each large snapshot buffer into huge pages, once (:func:`.snapshot.settled_buffer`).

        Runs in the background writer after it wrote ``written`` (the snapshot, cleared here);
        the loop's next snapshot waits for it. The small-page buffer is freed before its
        replacement is mapped, so the process never holds both (a state near the VM's memory
        would not fit twice).
        """
        pool = self._pool
        sizes = {
            name: len(buf)
            for name, buf in pool.items()
            if name not in self._settled and len(buf) >= checkpoints.DIRECT_MIN_BYTES
        }
        if not sizes or self._settle_failed or not snapshot.huge_pages_available():
            return
        written.clear()  # the snapshot's references to the buffers
        for name, size in sizes.items():
            self._settled.add(name)
            with self._lock:
                if self._pool is not pool:  # released meanwhile
                    return
                del pool[name]  # freed here: the next snapshot copies into new memory if need be
            try:
                settled = snapshot.settled_buffer(size)
            except OSError as exc:
                log.debug("snapshot buffer %s not moved into huge pages: %s", name, exc)
                settled = None
            if settled is None:  # the next save allocates small pages, and keeps them
                self._settle_failed = True
                return
            with self._lock:
                if self._pool is pool:
                    pool[name] = settled

    def start(self, step: int, files: dict[str, Any], metadata: dict[str, Any], t0: float) -> None:
        """Write ``files`` (a :meth:`snapshot`) in a background thread; :meth:`wait` joins it."""
        failpoints.background_save_started(step)
        self._hurried = False
        loop_nice = _thread_nice()
        self._worker = threading.Thread(
            target=self._background_write,
            args=(step, files, metadata, t0, loop_nice),
            name=f"kfp-spot-checkpoint-{step}",
            daemon=True,
        )
        _track(self._worker)
        self._worker.start()

    def wait(self) -> None:
        """Wait for a background save to commit, and for retention to have removed old steps.

        Raises:
            CheckpointError: the background save failed (its step is not committed).
        """
        worker = self._worker
        if worker is not None:
            self.hurry()
            worker.join()
            self._worker = None
        self.join_retention()
        if self._worker_error is not None:
            error, self._worker_error = self._worker_error, None
            raise CheckpointError(f"a background checkpoint save failed: {error}") from error

    def hurry(self) -> None:
        """Give the background write the loop's priority back (someone waits for it).

        Where the system refuses (raising a priority needs ``CAP_SYS_NICE`` or ``RLIMIT_NICE``)
        it keeps its lower one; the loop waiting, it still has the loop's cores.
        """
        # The writer clears _lowered under this lock before it ends: a thread id found here is
        # still the writer's, never one the system has since given to another thread.
        with self._lock:
            self._hurried = True
            lowered, self._lowered = self._lowered, None
            if lowered is not None:
                tid, nice = lowered
                try:
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
                except OSError:  # PermissionError without CAP_SYS_NICE / RLIMIT_NICE
                    log.debug("could not raise the background checkpoint write's priority back")

    def join_retention(self) -> None:
        """Wait for the retention that follows a commit made in the caller's thread."""
        janitor = self._janitor
        if janitor is not None:
            janitor.join()
            self._janitor = None

    def _background_write(
        self,
        step: int,
        files: dict[str, Any],
        metadata: dict[str, Any],
        t0: float,
        loop_nice: int | None,
    ) -> None:
        with self._lock:
            if loop_nice is not None and not self._hurried:
                tid = threading.get_native_id()
                try:  # lowering is allowed to anyone, but a sandbox may filter the call
                    os.setpriority(os.PRIO_PROCESS, tid, min(19, loop_nice + _BACKGROUND_NICE))
                    self._lowered = (tid, loop_nice)
                except OSError:
                    log.debug("could not lower the background checkpoint write's priority")
        try:
            self.write(step, files, metadata, t0)
        except storage_errors(CheckpointError, ValueError, TypeError, RuntimeError) as exc:
            log.error("background save of step %d failed: %s", step, exc)
            self._worker_error = exc
        else:
            self._settle_buffers(files)
        finally:
            with self._lock:
                self._lowered = None
            with _UNFINISHED_LOCK:
                _UNFINISHED.discard(threading.current_thread())
            failpoints.background_save_ended(step)

    def write(
        self, step: int, files: Mapping[str, Any], metadata: dict[str, Any], t0: float
    ) -> Manifest:
        """Commit ``files`` as ``step`` now (``t0``: when its save began, for its duration).

        Raises:
            OSError: the storage failed ``save_retries + 1`` times; the step is not committed.
        """
        names = sorted(files)

        def after_file(name: str) -> None:
            if name == names[0]:
                failpoints.hit("save-mid", step)
            if name == names[-1]:
                failpoints.hit("save-before-manifest", step)

        for attempt in range(self.save_retries + 1):
            try:
                manifest = checkpoints.write_step(
                    self.root, step, files, metadata=metadata, after_file=after_file
                )
                break
            except storage_errors() as exc:
                if attempt == self.save_retries:
                    self.failed_saves += 1
                    # Never leave a commit behind a failure (a manifest PUT may have landed).
                    try:
                        checkpoints.delete_step(self.root, step)
                    except storage_errors() as cleanup:
                        log.warning("could not remove the failed step %d: %s", step, cleanup)
                    named = self._named_failure(step, exc)
                    if named is None:
                        raise
                    raise named from exc
                delay = 0.5 * 2**attempt
                log.warning(
                    "checkpoint of step %d failed (%s); writing it again in %.1fs", step, exc, delay
                )
                time.sleep(delay)
        failpoints.hit("save-after", step)
        duration = self._clock() - t0
        with self._lock:
            self._durations.append(duration)
            self.last_committed = step
        if self._recorder is not None:
            self._recorder.committed(step, duration)
        log.info("checkpoint step %d committed in %.3fs", step, duration)
        self._warn_if_slow(duration)
        if threading.current_thread() is not self._worker:
            # Deleting old steps (freeing a large file takes tens of ms) is no part of the save:
            # it goes on beside the next training steps.
            janitor = threading.Thread(
                target=self._retain, args=(step,), name="kfp-spot-retention", daemon=True
            )
            janitor.start()  # before join_retention can see it
            self._janitor = janitor
        else:
            self._retain(step)  # already in the background writer
        return manifest

    def _named_failure(self, step: int, exc: BaseException) -> OSError | None:
        """``exc`` again, saying which step and root failed and that older steps are kept."""
        kept = self.last_committed
        return checkpoints.explained_storage_error(
            exc,
            f"checkpoint of step {step} under {self.root} failed {self.save_retries + 1} "
            "time(s), and is not committed",
            "the steps committed before it, if any, are kept"
            if kept is None
            else f"the steps committed before it are kept (the newest, step {kept})",
        )

    def _retain(self, step: int) -> None:
        try:
            removed = self._retain_fn()
        except storage_errors() as exc:  # the step is committed; old ones go next time
            log.warning("retention after step %d failed: %s", step, exc)
            removed = None
        if removed and step in removed and not self._warned_removed:
            self._warned_removed = True
            log.warning(_REMOVED_AT_ONCE, step, self.root)

    def _warn_if_slow(self, duration: float) -> None:
        if duration > self.grace_period and not self._warned_grace:
            self._warned_grace = True
            log.warning(
                "a checkpoint save took %.1fs, longer than the %gs grace period: a save on the "
                "preemption notice would not finish; save less state, save more often "
                "(the interval) or use async_save",
                duration,
                self.grace_period,
            )
