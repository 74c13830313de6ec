"""A local run's task processes end with the run, also when the run is interrupted.

kfp.local runs each task as a child process (``kfp/local/subprocess_task_handler.py``:
``run_local_subprocess``, kfp 2.17) and, on Ctrl-C, leaves it running: ``Popen``'s exit gives a
child a quarter of a second after a ``KeyboardInterrupt`` and returns. An interrupt sent to
``kfp-spot run`` alone (``kill -INT PID``, a supervisor, an IDE's stop button) left the launch
task polling an emulator that had gone, for a minute, with its CustomJob never cancelled. Each
task runs in a session of its own, so a terminal's Ctrl-C too reaches the run, not the task, and
the run stops the task as below.

While :func:`tasks_end_with_the_run` is active, a task interrupted this way gets SIGTERM (what
Vertex AI Pipelines sends a cancelled task: the launch cancels its CustomJob and exits) and is
waited for, at most ``TASK_STOP_SECONDS``, then killed; then the interrupt goes on. The signals go
to the task's whole process group: KFP's ``@dsl.component`` command starts the component's
Python as the child of one or two shells, and a SIGTERM to the outer shell alone left the
component running, holding the output the run waited on (the run hung). SIGTERM or
SIGHUP sent to the run interrupts it the same way (Python's default would end the process at once
and leave the tasks and the emulator's replicas running). Each task also runs with a temporary
directory (``TMPDIR``) of its own, removed when it ends, as a task's container on Vertex AI
Pipelines: what a task leaves there is gone, locally as on Vertex.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import IO

from kfp_spot.pipelines.local_patch import Standin

TASK_STOP_SECONDS = 30.0
"""Seconds an interrupted task gets to stop on SIGTERM (the launch cancels its job), then a kill."""
MAX_ARG_BYTES = 131072
"""Linux's MAX_ARG_STRLEN (32 pages of 4 KiB): the longest single argument ``execve`` takes."""
SIGNAL_CHECK_SECONDS = 0.2
"""How often the run's main thread looks for an interrupt while it waits for a task's output."""


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    """Copy ``stream``'s lines into ``lines``, then ``None`` at its end."""
    with contextlib.suppress(ValueError, OSError):  # closed under us: the task was stopped
        for line in iter(stream.readline, ""):
            lines.put(line)
    lines.put(None)


def _print_pending(lines: queue.Queue[str | None]) -> None:
    with contextlib.suppress(queue.Empty):
        while (line := lines.get_nowait()) is not None:
            print(line, end="")


def _signal_task(process: subprocess.Popen[str], signum: int) -> None:
    """Send ``signum`` to every process of the task (its own process group).

    A group that has ended is left: Linux says so with ``ESRCH``, macOS with ``EPERM`` while
    the task's process has exited and is not yet reaped (its kernel skips zombies, and finds no
    member it may signal); the task's own processes are always ours to signal.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def _stop(process: subprocess.Popen[str], reader: threading.Thread) -> None:
    """Stop an interrupted task: SIGTERM to its processes, a bounded wait, then a kill.

    The wait lasts until the task's output ends: every process of the task holds it (the
    shells, the component's Python, what that started), so its end says they all have. The
    output is drained meanwhile by ``reader`` (a full pipe would block the task).
    """
    try:
        _signal_task(process, signal.SIGTERM)
        reader.join(timeout=TASK_STOP_SECONDS)
    finally:
        if reader.is_alive() or process.poll() is None:
            _signal_task(process, signal.SIGKILL)
        process.wait()
        reader.join(timeout=TASK_STOP_SECONDS)  # a killed group's output ends at once


def _run_local_subprocess(full_command: list[str], env_vars: dict[str, str] | None = None) -> int:
    """kfp.local's ``run_local_subprocess``, ending the task when the run is interrupted.

    The task's output is read by a thread of its own; the main thread waits for each line with a
    timeout. An interrupt is delivered to whichever thread of the process the kernel picks (the
    emulator, the progress display and the drill run threads here): a main thread blocked in a
    read of the pipe never saw one that another thread took, and a launch printing nothing for
    minutes kept running. Waiting in short slices, it acts on the interrupt within
    ``SIGNAL_CHECK_SECONDS``.
    """
    # Each task gets a temporary directory of its own, removed when it ends: as a task's
    # container on Vertex AI, it leaves nothing behind (KFP's command writes the component's
    # source into a `mktemp -d` of its own, every run) and passes nothing on to the next task.
    # A short name: a socket made under it (multiprocessing's, in a user's evaluate()) must fit
    # AF_UNIX's 104 bytes below macOS's long TMPDIR.
    with tempfile.TemporaryDirectory(prefix="kfp-", ignore_cleanup_errors=True) as tmp:
        env = {**os.environ, **(env_vars or {}), "TMPDIR": tmp}
        return _run_task(full_command, env)


def _run_task(full_command: list[str], env: dict[str, str]) -> int:
    """Run one task's command with ``env``; see :func:`_run_local_subprocess`."""
    try:
        process = subprocess.Popen(
            full_command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # as kfp.local: the task's log is one stream
            text=True,
            bufsize=1,
            env=env,
            start_new_session=True,  # a process group of its own, signalled whole by _stop
        )
    except OSError as exc:
        if exc.errno != errno.E2BIG:
            raise
        # The executor input (every input's value) is one argument: a parameter of some
        # hundred kB (a long training_args list) ended the run with the exec's traceback.
        longest = max(len(arg.encode(errors="surrogateescape")) for arg in full_command)
        print(
            "kfp-spot: error: the task cannot start: its command is more than the system passes "
            f"to a process (Argument list too long; its longest argument, which holds the "
            f"task's inputs, has {longest} bytes, and Linux takes {MAX_ARG_BYTES} in one): give "
            "large inputs as a file or a Cloud Storage URI, not as a parameter's value"
        )
        return 1
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(
        target=_pump, args=(process.stdout, lines), name="kfp-spot-task-output", daemon=True
    )
    reader.start()
    status = None
    try:
        while True:
            try:
                line = lines.get(timeout=SIGNAL_CHECK_SECONDS)
            except queue.Empty:
                continue
            if line is None:
                break
            print(line, end="")
        print("\n")  # as kfp.local: sets the end of the task's output apart
        status = process.wait()
        return status
    finally:
        if status is None:  # interrupted (Ctrl-C above all): the task must not outlive the run
            _stop(process, reader)  # to the end of its output: how it stopped
            _print_pending(lines)
        process.stdout.close()


_STANDIN = Standin(
    "kfp.local.subprocess_task_handler", "run_local_subprocess", lambda _: _run_local_subprocess
)

_PYTHON3 = re.compile(r"(?<![\w./~-])python3(?![\w./-])")
_USER_CODE_AFTER = ('"$program_path/ephemeral_component.py"', '"$@"')


def _replace_python_executable(full_command: list[str], new_executable: str) -> list[str]:
    """kfp.local's ``replace_python_executable``, for the command's own ``python3`` only.

    kfp.local replaced the text ``python3`` anywhere in the command and its arguments, so the
    executor input's values were changed too: a source under ``.../lib/python3.13/site-packages``
    (an installed kfp-spot's example) or a folder ``python3-work`` became a path that does not
    exist. Only the word ``python3`` in the shell command, before the component's code, is the
    interpreter; the code and the arguments after it are left as they are. In the shell command
    it is started as :func:`_shell_python` says.
    """
    out = []
    replace = True
    for element in full_command:
        if element == "python3" and replace:  # the program itself: a path, no shell text
            out.append(new_executable)
            continue
        out.append(
            _PYTHON3.sub(lambda _: _shell_python(new_executable), element) if replace else element
        )
        if all(mark in element for mark in _USER_CODE_AFTER):
            replace = False  # what follows: the component's code, then its arguments
    return out


def _shell_python(executable: str) -> str:
    """``executable`` as a task's shell command starts it: quoted, ``-P`` where Python has it.

    Quoted: a venv may live under ``~/My Projects``. ``-P`` (3.11): ``python -m
    kfp.dsl.executor_main`` puts the directory the run was started from first on the task's
    ``sys.path``: a ``tokenize.py`` or ``random.py`` of the project there (``cd my-project &&
    kfp-spot run --source .``) replaced the standard module in every task, which failed before
    its first line, and a module there was importable by a task's code. On Vertex AI a task's
    container holds none of that folder.
    """
    quoted = shlex.quote(executable)
    return f"{quoted} -P" if sys.version_info >= (3, 11) else quoted


_PYTHON_STANDIN = Standin(
    "kfp.local.subprocess_task_handler",
    "replace_python_executable",
    lambda _: _replace_python_executable,
)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""Signals that stop a process politely: ``kill``, ``timeout``, CI runners; a closed terminal."""


@contextlib.contextmanager
def _stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP interrupt the run as Ctrl-C does, where Python's default was left.

    Python's default ends the process at once: the tasks, the emulator's replicas (each in a
    session of its own) and their CustomJobs went on without it and no ``run.json`` was written.
    A handler the program set is left alone (``nohup``'s ignored SIGHUP too), and so is a run
    outside the main thread (signals reach only it).
    """
    previous = {}
    try:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                if signal.getsignal(signum) == signal.SIG_DFL:
                    previous[signum] = signal.signal(signum, _interrupt)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def tasks_end_with_the_run() -> Iterator[None]:
    """While active (in this process), an interrupted run stops the task it is running.

    SIGTERM and SIGHUP interrupt it too (where the program has not set a handler of its own),
    each task gets a temporary directory of its own (``TMPDIR``), removed when it ends, and only
    the command's own ``python3`` becomes this interpreter (not text in the task's inputs).

    Re-entrant; the last exit puts kfp.local's own function and Python's defaults back.
    """
    with _STANDIN.active(), _PYTHON_STANDIN.active(), _stop_signals_interrupt():
        yield
