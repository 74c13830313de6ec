"""What a local run shows a person: task and attempt events, a live status, the failing task.

:class:`RunMonitor` turns kfp.local's task events and snapshots of the emulator's jobs and ledger
into event lines (``[0:03] launch-spot-job started``, ``[0:05]   attempt 1 preempted after 1.0 s;
latest checkpoint: step 3``) and a status line. :class:`LocalRunProgress` wires it to a run:
output capture (:mod:`kfp_spot.progress.capture`), the kfp.local log filter
(:mod:`kfp_spot.progress.kfplocal`) and a thread that watches the emulator while tasks run.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kfp_spot.progress.capture import OutputCapture
from kfp_spot.progress.console import clock
from kfp_spot.progress.kfplocal import TaskEvent, TaskEventFilter, error_excerpt, task_output

if TYPE_CHECKING:
    from kfp_spot.emulator import Emulator

_TERMINAL_JOB_STATES = {
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
}
_ATTEMPT_ENDS = {
    "SUCCEEDED": "succeeded",
    "PREEMPTED": "preempted",
    "FAILED": "FAILED",
    "CANCELLED": "cancelled",
    "EMULATOR_RESTARTED": "lost (the emulator restarted)",
}


@dataclass
class TaskRecord:
    """A task of the run as the monitor saw it.

    Attributes:
        name: kfp.local's task name.
        started: monotonic time it started.
        ended: monotonic time it ended (None while it runs).
        status: ``RUNNING``, ``SUCCEEDED``, ``FAILED``, ``SKIPPED`` or ``CACHED``.
        log: its own log file, when it has one.
    """

    name: str
    started: float
    ended: float | None = None
    status: str = "RUNNING"
    log: Path | None = None


@dataclass(frozen=True)
class JobView:
    """A CustomJob as the monitor sees it.

    Attributes:
        name: the resource name.
        state: e.g. ``JOB_STATE_RUNNING``.
        attempts: its ledger rows (``attempt``, ``startTime``, ``endReason``, ``billableSeconds``,
            ``machineType``, ``strategy``), as the emulator serves them.
    """

    name: str
    state: str
    attempts: tuple[Mapping[str, Any], ...] = ()

    @property
    def short(self) -> str:
        """The job id (the last part of the name)."""
        return self.name.rsplit("/", 1)[-1]


def seconds(value: float) -> str:
    """A duration for an event line: ``0.6 s``, ``12 s``, ``2:05``."""
    if value < 10:
        return f"{value:.1f} s"
    return f"{value:.0f} s" if value < 60 else clock(value)


class RunMonitor:
    """Turns task events and job snapshots into event lines and a status line.

    Args:
        event: receives each event line.
        status: receives the live status text (about every poll while a task runs); None: none.
        jobs: returns the jobs now, oldest first (None when they cannot be read right now).
        checkpoint_step: returns the newest committed checkpoint step, or None.
        clock_fn: the monotonic clock.
    """

    def __init__(
        self,
        event: Callable[[str], None],
        status: Callable[[str], None] | None = None,
        *,
        jobs: Callable[[], Sequence[JobView] | None] | None = None,
        checkpoint_step: Callable[[], int | None] | None = None,
        clock_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        self._event = event
        self._status = status
        self._jobs = jobs
        self._checkpoint_step = checkpoint_step
        self._clock = clock_fn
        self._start = clock_fn()
        self._lock = threading.RLock()
        self.tasks: dict[str, TaskRecord] = {}
        self._baseline: set[str] | None = None  # jobs that were there before the run
        self._seen: dict[str, JobView] = {}
        self._announced: set[tuple[str, int, str]] = set()
        self._step: int | None = None

    def watch(
        self,
        jobs: Callable[[], Sequence[JobView] | None],
        checkpoint_step: Callable[[], int | None] | None = None,
    ) -> None:
        """Start following ``jobs``; the jobs there now are not this run's and are ignored."""
        with self._lock:
            self._jobs = jobs
            self._checkpoint_step = checkpoint_step
            self._baseline = None
            self.poll()

    def _emit(self, text: str) -> None:
        self._event(f"[{clock(self._clock() - self._start)}] {text}")

    # tasks ------------------------------------------------------------------------------------

    def on_task_event(self, event: TaskEvent, log: Path | None = None) -> None:
        """Record and announce one of kfp.local's task events."""
        with self._lock:
            self._on_task_event(event, log)
            self.refresh()

    def _on_task_event(self, event: TaskEvent, log: Path | None) -> None:
        now = self._clock()
        name = event.name
        if event.kind == "started":
            self.tasks[name] = TaskRecord(name, now, log=log)
            self._emit(f"{name} started")
        elif event.kind == "finished":
            self.poll()  # attempts that ended before the task are told first
            task = self.tasks.setdefault(name, TaskRecord(name, now, log=log))
            task.ended = now
            task.status = "SUCCEEDED" if event.ok else "FAILED"
            took = seconds(now - task.started)
            self._emit(f"{name} succeeded in {took}" if event.ok else f"{name} FAILED after {took}")
        elif event.kind == "skipped":
            self.tasks[name] = TaskRecord(name, now, now, "SKIPPED", log)
            self._emit(f"{name} skipped" + (f": {event.detail}" if event.detail else ""))
        elif event.kind == "cached":
            self.tasks[name] = TaskRecord(name, now, now, "CACHED", log)
            self._emit(f"{name} cached: not run again")
        elif event.kind == "pipeline_finished":
            self.poll()
            took = seconds(now - self._start)
            self._emit(f"pipeline {'succeeded in' if event.ok else 'FAILED after'} {took}")

    def failed_tasks(self) -> list[TaskRecord]:
        """The tasks that failed, in the order they started."""
        return [t for t in self.tasks.values() if t.status == "FAILED"]

    def failure_lines(self, limit: int = 20) -> list[str]:
        """For each failed task: its name, its log and what it printed about the error."""
        lines: list[str] = []
        for task in self.failed_tasks():
            where = f"; its log: {task.log}" if task.log else ""
            lines.append(f"{task.name} FAILED{where}")
            own: list[str] = []
            if task.log is not None and task.log.is_file():
                own = task_output(task.log.read_text(encoding="utf-8", errors="replace"))
            excerpt = error_excerpt(own, limit) if own else ["(it printed nothing)"]
            lines += [f"  | {line}" for line in excerpt]
        return lines

    # jobs -------------------------------------------------------------------------------------

    def poll(self) -> None:
        """Look at the jobs and the checkpoints once; announce what changed."""
        with self._lock:
            jobs = self._jobs() if self._jobs is not None else None
            if jobs is None:
                return
            if self._checkpoint_step is not None:
                self._step = self._checkpoint_step()
            if self._baseline is None:
                self._baseline = {job.name for job in jobs}
            for job in jobs:
                if job.name not in self._baseline:
                    self._follow(job)

    def _follow(self, job: JobView) -> None:
        if job.name not in self._seen:
            self._emit(f"  CustomJob {job.short} submitted")
        self._seen[job.name] = job
        who = f"CustomJob {job.short}: " if len(self._seen) > 1 else ""
        for row in job.attempts:
            number = int(row.get("attempt", 0))
            if row.get("startTime") and self._once(job, number, "start"):
                where = ", ".join(str(row[k]) for k in ("strategy", "machineType") if row.get(k))
                self._emit(f"  {who}attempt {number} running" + (f" ({where})" if where else ""))
            reason = row.get("endReason")
            if reason and self._once(job, number, "end"):
                text = f"attempt {number} {_ATTEMPT_ENDS.get(str(reason), str(reason).lower())}"
                if row.get("startTime"):
                    text += f" after {seconds(float(row.get('billableSeconds') or 0))}"
                else:
                    text += " before it ran"
                if reason != "FAILED" and self._step is not None:
                    text += f"; latest checkpoint: step {self._step}"
                self._emit(f"  {who}{text}")

    def _once(self, job: JobView, attempt: int, what: str) -> bool:
        key = (job.name, attempt, what)
        if key in self._announced:
            return False
        self._announced.add(key)
        return True

    # status -----------------------------------------------------------------------------------

    def status_text(self) -> str:
        """The live status: elapsed time, running tasks, the job's attempt, the checkpoint."""
        with self._lock:
            now = self._clock()
            running = [t for t in self.tasks.values() if t.status == "RUNNING"]
            if not running:
                return ""
            parts = [f"[{clock(now - self._start)}] " + ", ".join(t.name for t in running)]
            active = [j for j in self._seen.values() if j.state not in _TERMINAL_JOB_STATES]
            if active:
                parts.append(_job_status(active[-1], len(self._seen) > 1))
                parts.append(
                    "no checkpoint yet" if self._step is None else f"checkpoint step {self._step}"
                )
            return " | ".join(parts)

    def refresh(self) -> None:
        """Hand the current status text to the status receiver (``""`` when no task runs)."""
        if self._status is not None:
            self._status(self.status_text())


def _job_status(job: JobView, name_it: bool) -> str:
    who = f"CustomJob {job.short} " if name_it else ""
    open_rows = [row for row in job.attempts if not row.get("endReason")]
    if open_rows:
        row = open_rows[-1]
        if row.get("startTime"):
            running = seconds(float(row.get("billableSeconds") or 0))
            return f"{who}attempt {row.get('attempt')} running for {running}"
        return f"{who}attempt {row.get('attempt')} starting"
    state = job.state.removeprefix("JOB_STATE_").lower() or "submitted"
    return f"{who or 'CustomJob '}{state}".strip()


def emulator_jobs(emu: Emulator) -> Callable[[], list[JobView] | None]:
    """A ``jobs`` source for :class:`RunMonitor`: the emulator's jobs and ledgers, oldest first."""
    from kfp_spot.emulator import ApiError, EmulatorError

    def jobs() -> list[JobView] | None:
        try:
            return [
                JobView(job["name"], str(job.get("state", "")), tuple(emu.attempts(job["name"])))
                for job in reversed(emu.list_jobs())
            ]
        except (ApiError, EmulatorError, sqlite3.Error):  # stopped or restarting: look again later
            return None

    return jobs


def latest_step(checkpoint_root: str) -> Callable[[], int | None]:
    """A ``checkpoint_step`` source: the newest committed step under ``checkpoint_root``."""
    from kfp_spot import checkpoints

    def step() -> int | None:
        try:
            manifest = checkpoints.latest(checkpoint_root, check_hashes=False)
        except OSError:  # being written or cleaned up right now
            return None
        return None if manifest is None else manifest.step

    return step


class LocalRunProgress:
    """What a local run prints and logs, for the length of the run.

    While active, everything printed or logged goes to ``<log_dir>/pipeline.log`` and each task's
    lines also to ``<log_dir>/<task>.log`` (see :class:`OutputCapture`); only progress reaches
    the terminal: ``progress`` gets event lines, ``status`` the live status text.

    Args:
        log_dir: where the logs go.
        progress: receives event lines (called where ``sys.stdout``/``sys.stderr`` lead to the
            terminal, so ``print`` or ``click.echo`` work); None: print nothing.
        status: receives the live status text a few times a second while tasks run, and ``""``
            when the run is over; None: no live status.
        verbose: also stream everything captured to the terminal.
        poll_seconds: how often the jobs are looked at.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        progress: Callable[[str], None] | None = print,
        status: Callable[[str], None] | None = None,
        verbose: bool = False,
        poll_seconds: float = 0.25,
    ) -> None:
        self.capture = OutputCapture(log_dir, verbose=verbose)
        self._progress = progress
        self._status = status
        self._poll_seconds = poll_seconds
        self.monitor = RunMonitor(self.event, self._show_status if status else None)
        self._filter = TaskEventFilter(self._on_task_event)
        self._stack = ExitStack()

    @property
    def log_dir(self) -> Path:
        """Where the logs are."""
        return self.capture.log_dir

    def __enter__(self) -> LocalRunProgress:
        with ExitStack() as stack:
            stack.enter_context(self.capture)
            stack.enter_context(self._filter.installed())
            self._stack = stack.pop_all()
        self.event(f"logs: {self.capture.pipeline_log}")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._show_status("")
            if exc_type is KeyboardInterrupt:
                self.event(f"interrupted; what the run printed so far: {self.log_dir}")
        finally:
            self._stack.close()

    def event(self, text: str) -> None:
        """Show an event line on the terminal (through ``progress``)."""
        if self._progress is not None:
            with self.capture.to_terminal():
                self._progress(text)

    def _show_status(self, text: str) -> None:
        if self._status is not None:
            with self.capture.to_terminal():
                self._status(text)

    def _on_task_event(self, event: TaskEvent) -> None:
        log = None
        if event.kind == "started":
            log = self.capture.begin_task(event.name)
        elif event.kind == "pipeline_finished":
            self.capture.end_task()
        self.monitor.on_task_event(event, log)

    @contextlib.contextmanager
    def watching(
        self,
        jobs: Callable[[], Sequence[JobView] | None],
        checkpoint_step: Callable[[], int | None] | None = None,
    ) -> Iterator[RunMonitor]:
        """Follow ``jobs`` (and the checkpoints) in a background thread for the block."""
        self.monitor.watch(jobs, checkpoint_step)
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(self._poll_seconds):
                self.monitor.poll()
                self.monitor.refresh()

        thread = threading.Thread(target=loop, name="run-progress", daemon=True)
        thread.start()
        try:
            yield self.monitor
        finally:
            stop.set()
            thread.join(timeout=30)
            self.monitor.poll()
            self._show_status("")

    def report_failures(self) -> bool:
        """Show each failed task's name, log and error; returns whether any task failed."""
        lines = self.monitor.failure_lines()
        for line in lines:
            self.event(line)
        return bool(lines)
