"""The checkpoint manager training code uses: one facade over saving, restoring and preemption.

Its parts: :mod:`~kfp_spot.trainer.saving` (when to save, what a save writes, the last save on a
notice), :mod:`~kfp_spot.trainer.writer` (commits, retries, the background writer),
:mod:`~kfp_spot.trainer.restore` (verify and decode) and :mod:`~kfp_spot.trainer.retention`.
This module holds the public surface and the attempt's lifecycle (signal handler, attempt record).

Why one module: it is the one class users read, and about half of its lines are the docstrings of
its public methods; the work itself already lives in the four modules above.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from kfp_spot import checkpoints, fs
from kfp_spot.checkpoints import CheckpointError, Manifest
from kfp_spot.checkpoints.numeric import real_number, whole_number
from kfp_spot.checkpoints.paths import check_step
from kfp_spot.checkpoints.ranking import default_mode
from kfp_spot.trainer import failpoints
from kfp_spot.trainer.attempts import AttemptRecorder
from kfp_spot.trainer.interval import SaveInterval
from kfp_spot.trainer.outputs import check_writable, checkpoint_root
from kfp_spot.trainer.preemption import PreemptionNotice
from kfp_spot.trainer.restore import Restored, decode_step, newest_verified
from kfp_spot.trainer.retention import apply_retention, check_retention
from kfp_spot.trainer.saving import Saver, StateLike
from kfp_spot.trainer.shutdown import CleanupHooks
from kfp_spot.trainer.writer import StepWriter, is_chief

log = logging.getLogger(__name__)

PREEMPTED_EXIT_CODE = 143
"""Exit status of a process that stopped on a preemption notice (128 + SIGTERM)."""

_OPEN_ROOTS: dict[str, int] = {}
"""Checkpoint roots of this process's started writing managers -> how many are open on each."""
_OPEN_LOCK = threading.Lock()


def _root_key(root: str) -> str:
    """One spelling of a root for :data:`_OPEN_ROOTS` (a local one resolved)."""
    local = fs.to_local_path(root)
    return os.path.realpath(local) if local is not None else root.rstrip("/")


_NUMPY_BOOLS = {("numpy", "bool"), ("numpy", "bool_")}  # NumPy 2's name, and NumPy 1's


def _check_flag(name: str, value: object) -> None:
    """Refuse a switch that is not True or False (``"false"`` from a config is truthy).

    NumPy's bool and the ints 0 and 1 are taken as what they say.

    Raises:
        ValueError: naming the argument and the value given.
    """
    kind = type(value)
    if isinstance(value, bool) or (kind.__module__, kind.__name__) in _NUMPY_BOOLS:
        return
    if isinstance(value, int) and value in (0, 1):
        return
    raise ValueError(f"{name} must be True or False, got {value!r}")


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
        root: checkpoint root (local path, a ``pathlib.Path`` too, ``file://`` or ``gs://``);
            defaults to ``$AIP_CHECKPOINT_DIR``. A ``gs://`` root is used through its Cloud
            Storage FUSE path (``/gcs/BUCKET/...``) where the bucket is mounted, as on Vertex
            AI's VMs.
        interval: ``"N"``/N (steps), ``"30s"`` (seconds), ``"auto"`` (Young-Daly) or a
            :class:`SaveInterval`.
        keep_last: committed steps to keep (newest); None keeps all.
        keep_best: additionally keep this many best steps by ``best_metric``.
        best_metric: metric name (from ``save(..., metrics=)``) that ranks steps for ``keep_best``.
        best_mode: ``"max"`` or ``"min"``; default: what the metric's name says, as for the
            evaluation's ``best:<metric>`` (``"min"`` for ``rmse``, ``val_loss``, ...; else
            ``"max"``).
        async_save: snapshot the state in the caller (a copy of its mutable buffers into
            buffers kept between saves) and write it in a background thread.
        allow_pickle: allow pickle-based adapters (scikit-learn estimators) when saving and
            restoring. Unpickling runs code named by the checkpoint file: turn it on only for a
            checkpoint root that nobody else can write.
        save_retries: how many times a save that failed on a storage error is written again
            (with a short backoff) before it is given up; a periodic save given up is logged and
            training goes on.
        grace_period: seconds between the preemption notice and SIGKILL; default: the
            job's (``$KFP_SPOT_GRACE_PERIOD``, which the emulator sets, else 30 s).
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
        root: str | os.PathLike[str] | None = None,
        *,
        interval: str | int | SaveInterval = "auto",
        keep_last: int | None = 3,
        keep_best: int = 0,
        best_metric: str | None = None,
        best_mode: str | None = None,
        async_save: bool = False,
        allow_pickle: bool = False,
        save_retries: int = 2,
        grace_period: float | None = None,
        mtbp: float | None = None,
        notice: PreemptionNotice | None = None,
        handle_signals: bool = True,
        record_attempts: bool = True,
        heartbeat_seconds: float = 10.0,
        writer: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = checkpoint_root(root)
        if best_mode is None:  # as best:<metric> ranks: keep_best must keep the best, not worst
            best_mode = default_mode(best_metric) if isinstance(best_metric, str) else "max"
        check_retention(keep_last, keep_best, best_metric, best_mode)
        heartbeat = real_number(heartbeat_seconds)
        if heartbeat is None or not 0 < heartbeat < math.inf:
            # inf: a record never rewritten, so a killed attempt's end is read from its start
            raise ValueError(
                "heartbeat_seconds must be a number of seconds > 0 (record_attempts=False "
                f"writes no attempt record), got {heartbeat_seconds!r}"
            )
        for flag, given in (
            ("async_save", async_save),
            ("allow_pickle", allow_pickle),
            ("handle_signals", handle_signals),
            ("record_attempts", record_attempts),
        ):
            _check_flag(flag, given)
        if writer is not None:
            _check_flag("writer", writer)
        retries = whole_number(save_retries)
        if retries is None or retries < 0:
            raise ValueError(f"save_retries must be an int >= 0, got {save_retries!r}")
        parsed_interval = SaveInterval.parse(interval, mtbp=mtbp)
        self.keep_last = None if keep_last is None else int(keep_last)
        self.keep_best = int(keep_best)
        self.best_metric = best_metric
        self.best_mode = best_mode
        self.notice = notice or PreemptionNotice(grace_period)
        self._displaced_told = False
        self.grace_period = self.notice.grace_period
        self.cleanup = CleanupHooks(self.notice)  # run after the save on a notice: on_preemption
        self._handle_signals = handle_signals
        is_writer = is_chief() if writer is None else bool(writer)
        self._recorder = (
            AttemptRecorder(self.root, grace_period=self.grace_period)
            if record_attempts and is_writer
            else None
        )
        self._writer = StepWriter(
            self.root,
            save_retries=retries,
            grace_period=self.grace_period,
            recorder=self._recorder,
            retain=self._apply_retention,
            clock=clock,
        )
        self._saver = Saver(
            self._writer,
            parsed_interval,
            recorder=self._recorder,
            is_writer=is_writer,
            async_save=bool(async_save),
            allow_pickle=bool(allow_pickle),
            heartbeat_seconds=heartbeat,
            clock=clock,
            ranked=best_metric if keep_best else None,
        )
        self._entered = False
        self._started = False  # ever: a save after close() is no unstarted save
        self._unstarted_told = False
        self._stopped = False
        self._open_key: str | None = None  # this manager's entry in _OPEN_ROOTS, while started

    # Settings the parts own (one copy each), read here.
    @property
    def interval(self) -> SaveInterval:
        """The save interval."""
        return self._saver.interval

    @property
    def writer(self) -> bool:
        """Whether this process writes checkpoints and attempt records."""
        return self._saver.is_writer

    @property
    def async_save(self) -> bool:
        """Whether saves write in the background by default."""
        return self._saver.async_save

    @property
    def allow_pickle(self) -> bool:
        """Whether pickle-based adapters may encode and decode state."""
        return self._saver.allow_pickle

    @property
    def save_retries(self) -> int:
        """Extra attempts at a save that failed on a storage error."""
        return self._writer.save_retries

    @property
    def failed_saves(self) -> int:
        """Saves given up after ``save_retries`` (their steps are not committed)."""
        return self._writer.failed_saves

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> CheckpointManager:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        clean_exit = isinstance(exc, SystemExit) and (exc.code in (0, None) or self._stopped)
        if exc is None or clean_exit:
            self.close()
        else:
            self.close(error=f"{type(exc).__name__}: {exc}")

    def start(self) -> CheckpointManager:
        """Install the preemption handler, read earlier attempts, write the attempt record.

        Raises:
            ValueError: this process writes checkpoints and cannot create or write in the
                (local) root.
        """
        if self._entered:
            return self
        if self.writer:  # before anything is written: no save could land there
            check_writable(self.root)
        self._entered = self._started = True
        self._saver.closed = False
        if self.writer:
            self._register_open()
        if self._handle_signals:
            self.notice.install()
        records = checkpoints.read_attempt_records(self.root)
        self._saver.restart(records)
        if self._recorder is not None:  # restore() may have run before start()
            self._recorder.start(self._writer.last_committed or 0, records)
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

        Raises:
            CheckpointError: a background save failed and no other error ends the attempt (its
                step is not committed: a run must not end as if its last save had landed).
        """
        failed: CheckpointError | None = None
        try:
            self.wait()
        except CheckpointError as exc:
            if error is None:
                failed = exc
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
            self._writer.release_buffers()
            self._entered = False
            self._saver.closed = True  # a save after this is written before it returns
            self._unregister_open()
        if failed is not None:
            raise failed

    def _register_open(self) -> None:
        """Count this manager open on its root; warn when another of this process is too."""
        key = _root_key(self.root)
        with _OPEN_LOCK:
            others = _OPEN_ROOTS.get(key, 0)
            _OPEN_ROOTS[key] = others + 1
            self._open_key = key
        if others:
            log.warning(
                "another CheckpointManager of this process is open on %s: each one's keep_last "
                "deletes the other's steps, and a step number both save is overwritten by the "
                "later save. Use one manager (the integrations take it as manager=), or give "
                "each its own root",
                self.root,
            )

    def _unregister_open(self) -> None:
        key, self._open_key = self._open_key, None
        if key is None:
            return
        with _OPEN_LOCK:
            left = _OPEN_ROOTS.get(key, 1) - 1
            if left > 0:
                _OPEN_ROOTS[key] = left
            else:
                _OPEN_ROOTS.pop(key, None)

    # -- reading -----------------------------------------------------------------------------
    def committed_steps(self) -> list[int]:
        """Committed steps under the root (manifest present and sizes right), oldest first.

        Raises:
            CheckpointFormatError: a step is in a newer format than this version reads.
        """
        self._writer.join_retention()
        return [m.step for m in checkpoints.committed_steps(self.root)]

    def restore(self, step: int | None = None) -> Restored | None:
        """Load the newest checkpoint that verifies (or ``step``), or None when there is none.

        A step with any problem (no manifest, a manifest that fails its seal or its checks, a
        missing, truncated or altered file, a decoder this manager does not allow, bytes that do
        not decode) is skipped with a warning that says why, and the next older step is tried.

        Args:
            step: restore exactly this step (raising when it does not verify): a whole number
                >= 0, as :meth:`save` takes it (``numpy.int64`` too).

        A file that is there but cannot be read (permission denied, an I/O error) is no damage:
        its ``OSError`` is raised, naming the file, and no older step is restored in its place
        (its retention would then delete the steps saved after it). So is a step in a newer
        format than this version reads (written by a newer kfp-spot-trainer):
        :class:`~kfp_spot.checkpoints.CheckpointFormatError` names it and the fix.

        Raises:
            ValueError: ``step`` is not a whole number >= 0.
            CheckpointCorruptError: ``step`` was given and is not valid.
            CheckpointFormatError: the step to restore is in a newer format; nothing is deleted.
            OSError: a file of the step to restore cannot be read; nothing is deleted.
        """
        restored = (
            newest_verified(self.root, allow_pickle=self.allow_pickle)
            if step is None
            else decode_step(self.root, check_step(step), allow_pickle=self.allow_pickle)
        )
        if restored is None:
            log.info("no committed checkpoint under %s: starting from step 0", self.root)
            return None
        log.info("resuming from step %d (%s)", restored.step, restored.path)
        self._resumed(restored.step)
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
            self._resumed(found.step)
        return found

    def _resumed(self, step: int) -> None:
        self._saver.resumed(step)
        if self._recorder is not None:
            self._recorder.resumed(step, write=self._entered)

    @property
    def last_committed_step(self) -> int | None:
        """The newest step this process committed or restored."""
        return self._writer.last_committed

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
            self._saver.announce_notice(self.notice)
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
        step = check_step(step)  # as save checks it, here on every step, saved or not
        failpoints.hit("step", step)
        self._tell_unstarted()
        if not self._displaced_told and self.notice.installed:
            self._tell_displaced()
        if self.notice.requested:
            saved = self._saver.final_save(step, state, metrics, self.notice)
            self.cleanup.run()  # the user's cleanup, after the save, in the grace period left
            return saved
        return self._saver.maybe_save(step, state, metrics)

    def _tell_unstarted(self) -> None:
        """Warn once when this writer saves without having been started (``with`` or start()).

        ``ckpt = CheckpointManager(...)`` then ``ckpt.maybe_save(...)`` saves, but installs no
        preemption handler and writes no attempt record: the notice ended the process without
        its last save, and a run's report said it never resumed.
        """
        if self._started or self._unstarted_told or not self.writer:
            return
        missing = []
        if self._handle_signals:
            missing.append(
                "saves nothing on the preemption notice (SIGTERM ends the process and the "
                "steps since the last save are lost)"
            )
        if self._recorder is not None:
            missing.append("writes no attempt record (a run's report cannot tell it resumed)")
        if not missing:
            return  # nothing start() would add
        self._unstarted_told = True
        log.warning(
            "CheckpointManager(%r) is saving without having been started: use `with "
            "CheckpointManager(...) as ckpt:` (or call ckpt.start() first and ckpt.close() at "
            "the end). Unstarted, it %s",
            self.root,
            " and ".join(missing),
        )

    def _tell_displaced(self) -> None:
        """Warn once when the preemption notice's handler was replaced after it was installed."""
        moved = self.notice.displaced()
        if not moved:
            return
        self._displaced_told = True
        for name, now in moved.items():
            log.warning(
                "the %s handler CheckpointManager installed was replaced (now %s): the "
                "preemption notice no longer reaches it, so nothing is saved on the notice and "
                "the steps since the last save are lost at each preemption. Leave the signal to "
                "the manager, or set your own handler before creating it (it is called after "
                "kfp-spot's)",
                name,
                now,
            )

    def save(
        self,
        step: int,
        state: Mapping[str, Any],
        *,
        metrics: Mapping[str, Any] | None = None,
        blocking: bool | None = None,
    ) -> Manifest | None:
        """Checkpoint ``state`` as ``step``: files first, the sealed manifest last (the commit).

        A synchronous save writes every value from its own memory (no copy); locally the CRC32C
        is computed while the disk flushes. An async save copies the state's files into snapshot
        buffers kept from one save to the next, which is all the training loop waits for, then
        writes them in a background thread (locally a large one with ``O_DIRECT``, without the
        page cache's copy), checksumming each chunk just before it is written. On ``gs://`` each
        chunk is checksummed as it is uploaded.

        Args:
            step: the number of steps completed (>= 0).
            state: name -> value (see :mod:`kfp_spot.trainer.adapters`).
            metrics: small JSON facts (loss, accuracy) kept in the manifest, by str names
                (another key is refused: ``1`` and ``"1"`` would be one metric).
            blocking: wait for the write; default: not when ``async_save`` is on, unless the
                manager was closed (nothing would wait for the background write).

        A step this manager committed or restored already is not written again (its commit
        would be removed first, and ``maybe_save``'s metrics with it): the loop's final
        ``save(step, state)`` after ``maybe_save`` committed ``step`` keeps that commit.

        Returns:
            The committed manifest, or None when the write goes on in the background (or this
            replica is not the writer).

        Raises:
            ValueError: ``step`` is not a whole number >= 0 (an int, ``numpy.int64``, ...).
            adapters.StateEncodingError: a value has no adapter (or only a pickle-based one and
                ``allow_pickle`` is off).
            CheckpointError: an earlier background save failed.
            OSError: the storage failed ``save_retries + 1`` times; the step is not committed.
        """
        self._tell_unstarted()
        return self._saver.save(step, state, metrics=metrics, blocking=blocking)

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
        self._tell_unstarted()
        return self._saver.save_directory(step, source, metrics=metrics)

    def wait(self) -> None:
        """Wait for a background save to commit, and for retention to have removed old steps.

        Raises:
            CheckpointError: the background save failed (its step is not committed).
        """
        self._writer.wait()

    def _apply_retention(self) -> list[int]:
        return apply_retention(
            self.root,
            keep_last=self.keep_last,
            keep_best=self.keep_best,
            best_metric=self.best_metric,
            best_mode=self.best_mode,
        )
