"""The checkpoint manager training code uses: save, restore, retention, async, preemption."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kfp_spot import checkpoints
from kfp_spot.checkpoints import CheckpointCorruptError, CheckpointError, Manifest
from kfp_spot.trainer import adapters, failpoints
from kfp_spot.trainer.adapters import StateEncodingError
from kfp_spot.trainer.attempts import AttemptRecorder, storage_errors
from kfp_spot.trainer.interval import IntervalPolicy, SaveInterval
from kfp_spot.trainer.preemption import DEFAULT_GRACE_PERIOD, PreemptionNotice
from kfp_spot.trainer.shutdown import CleanupHooks

log = logging.getLogger(__name__)

CHECKPOINT_DIR_ENV = "AIP_CHECKPOINT_DIR"
STATE_FORMAT = 1
PREEMPTED_EXIT_CODE = 143
"""Exit status of a process that stopped on a preemption notice (128 + SIGTERM)."""

StateLike = Mapping[str, Any] | Callable[[], Mapping[str, Any]]


@dataclass(frozen=True)
class Restored:
    """A checkpoint brought back.

    Attributes:
        step: the step it captured.
        state: name -> value, decoded by the adapters that wrote them.
        manifest: its verified manifest (``manifest.metadata["metrics"]`` holds saved metrics).
        path: its step directory.
    """

    step: int
    state: dict[str, Any]
    manifest: Manifest
    path: str

    @property
    def metrics(self) -> dict[str, Any]:
        """The metrics saved with the checkpoint."""
        return dict(self.manifest.metadata.get("metrics") or {})


def _clean_metrics(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """Metrics as plain JSON values (NumPy scalars become Python numbers); ValueError otherwise."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise ValueError(f"metrics must be a mapping of names to values, got {metrics!r}")
    out = {}
    for name, value in metrics.items():
        if hasattr(value, "item") and callable(value.item) and not isinstance(value, (list, dict)):
            value = value.item()  # numpy scalar or 0-d array
        try:
            json.dumps(value, allow_nan=True)
        except (TypeError, ValueError):
            raise ValueError(
                f"metrics[{name!r}] = {value!r} is not a JSON value (number, string, bool, None, "
                "or lists/dicts of them)"
            ) from None
        out[str(name)] = value
    return out


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


def _decode(root: str, step: int, *, allow_pickle: bool) -> Restored:
    """Verify and decode one step; any problem with it is a CheckpointCorruptError."""
    # The reader, not the checkpoint, decides which decoders may run.
    allowed = adapters.allowed(allow_pickle=allow_pickle)
    manifest, files = checkpoints.read_verified(root, step, adapters=allowed)
    index = manifest.metadata.get("state")
    if isinstance(index, Mapping):
        try:
            state = adapters.decode_state(files.__getitem__, index)
        except StateEncodingError as exc:
            raise CheckpointCorruptError(f"step {step} under {root}: {exc}") from exc
        if set(state) != set(index):  # decode_state returns one value per key; never less
            raise CheckpointCorruptError(f"step {step} under {root}: state keys differ")
    else:  # written with checkpoints.write_step directly: hand back the raw files
        state = dict(files)
    return Restored(step, state, manifest, checkpoints.step_dir(root, step))


_PARALLEL_COPY_BYTES = 16 << 20


def _copy(dst: Any, src: memoryview) -> None:
    """Copy ``src`` into ``dst`` at memory speed: large buffers in two threads at once.

    The training loop waits for this copy (it is the async save's whole stall) and nothing else
    runs meanwhile, so a second core halves it. NumPy's copy releases the GIL.
    """
    np = sys.modules.get("numpy")
    if np is None or src.nbytes < _PARALLEL_COPY_BYTES or (os.cpu_count() or 1) < 2:
        memoryview(dst).cast("B")[:] = src
        return
    target, source = np.frombuffer(dst, np.uint8), np.frombuffer(src, np.uint8)
    half = (len(source) // 2) & ~4095
    helper = threading.Thread(target=np.copyto, args=(target[:half], source[:half]))
    helper.start()
    np.copyto(target[half:], source[half:])
    helper.join()


def load_checkpoint(path: str, *, allow_pickle: bool = False) -> Restored:
    """Load and verify one checkpoint step directory (``<root>/step-<n>``).

    Args:
        path: the step directory, local or ``gs://``.
        allow_pickle: allow pickle-based adapters (scikit-learn); unpickling runs code named by
            the checkpoint, so only for checkpoints nobody else can write.

    Raises:
        ValueError: ``path`` is not a step directory.
        CheckpointCorruptError: it is torn, damaged or needs a decoder that is not allowed.
    """
    root, step = checkpoints.parse_step_dir(path)
    return _decode(root, step, allow_pickle=allow_pickle)


class CheckpointManager:
    """Saves and restores training state under one checkpoint root, and handles preemption.

    Use it as a context manager around the training loop::

        with CheckpointManager(interval="auto") as ckpt:   # root: $AIP_CHECKPOINT_DIR
            restored = ckpt.restore()
            start = restored.step if restored else 0
            for step in range(start + 1, total + 1):
                train_one_step()
                ckpt.maybe_save(step, lambda: {"weights": w, "rng": rng})
                if ckpt.should_stop:          # preemption notice: it saved once more
                    sys.exit(PREEMPTED_EXIT_CODE)
            ckpt.save(total, {"weights": w, "rng": rng})

    Entering installs the SIGTERM handler (chained to any earlier one) and writes the attempt
    record; leaving waits for background saves and closes the record as finished, preempted or
    error.

    Args:
        root: checkpoint root (local path, ``file://`` or ``gs://``); defaults to
            ``$AIP_CHECKPOINT_DIR``.
        interval: ``"N"``/N (steps), ``"30s"`` (seconds), ``"auto"`` (Young-Daly) or a
            :class:`SaveInterval`.
        keep_last: committed steps to keep (newest); None keeps all.
        keep_best: additionally keep this many best steps by ``best_metric``.
        best_metric: metric name (from ``save(..., metrics=)``) that ranks steps for ``keep_best``.
        best_mode: ``"max"`` or ``"min"``.
        async_save: snapshot the state in the caller (a copy of its mutable buffers into
            buffers kept between saves) and write it in a background thread.
        allow_pickle: allow pickle-based adapters (scikit-learn estimators) when saving and
            restoring. Unpickling runs code named by the checkpoint file: turn it on only for a
            checkpoint root that nobody else can write.
        save_retries: how many times a save that failed on a storage error is written again
            (with a short backoff) before it is given up; a periodic save given up is logged and
            training goes on.
        grace_period: seconds between the preemption notice and SIGKILL.
        mtbp: a hint for the mean time between preemptions (s) for ``interval="auto"``; by
            default it is learned from this run's attempt records (see :func:`estimate_mtbp`).
        notice: a preemption notice to use (default: a new one for SIGTERM).
        handle_signals: install the notice's signal handler on enter.
        record_attempts: write attempt records under ``<root>/_attempts``.
        writer: whether this process writes checkpoints and attempt records. Default: only the
            chief replica (:func:`is_chief`); the others restore but their saves do nothing, so
            replicas of one job never write the same step.
        heartbeat_seconds: rewrite the attempt record at most this often from ``maybe_save``, so
            an attempt killed without notice has a recent last sign of life.
        clock: monotonic clock (tests may pass their own).

    Raises:
        ValueError: an argument is invalid (the message names it) or no root is known.
    """

    def __init__(
        self,
        root: str | None = None,
        *,
        interval: str | int | SaveInterval = "auto",
        keep_last: int | None = 3,
        keep_best: int = 0,
        best_metric: str | None = None,
        best_mode: str = "max",
        async_save: bool = False,
        allow_pickle: bool = False,
        save_retries: int = 2,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        mtbp: float | None = None,
        notice: PreemptionNotice | None = None,
        handle_signals: bool = True,
        record_attempts: bool = True,
        heartbeat_seconds: float = 10.0,
        writer: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if root is None:
            root = os.environ.get(CHECKPOINT_DIR_ENV)
            if not root:
                raise ValueError(
                    f"root: no checkpoint root given and ${CHECKPOINT_DIR_ENV} is not set; pass "
                    "root='gs://bucket/run/checkpoints' (or a local path) or set the variable"
                )
        if not isinstance(root, str) or not root.strip():
            raise ValueError(f"root must be a non-empty path or URI, got {root!r}")
        if keep_last is not None and (not isinstance(keep_last, int) or keep_last < 1):
            raise ValueError(f"keep_last must be an int >= 1 or None (keep all), got {keep_last!r}")
        if not isinstance(keep_best, int) or keep_best < 0:
            raise ValueError(f"keep_best must be an int >= 0, got {keep_best!r}")
        if keep_best and not best_metric:
            raise ValueError("best_metric: keep_best > 0 needs the name of the metric to rank by")
        if not isinstance(heartbeat_seconds, (int, float)) or not heartbeat_seconds > 0:
            raise ValueError(f"heartbeat_seconds must be > 0, got {heartbeat_seconds!r}")
        if best_mode not in ("max", "min"):
            raise ValueError(f"best_mode must be 'max' or 'min', got {best_mode!r}")
        if not isinstance(save_retries, int) or isinstance(save_retries, bool) or save_retries < 0:
            raise ValueError(f"save_retries must be an int >= 0, got {save_retries!r}")
        self.root = root.rstrip("/")
        self.interval = SaveInterval.parse(interval, mtbp=mtbp)
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.best_metric = best_metric
        self.best_mode = best_mode
        self.async_save = async_save
        self.allow_pickle = bool(allow_pickle)
        self.save_retries = save_retries
        self.failed_saves = 0
        self._pool: dict[tuple[str, int], Any] = {}  # async snapshot buffers, reused
        self._warned_wait = False
        self.notice = notice or PreemptionNotice(grace_period)
        self.grace_period = self.notice.grace_period
        self.cleanup = CleanupHooks(self.notice)  # run after the save on a notice: on_preemption
        self._handle_signals = handle_signals
        self._clock = clock
        self.writer = is_chief() if writer is None else bool(writer)
        self._recorder = (
            AttemptRecorder(self.root, grace_period=self.grace_period)
            if record_attempts and self.writer
            else None
        )
        self._policy = IntervalPolicy(self.interval, now=clock())
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._janitor: threading.Thread | None = None
        self._worker_error: BaseException | None = None
        self._last_committed: int | None = None
        self._last_requested: int | None = None  # newest step saved or being saved
        self._save_durations: list[float] = []  # full save time (what a final save needs)
        self._warned_grace = False
        self._announced_notice = False
        self._entered = False
        self._stopped = False
        self._heartbeat_seconds = float(heartbeat_seconds)
        self._last_heartbeat = clock()

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> CheckpointManager:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any):
        clean_exit = isinstance(exc, SystemExit) and (exc.code in (0, None) or self._stopped)
        if exc is None or clean_exit:
            self.close()
        else:
            self.close(error=f"{type(exc).__name__}: {exc}")

    def start(self) -> CheckpointManager:
        """Install the preemption handler, read earlier attempts, write the attempt record."""
        if self._entered:
            return self
        self._entered = True
        if self._handle_signals:
            self.notice.install()
        records = checkpoints.read_attempt_records(self.root)
        self._policy = IntervalPolicy(self.interval, records, now=self._clock())
        if self._recorder is not None:  # restore() may have run before start()
            self._recorder.start(self._last_committed or 0)
        log.info(
            "checkpoints: %s, interval %s, grace period %gs%s",
            self.root,
            self.interval.describe(),
            self.grace_period,
            f", {len(records)} earlier attempt(s)" if records else "",
        )
        return self

    def close(self, error: str | None = None) -> None:
        """Wait for background saves, close the attempt record, remove the signal handler.

        Args:
            error: the error that ends the attempt, if any.
        """
        try:
            self.wait()
        except CheckpointError as exc:
            error = error or str(exc)
        finally:
            if self.notice.requested:
                self.cleanup.run()  # once; a no-op when maybe_save already ran the hooks
            if self._recorder is not None and self._entered:
                if error is not None:
                    reason = "preempted" if self.notice.requested else "error"
                else:
                    reason = "preempted" if self._stopped else "finished"
                self._recorder.finish(reason, error)
            if self._handle_signals:
                self.notice.uninstall()
            self._pool = {}
            self._entered = False

    # -- reading -----------------------------------------------------------------------------
    def committed_steps(self) -> list[int]:
        """Committed steps under the root (manifest present and sizes right), oldest first."""
        self._join_janitor()
        return [m.step for m in checkpoints.committed_steps(self.root)]

    def restore(self, step: int | None = None) -> Restored | None:
        """Load the newest checkpoint that verifies (or ``step``), or None when there is none.

        A step with any problem (no manifest, a manifest that fails its seal or its checks, a
        missing, truncated or altered file, a decoder this manager does not allow, bytes that do
        not decode) is skipped with a warning that says why, and the next older step is tried.

        Args:
            step: restore exactly this step (raising when it does not verify).

        Raises:
            CheckpointCorruptError: ``step`` was given and is not valid.
        """
        if step is not None:
            restored = _decode(self.root, step, allow_pickle=self.allow_pickle)
        else:
            restored = None
            for candidate in reversed(checkpoints.list_steps(self.root)):
                try:
                    restored = _decode(self.root, candidate, allow_pickle=self.allow_pickle)
                    break
                except CheckpointCorruptError as exc:
                    log.warning("not restoring checkpoint: %s", exc)
        if restored is None:
            log.info("no committed checkpoint under %s: starting from step 0", self.root)
            return None
        log.info("resuming from step %d (%s)", restored.step, restored.path)
        self._last_committed = restored.step
        self._last_requested = restored.step
        if self._recorder is not None:
            self._recorder.resumed(restored.step, write=self._entered)
        return restored

    def restore_directory(self, *, download_to: str | None = None) -> Any:
        """The newest committed step of a framework's own files, verified, on a local disk.

        The counterpart of :meth:`save_directory`: nothing is decoded, the framework reads its
        files from ``.path``. Returns a
        :class:`~kfp_spot.trainer.integrations.directory.CommittedDirectory`, or None.

        Args:
            download_to: for a ``gs://`` root, where to download the step (default: a new
                temporary directory).
        """
        from kfp_spot.trainer.integrations import directory

        found = directory.latest_directory(self.root, download_to=download_to)
        if found is not None:
            self._last_committed = self._last_requested = found.step
            if self._recorder is not None:
                self._recorder.resumed(found.step, write=self._entered)
        return found

    @property
    def last_committed_step(self) -> int | None:
        """The newest step this process committed or restored."""
        return self._last_committed

    # -- preemption --------------------------------------------------------------------------
    def on_preemption(
        self, fn: Callable[[], Any], *, timeout: float | None = None, name: str | None = None
    ) -> Callable[[], Any]:
        """Run ``fn()`` on the preemption notice, after the save (see kfp_spot.trainer.shutdown).

        Time-boxed to the grace period left; its errors are logged, never raised. Usable as a
        decorator.
        """
        return self.cleanup.add(fn, timeout=timeout, name=name)

    @property
    def should_stop(self) -> bool:
        """Whether a preemption notice arrived: the loop should save (``maybe_save``) and exit.

        Once this has returned True the attempt is recorded as ``preempted`` (a notice that
        arrives after the loop stopped looking does not turn a finished run into a preempted one).
        """
        if self.notice.requested and not self._stopped:
            self._announce_notice()
            self._stopped = True
        return self._stopped

    # -- saving ------------------------------------------------------------------------------
    def maybe_save(
        self, step: int, state: StateLike, *, metrics: Mapping[str, Any] | None = None
    ) -> bool:
        """Call after each step: saves when the interval says so or a preemption notice came.

        On a notice it saves once more (synchronously) unless the step is already saved or the
        last save took longer than the grace period left, then :attr:`should_stop` is True.
        A save that fails on storage errors (after ``save_retries``) is logged and training
        goes on: the step is not committed and the next due save tries again.

        Args:
            step: the number of steps completed.
            state: the state, or a callable returning it (only called when a save happens).
            metrics: small facts to keep with the checkpoint (used by ``keep_best``).

        Returns:
            Whether a save was made (or started in the background).
        """
        failpoints.hit("step", step)
        if self.notice.requested:
            saved = self._final_save(step, state, metrics)
            self.cleanup.run()  # the user's cleanup, after the save, in the grace period left
            return saved
        now = self._clock()
        if self._recorder is not None and now - self._last_heartbeat >= self._heartbeat_seconds:
            self._last_heartbeat = now
            self._recorder.heartbeat()
        if not self._policy.due(step, now):
            return False
        if self._writing() and self.interval.steps is None:
            return False  # a background write is still going: save once it is done
        self._join_quietly()
        try:
            self.save(step, state() if callable(state) else state, metrics=metrics)
        except (*storage_errors(), CheckpointError) as exc:
            self._policy.record_failure(self._clock())  # try again after an interval
            log.error("checkpoint of step %d failed; training goes on: %s", step, exc)
            return False
        return True

    def _writing(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    def _join_quietly(self) -> None:
        """Wait for the background write; a failure of it was logged already."""
        with contextlib.suppress(CheckpointError):
            self.wait()

    def _announce_notice(self) -> float:
        remaining = self.notice.remaining()
        if not self._announced_notice:
            self._announced_notice = True
            log.warning(
                "preemption notice (%s): %.1fs of the %gs grace period left",
                self.notice.reason,
                remaining,
                self.grace_period,
            )
            if self._recorder is not None:
                self._recorder.preemption_noticed(self.notice.requested_wall_time or time.time())
        return remaining

    def _final_save(self, step: int, state: StateLike, metrics: Mapping[str, Any] | None) -> bool:
        remaining = self._announce_notice()
        if self._last_requested == step:
            self._join_quietly()
            if self._last_committed == step:
                log.warning("step %d is already saved; stopping", step)
                return False
        expected = max(self._save_durations, default=0.0)
        if expected > remaining:
            log.warning(
                "not saving step %d: the last saves took up to %.1fs but only %.1fs of the grace "
                "period is left; the next attempt resumes from step %s",
                step,
                expected,
                remaining,
                self._last_committed,
            )
            self._join_quietly()
            return False
        self._join_quietly()
        try:
            self.save(step, state() if callable(state) else state, metrics=metrics, blocking=True)
        except (*storage_errors(), CheckpointError) as exc:
            log.error(
                "the save of step %d on the preemption notice failed (%s); the next attempt "
                "resumes from step %s",
                step,
                exc,
                self._last_committed,
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
        """Checkpoint ``state`` as ``step``: files first, the sealed manifest last (the commit).

        A synchronous save writes every value from its own memory (no copy). An async save copies
        the values' mutable buffers (NumPy arrays, bytearrays) into snapshot buffers kept from
        one save to the next, which is all the training loop waits for, then writes them in a
        background thread. Either way the CRC32C is computed while the disk flushes (locally) or
        chunk by chunk as it is uploaded (``gs://``).

        Args:
            step: the number of steps completed (>= 0).
            state: name -> value (see :mod:`kfp_spot.trainer.adapters`).
            metrics: small JSON facts (loss, accuracy) kept in the manifest.
            blocking: wait for the write; default: not when ``async_save`` is on.

        Returns:
            The committed manifest, or None when the write goes on in the background (or this
            replica is not the writer).

        Raises:
            ValueError: ``step`` is negative or not an int.
            adapters.StateEncodingError: a value has no adapter (or only a pickle-based one and
                ``allow_pickle`` is off).
            CheckpointError: an earlier background save failed.
            OSError: the storage failed ``save_retries + 1`` times; the step is not committed.
        """
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        metrics = _clean_metrics(metrics)
        if not self.writer:
            self._last_requested = step
            return None
        t0 = self._clock()
        if self._writing() and self.interval.steps is not None and not self._warned_wait:
            self._warned_wait = True
            log.warning(
                "a background checkpoint write is still going when the next save is due: the "
                "loop waits for it (save less often than every %d steps to avoid this)",
                self.interval.steps,
            )
        self.wait()  # one write at a time, in step order; snapshot buffers are free after it
        files, index = adapters.encode_state(state, allow_pickle=self.allow_pickle)
        metadata = {
            "state": index,
            "state_format": STATE_FORMAT,
            "metrics": metrics,
            "attempt_id": self._recorder.attempt_id if self._recorder else None,
        }
        self._last_requested = step
        if blocking is None:
            blocking = not self.async_save
        if blocking:
            manifest = self._write(step, files, metadata, t0)
            self._record_stall(self._clock() - t0)
            return manifest
        snapshot = self._snapshot(files)
        stall = self._clock() - t0
        self._worker = threading.Thread(
            target=self._background_write,
            args=(step, snapshot, metadata, t0),
            name=f"kfp-spot-checkpoint-{step}",
            daemon=True,
        )
        self._worker.start()
        self._record_stall(stall, write=self._save_durations[-1] if self._save_durations else None)
        return None

    def save_directory(
        self, step: int, source: str, *, metrics: Mapping[str, Any] | None = None
    ) -> Manifest | None:
        """Commit the files a framework wrote under ``source`` as ``step`` (synchronously).

        For trainers that save in their own layout (Hugging Face, Lightning, orbax, torch DCP):
        the files are copied into ``<root>/step-<n>/`` and committed under a manifest, with the
        same retention and attempt records as :meth:`save`. See
        :mod:`kfp_spot.trainer.integrations.directory`.

        Raises:
            ValueError: ``step`` is invalid, or ``source`` is not a directory outside the step.
        """
        from kfp_spot.trainer.integrations import directory

        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        if not self.writer:
            self._last_requested = step
            return None
        t0 = self._clock()
        metadata = directory.layout_metadata(
            _clean_metrics(metrics), self._recorder.attempt_id if self._recorder else None
        )
        with directory.mapped_files(source, checkpoints.step_dir(self.root, step)) as files:
            self.wait()
            self._last_requested = step
            manifest = self._write(step, files, metadata, t0)
        self._record_stall(self._clock() - t0)
        return manifest

    def _snapshot(self, files: Mapping[str, Any]) -> dict[str, Any]:
        """Copy every mutable buffer of ``files`` (bytes are immutable: kept as they are)."""
        pool: dict[tuple[str, int], Any] = {}
        out: dict[str, Any] = {}
        for name, payload in files.items():
            parts = payload if isinstance(payload, (list, tuple)) else (payload,)
            copied = []
            for i, part in enumerate(parts):
                if isinstance(part, bytes):
                    copied.append(part)
                    continue
                view = memoryview(part)
                if view.ndim != 1 or view.format != "B":
                    view = view.cast("B")
                buf = self._pool.get((name, i))
                if buf is None or len(buf) != view.nbytes:
                    buf = checkpoints.new_buffer(view.nbytes)
                _copy(buf, view)
                pool[(name, i)] = buf
                copied.append(buf)
            out[name] = tuple(copied)
        self._pool = pool
        return out

    def _record_stall(self, stall: float, write: float | None = None) -> None:
        self._policy.record_save(stall, self._clock(), write=write)
        if self._recorder is not None:
            self._recorder.stalled(stall)

    def wait(self) -> None:
        """Wait for a background save to commit, and for retention to have removed old steps.

        Raises:
            CheckpointError: the background save failed (its step is not committed).
        """
        worker = self._worker
        if worker is not None:
            worker.join()
            self._worker = None
        self._join_janitor()
        if self._worker_error is not None:
            error, self._worker_error = self._worker_error, None
            raise CheckpointError(f"a background checkpoint save failed: {error}") from error

    def _background_write(
        self, step: int, files: dict[str, Any], metadata: dict[str, Any], t0: float
    ) -> None:
        try:
            self._write(step, files, metadata, t0)
        except (*storage_errors(), CheckpointError, ValueError, TypeError, RuntimeError) as exc:
            log.error("background save of step %d failed: %s", step, exc)
            self._worker_error = exc

    def _write(
        self, step: int, files: dict[str, Any], metadata: dict[str, Any], t0: float
    ) -> Manifest:
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
                    raise
                delay = 0.5 * 2**attempt
                log.warning(
                    "checkpoint of step %d failed (%s); writing it again in %.1fs", step, exc, delay
                )
                time.sleep(delay)
        failpoints.hit("save-after", step)
        duration = self._clock() - t0
        with self._lock:
            self._save_durations.append(duration)
            self._last_committed = step
        if self._recorder is not None:
            self._recorder.committed(step, duration)
        log.info("checkpoint step %d committed in %.3fs", step, duration)
        self._warn_if_slow(duration)
        if threading.current_thread() is not self._worker:
            # Deleting old steps (freeing a large file takes tens of ms) is no part of the save:
            # it goes on beside the next training steps.
            self._janitor = threading.Thread(
                target=self._retain, args=(step,), name="kfp-spot-retention", daemon=True
            )
            self._janitor.start()
        else:
            self._retain(step)  # already in the background writer
        return manifest

    def _retain(self, step: int) -> None:
        try:
            self._apply_retention()
        except storage_errors() as exc:  # the step is committed; old ones go next time
            log.warning("retention after step %d failed: %s", step, exc)

    def _join_janitor(self) -> None:
        janitor = self._janitor
        if janitor is not None:
            janitor.join()
            self._janitor = None

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

    # -- retention ---------------------------------------------------------------------------
    def _apply_retention(self) -> None:
        if self.keep_last is None:
            return
        manifests = checkpoints.committed_steps(self.root)
        committed = [m.step for m in manifests]
        keep = set(committed[-self.keep_last :])
        if self.keep_best and self.best_metric:
            ranked = [
                m
                for m in manifests
                if isinstance((m.metadata.get("metrics") or {}).get(self.best_metric), (int, float))
            ]
            ranked.sort(
                key=lambda m: m.metadata["metrics"][self.best_metric],
                reverse=self.best_mode == "max",
            )
            keep.update(m.step for m in ranked[: self.keep_best])
        newest = committed[-1] if committed else None
        for step in checkpoints.list_steps(self.root):
            torn_and_old = step not in committed and newest is not None and step < newest
            if (step in committed and step not in keep) or torn_and_old:
                checkpoints.delete_step(self.root, step)
                log.debug("retention: removed step %d", step)
