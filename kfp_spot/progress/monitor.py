"""What a local run shows a person: task and attempt events, a live status, the failing task.

:class:`RunMonitor` turns kfp.local's task events and snapshots of the jobs and their ledger rows
into event lines (``[0:03] launch-spot-job started``, ``[0:05]   attempt 1 preempted after 1.0 s;
latest checkpoint: step 3``) and a status line. It only formats and remembers: where the events
come from is :mod:`kfp_spot.progress.localrun`'s business.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kfp_spot.progress.capture import base_name
from kfp_spot.progress.console import clock
from kfp_spot.progress.kfplocal import TaskEvent, errored_hint
from kfp_spot.progress.taskoutput import (
    error_excerpt,
    exit_status_hint,
    last_printed_line,
    logged_warnings,
    one_line,
    task_output,
)

_TERMINAL_JOB_STATES = {
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
}
# The job's own end, said once (a success is said by its last attempt's line).
_JOB_ENDS = {
    "JOB_STATE_FAILED": "failed",
    "JOB_STATE_CANCELLED": "cancelled",
    "JOB_STATE_EXPIRED": "expired",
}
_ATTEMPT_ENDS = {
    "SUCCEEDED": "succeeded",
    "PREEMPTED": "preempted",
    "FAILED": "FAILED",
    "CANCELLED": "cancelled",
    "EMULATOR_RESTARTED": "lost (the emulator restarted)",
}


class TaskStatus(enum.Enum):
    """Where a task of the run is."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CACHED = "cached"


@dataclass
class TaskRecord:
    """A task of the run as the monitor saw it.

    Attributes:
        name: kfp.local's task name.
        started: monotonic time it started.
        ended: monotonic time it ended (None while it runs).
        status: where it is.
        log: its own log file, when it has one.
        error: kfp.local's own error, for a task it could not start (no log of its own).
    """

    name: str
    started: float
    ended: float | None = None
    status: TaskStatus = TaskStatus.RUNNING
    log: Path | None = None
    error: str = ""


@dataclass(frozen=True)
class JobView:
    """A CustomJob as the monitor sees it.

    Attributes:
        name: the resource name.
        state: e.g. ``JOB_STATE_RUNNING``.
        attempts: its ledger rows (``attempt``, ``startTime``, ``endReason``, ``billableSeconds``,
            ``machineType``, ``strategy``), as the emulator serves them.
        error: the service's words for a job that ended without success (``error.message``).
    """

    name: str
    state: str
    attempts: tuple[Mapping[str, Any], ...] = ()
    error: str = ""

    @property
    def short(self) -> str:
        """The job id (the last part of the name)."""
        return self.name.rsplit("/", 1)[-1]

    @property
    def location(self) -> str:
        """The region of the job (``locations/L`` in its name; "" when the name has none)."""
        parts = self.name.split("/")
        return parts[parts.index("locations") + 1] if "locations" in parts[:-1] else ""


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
        checkpoint_step: returns the newest committed checkpoint step of the job named, or None
            (each job has its own checkpoint directory: a pipeline may launch several).
        output: returns the last line the job's running attempt (job name, attempt number)
            printed, or None; the status shows it (a trainer's own progress: ``epoch 3 ...``).
        clock_fn: the monotonic clock.
    """

    def __init__(
        self,
        event: Callable[[str], None],
        status: Callable[[str], None] | None = None,
        *,
        jobs: Callable[[], Sequence[JobView] | None] | None = None,
        checkpoint_step: Callable[[str], int | None] | None = None,
        output: Callable[[str, int], str | None] | None = None,
        clock_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        self._event = event
        self._status = status
        self._jobs = jobs
        self._checkpoint_step = checkpoint_step
        self._output = output
        self._clock = clock_fn
        self._start = clock_fn()
        self._lock = threading.RLock()
        self.tasks: dict[str, TaskRecord] = {}
        self._baseline: set[str] | None = None  # jobs that were there before the run
        self._seen: dict[str, JobView] = {}
        self._announced: set[tuple[str, int, str]] = set()
        self._steps: dict[str, int | None] = {}  # each job's newest committed step
        self._settled: set[str] = set()  # jobs whose step was read once they had ended
        self.groups: dict[str, tuple[str, ...]] = {}  # sub-DAG -> the tasks in it
        self.pipeline_failed = False  # kfp.local said the pipeline FAILED
        self._warned: set[str] = set()  # warnings told as their task ended

    def watch(
        self,
        jobs: Callable[[], Sequence[JobView] | None],
        checkpoint_step: Callable[[str], int | None] | None = None,
        output: Callable[[str, int], str | None] | None = None,
    ) -> None:
        """Start following ``jobs``; the jobs there now are not this run's and are ignored."""
        with self._lock:
            self._jobs = jobs
            self._checkpoint_step = checkpoint_step
            self._output = output
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
            task.status = TaskStatus.SUCCEEDED if event.ok else TaskStatus.FAILED
            took = seconds(now - task.started)
            self._emit(f"{name} succeeded in {took}" if event.ok else f"{name} FAILED after {took}")
            self._tell_warnings(task)
        elif event.kind == "skipped":
            self.tasks[name] = TaskRecord(name, now, now, TaskStatus.SKIPPED, log)
            shown = ", ".join(self.groups.get(name, ())) or name
            self._emit(f"{shown} skipped" + (f": {event.detail}" if event.detail else ""))
        elif event.kind == "cached":
            self.tasks[name] = TaskRecord(name, now, now, TaskStatus.CACHED, log)
            self._emit(f"{name} cached: not run again")
        elif event.kind == "errored":  # kfp.local raised for it: before it started, mostly
            started = self.tasks.get(name)
            task = started or TaskRecord(name, now)
            task.ended, task.status, task.error = now, TaskStatus.FAILED, event.detail
            self.tasks[name] = task
            self._emit(f"{name} FAILED" if started else f"{name} FAILED before it ran")
        elif event.kind == "pipeline_finished":
            self.pipeline_failed = not event.ok
            self.poll()
            took = seconds(now - self._start)
            self._emit(f"pipeline {'succeeded in' if event.ok else 'FAILED after'} {took}")

    def told(self, text: str) -> None:
        """Note that the run has shown ``text`` already (a note at its start): not told again."""
        with self._lock:
            self._warned.add(text)

    def _tell_warnings(self, task: TaskRecord) -> None:
        """Tell each warning the ended ``task`` printed, once a run: one may act before training."""
        for text in logged_warnings(task.log):
            if text not in self._warned:
                self._warned.add(text)
                self._emit(f"{base_name(task.name)}: warning: {text}")

    def failed_tasks(self) -> list[TaskRecord]:
        """The tasks that failed, in the order they started."""
        return [t for t in self.tasks.values() if t.status is TaskStatus.FAILED]

    def failure_lines(self, limit: int = 20) -> list[str]:
        """For each failed task: its name, its log and what it printed about the error.

        A task kfp.local could not start has its error instead; a failed pipeline that names no
        failed task still gets a line: a failed run is never shown as a clean one.
        """
        lines: list[str] = []
        for task in self.failed_tasks():
            if task.error and task.log is None:
                lines.append(f"{task.name} FAILED before it ran: kfp.local could not start it:")
            else:
                where = f"; its log: {task.log}" if task.log else ""
                lines.append(f"{task.name} FAILED{where}")
                own: list[str] = []
                if task.log is not None and task.log.is_file():
                    own = task_output(task.log.read_text(encoding="utf-8", errors="replace"))
                excerpt = error_excerpt(own, limit) if own else ["(it printed nothing)"]
                lines += [f"  | {line}" for line in excerpt]
                killed = exit_status_hint(excerpt)
                lines += [f"  {killed}"] if killed else []
                lines += ["  kfp.local's own error:"] if task.error else []
            lines += [f"  | {line}" for line in task.error.splitlines()[-limit:]]
            hint = errored_hint(task.error)
            lines += [f"  {hint}"] if hint else []
        if not lines and self.pipeline_failed:
            lines.append(
                "pipeline FAILED, though no task did: kfp.local's reason is in pipeline.log"
            )
        return lines

    def warnings(self) -> list[tuple[str, tuple[str, ...]]]:
        """Each ``kfp-spot: warning:`` line the tasks printed, once, with the tasks that did.

        In the order the tasks started (a warning printed by several, such as an executor
        image's notice by prepare-package and the launch, names them all), read from their logs.
        """
        found: dict[str, list[str]] = {}
        with self._lock:
            tasks = list(self.tasks.values())
        for task in tasks:
            for text in logged_warnings(task.log):
                names = found.setdefault(text, [])
                if base_name(task.name) not in names:  # a loop's iterations: its task once
                    names.append(base_name(task.name))
        return [(text, tuple(names)) for text, names in found.items()]

    # jobs -------------------------------------------------------------------------------------

    def poll(self) -> None:
        """Look at the jobs and the checkpoints once; announce what changed."""
        with self._lock:
            jobs = self._jobs() if self._jobs is not None else None
            if jobs is None:
                return
            if self._baseline is None:
                self._baseline = {job.name for job in jobs}
            for job in jobs:
                if job.name not in self._baseline:
                    self._read_step(job)
                    self._follow(job)

    def _read_step(self, job: JobView) -> None:
        # Until the job ended (and once after): its steps do not change after that.
        if self._checkpoint_step is None or job.name in self._settled:
            return
        self._steps[job.name] = self._checkpoint_step(job.name)
        if job.state in _TERMINAL_JOB_STATES:
            self._settled.add(job.name)

    def _follow(self, job: JobView) -> None:
        if job.name not in self._seen:
            regions = {seen.location for seen in self._seen.values()}
            moved = bool(regions) and job.location not in regions
            where = f" in {job.location}" if moved else ""
            self._emit(f"  CustomJob {job.short} submitted{where}")
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
                step = self._steps.get(job.name)
                if reason != "FAILED" and step is not None:
                    text += f"; latest checkpoint: step {step}"
                self._emit(f"  {who}{text}")
        # Why the launch moves on (to another region, to STANDARD) or gives up: the job's end
        # (the service's words: a stockout, a cancel). A job whose code failed was said by its
        # attempt's FAILED line, and the failing task's error shows the message.
        ending = _JOB_ENDS.get(job.state)
        code_failed = bool(job.attempts) and job.attempts[-1].get("endReason") == "FAILED"
        if ending and not code_failed and self._once(job, 0, "job"):
            said = one_line(job.error, 200)
            if said.upper() in ("CANCELED", "CANCELLED"):  # a cancel's code name says no more
                said = ""
            self._emit(f"  CustomJob {job.short} {ending}" + (f": {said}" if said else ""))

    def _once(self, job: JobView, attempt: int, what: str) -> bool:
        key = (job.name, attempt, what)
        if key in self._announced:
            return False
        self._announced.add(key)
        return True

    # status -----------------------------------------------------------------------------------

    def status_text(self) -> str:
        """The live status: elapsed time, running tasks, the job's attempt, the checkpoint.

        Then the last line the running attempt printed, when there is one: a trainer that
        checkpoints once an epoch shows its progress between the commits; without a job, the
        last line the newest running task printed (an ``evaluate()`` that scores for minutes).
        """
        with self._lock:
            now = self._clock()
            running = [t for t in self.tasks.values() if t.status is TaskStatus.RUNNING]
            if not running:
                return ""
            parts = [f"[{clock(now - self._start)}] " + ", ".join(t.name for t in running)]
            active = [j for j in self._seen.values() if j.state not in _TERMINAL_JOB_STATES]
            if active:
                parts.append(_job_status(active[-1], len(self._seen) > 1))
                step = self._steps.get(active[-1].name)
                parts.append("no checkpoint yet" if step is None else f"checkpoint step {step}")
                printed = self._printed(active[-1])
            else:  # a task of its own (a long evaluate(), a build): what it printed last
                log = running[-1].log
                printed = last_printed_line(log, task_log=True) if log is not None else None
            if printed:
                parts.append(printed)
            return " | ".join(parts)

    def _printed(self, job: JobView) -> str | None:
        """The last line the job's running attempt printed (None: none, or no ``output``)."""
        running = [r for r in job.attempts if r.get("startTime") and not r.get("endReason")]
        if self._output is None or not running:
            return None
        return self._output(job.name, int(running[-1].get("attempt", 0)))

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
