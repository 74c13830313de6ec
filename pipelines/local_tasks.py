"""A local run's task processes end with the run, also when the run is interrupted.

kfp.local runs each task as a child process (``kfp/local/subprocess_task_handler.py``:
``run_local_subprocess``, kfp 2.17) and, on Ctrl-C, leaves it running: ``Popen``'s exit gives a
child a quarter of a second after a ``KeyboardInterrupt`` and returns. A terminal's Ctrl-C
reaches the task too (the whole foreground process group gets it), but an interrupt sent to
``kfp-spot run`` alone (``kill -INT PID``, a supervisor, an IDE's stop button) left the launch
task polling an emulator that had gone, for a minute, with its CustomJob never cancelled.

While :func:`tasks_end_with_the_run` is active, a task interrupted this way gets SIGTERM (what
Vertex AI Pipelines sends a cancelled task: the launch cancels its CustomJob and exits) and is
waited for, at most ``TASK_STOP_SECONDS``, then killed; then the interrupt goes on.
"""

from __future__ import annotations

import contextlib
import os
import subprocess

from kfp_spot.pipelines.local_patch import Standin

TASK_STOP_SECONDS = 30.0
"""Seconds an interrupted task gets to stop on SIGTERM (the launch cancels its job), then a kill."""


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM, drain its output (a full pipe would block it) with a bound, then kill."""
    try:
        process.terminate()
        with contextlib.suppress(ValueError, OSError):  # its output pipe is already closed
            out, _ = process.communicate(timeout=TASK_STOP_SECONDS)
            if out:
                print(out, end="")
    except subprocess.TimeoutExpired:
        pass
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _run_local_subprocess(full_command: list[str], env_vars: dict[str, str] | None = None) -> int:
    """kfp.local's ``run_local_subprocess``, ending the task when the run is interrupted."""
    env = {**os.environ, **env_vars} if env_vars else None
    process = subprocess.Popen(
        full_command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # as kfp.local: the task's log is one stream
        text=True,
        bufsize=1,
        env=env,
    )
    status = None
    try:
        assert process.stdout is not None
        for line in iter(process.stdout.readline, ""):
            print(line, end="")
        print("\n")  # as kfp.local: sets the end of the task's output apart
        status = process.wait()
        return status
    finally:
        if status is None:  # interrupted (Ctrl-C above all): the task must not outlive the run
            _stop(process)
        if process.stdout is not None:
            process.stdout.close()


_STANDIN = Standin(
    "kfp.local.subprocess_task_handler", "run_local_subprocess", lambda _: _run_local_subprocess
)


def tasks_end_with_the_run() -> contextlib.AbstractContextManager[None]:
    """While active (in this process), an interrupted run stops the task it is running.

    Re-entrant; the last exit puts kfp.local's own function back.
    """
    return _STANDIN.active()
