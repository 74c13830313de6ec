"""The progress of ``run_local``: capture, kfp.local's task events and the emulator, wired up.

:class:`LocalRunProgress` is what :func:`kfp_spot.pipelines.local_run.run_local` enters for the
length of a run: output capture (:mod:`~kfp_spot.progress.capture`), the kfp.local log filter
(:mod:`~kfp_spot.progress.kfplocal`) and, while the pipeline runs, a thread that looks at the
emulator's jobs and the checkpoints for the :class:`~kfp_spot.progress.monitor.RunMonitor`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kfp_spot.progress.capture import OutputCapture
from kfp_spot.progress.kfplocal import TaskEvent, TaskEventFilter, dag_tasks
from kfp_spot.progress.monitor import JobView, RunMonitor
from kfp_spot.progress.taskoutput import last_printed_line

if TYPE_CHECKING:
    from kfp_spot.emulator import Emulator


def emulator_jobs(emu: Emulator) -> Callable[[], list[JobView] | None]:
    """A ``jobs`` source for :class:`RunMonitor`: the emulator's jobs and ledgers, oldest first."""
    from kfp_spot.emulator import ApiError, EmulatorError

    def jobs() -> list[JobView] | None:
        try:
            return [
                JobView(
                    job["name"],
                    str(job.get("state", "")),
                    tuple(emu.attempts(job["name"])),
                    str((job.get("error") or {}).get("message", "")),
                )
                for job in reversed(emu.list_jobs())
            ]
        except (ApiError, EmulatorError, sqlite3.Error):  # stopped or restarting: look again later
            return None

    return jobs


def replica_output(state_dir: str | os.PathLike[str]) -> Callable[[str, int], str | None]:
    """An ``output`` source for :class:`RunMonitor`: the last line a job's attempt printed.

    Read from the end of the primary replica's log in the emulator's state dir (``logs/<job
    id>/attempt-<n>/workerpool0-0.log``), by
    :func:`~kfp_spot.progress.taskoutput.last_printed_line`.
    """
    from kfp_spot.emulator.statedir import attempt_log_dir

    def output(job_name: str, attempt: int) -> str | None:
        folder = attempt_log_dir(Path(state_dir), job_name.rsplit("/", 1)[-1], attempt)
        return last_printed_line(folder / "workerpool0-0.log")

    return output


def latest_step(checkpoint_root: str) -> Callable[[str], int | None]:
    """A ``checkpoint_step`` source: the newest committed step under ``checkpoint_root``.

    Every job is taken to write there (a pipeline with one launch); the job's name is ignored.
    """
    from kfp_spot import checkpoints

    def step(job_name: str = "") -> int | None:
        try:
            manifest = checkpoints.latest(checkpoint_root, check_hashes=False)
        except OSError:  # being written or cleaned up right now
            return None
        except checkpoints.CheckpointFormatError as exc:  # committed by a newer kfp-spot
            return exc.step
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
        self.event(f"logs: {self.log_dir}/ (pipeline.log and one file per task)")
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

    def note(self, text: str) -> None:
        """Show ``note: text``; a task's warning of the same text is not shown again as it ends."""
        self.monitor.told(text)
        self.event(f"note: {text}")

    def _show_status(self, text: str) -> None:
        if self._status is not None:
            with self.capture.to_terminal():
                self._status(text)

    def name_groups(self, pipeline_spec: Any) -> None:
        """Name a skipped sub-DAG (``condition-1``) by the tasks in it (``PipelineSpec``)."""
        self.monitor.groups = dag_tasks(pipeline_spec)

    def _on_task_event(self, event: TaskEvent) -> None:
        log = None
        if event.kind == "started":  # named apart from a same-named task running beside it
            event = replace(event, name=self.capture.start_task(event.name))
            log = self.capture.task_log(event.name)
        elif event.kind in ("finished", "errored"):
            event = replace(event, name=self.capture.finish_task(event.name))
        elif event.kind == "pipeline_finished":
            self.capture.end_task()
        self.monitor.on_task_event(event, log)

    @contextlib.contextmanager
    def watching(
        self,
        jobs: Callable[[], Sequence[JobView] | None],
        checkpoint_step: Callable[[str], int | None] | None = None,
        output: Callable[[str, int], str | None] | None = None,
    ) -> Iterator[RunMonitor]:
        """Follow ``jobs`` (their checkpoints, what they print) in a background thread."""
        self.monitor.watch(jobs, checkpoint_step, output)
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
