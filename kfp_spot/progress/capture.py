"""Capture everything a run prints into log files, so the terminal shows only what matters.

kfp.local prints the executor logs of every task (it pipes each task's subprocess and prints its
lines) and logs through ``logging``; libraries and child processes may also write to file
descriptors 1 and 2 directly. For the length of a run, :class:`OutputCapture` redirects all of it:

- file descriptors 1 and 2 point at ``pipeline.log``, so a child process that inherits them, or C
  code that writes to them, ends up in the log too;
- ``sys.stdout`` and ``sys.stderr`` are routers: each line goes to ``pipeline.log`` (ANSI colours
  removed) and, when the writing thread runs a task (:meth:`OutputCapture.begin_task`), to that
  task's own log as well; with ``verbose``, also to the terminal as before;
- the root logger logs at INFO into the same log through a handler of its own.

Everything is restored on exit, also on an exception or Ctrl-C. Code that must reach the terminal
runs inside :meth:`OutputCapture.to_terminal`: in that thread ``sys.stdout`` and ``sys.stderr``
lead to the terminal again, so ``print`` and ``click.echo`` work unchanged.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TextIO

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
PIPELINE_LOG = "pipeline.log"
KFP_INDENT = "    "  # how kfp.local indents what a task's process prints


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (colours, cursor moves)."""
    return _ANSI.sub("", text)


def concurrent_name(task: str, n: int) -> str:
    """The name of the ``n``-th execution of ``task`` running at once (``launch-spot-job (2)``).

    kfp.local runs a ``dsl.ParallelFor``'s iterations side by side, each task under its name in
    the pipeline: each execution keeps a log and a line of its own.
    """
    return task if n < 2 else f"{task} ({n})"


def base_name(name: str) -> str:
    """kfp.local's name of a task, without :func:`concurrent_name`'s ``(n)``."""
    head, _, tail = name.rpartition(" (")
    return head if head and tail.endswith(")") and tail[:-1].isdigit() else name


def task_log_name(task: str) -> str:
    """The file name of a task's log: the task name with anything unsafe in a path replaced."""
    stem = _UNSAFE.sub("_", task).strip("._")
    if not stem or stem == PIPELINE_LOG.removesuffix(".log"):
        stem = f"task-{stem}"
    return f"{stem}.log"


class _Router(io.TextIOBase):
    """Stands in for ``sys.stdout`` or ``sys.stderr`` while a capture is active.

    One kept past the capture (a ``logging.StreamHandler`` made during the run holds it) writes to
    the stream it stood in for: the capture's files and its copy of the terminal are closed then.
    """

    def __init__(self, capture: OutputCapture, terminal: TextIO, fd: int) -> None:
        super().__init__()
        self._capture = capture
        self._terminal = terminal
        self._fd = fd
        self._after: TextIO | None = None  # the stream it stood in for, once the capture ended

    def end(self, stream: TextIO) -> None:
        """The capture ended: from now on write to ``stream``."""
        self._after = stream

    @property
    def encoding(self) -> str:  # type: ignore[override]  # TextIOBase: a settable attribute
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]  # TextIOBase: a settable attribute
        return "replace"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if self._after is not None:
            return self._after.write(text)
        if self._capture.at_terminal():
            self._terminal.write(text)
        elif text:
            self._capture.write(text, self._terminal)
        return len(text)

    def flush(self) -> None:
        # Also as the router is collected (IOBase closes it, flushing), maybe after the stream
        # it writes to was closed: Python 3.13 prints the error close() would then meet.
        target = self._terminal if self._after is None else self._after
        if not target.closed:
            target.flush()

    def isatty(self) -> bool:
        if self._after is not None:
            return self._after.isatty()
        return self._capture.at_terminal() and self._terminal.isatty()

    def fileno(self) -> int:
        if self._after is not None:
            return self._after.fileno()
        # The descriptor itself is redirected to pipeline.log: writing to it is captured too.
        return self._fd


class _LogHandler(logging.Handler):
    """The root handler during a capture: records go through the router like any other line."""

    def __init__(self) -> None:
        super().__init__()
        # kfp.local's own format, so the log reads as one
        self.setFormatter(
            logging.Formatter("%(asctime)s.%(msecs)03d - %(levelname)s - %(message)s", "%H:%M:%S")
        )

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record) + "\n"
        except (TypeError, ValueError):  # a bad format string in someone's log call
            self.handleError(record)
            return
        # Through sys.stdout as it is now (the router), where kfp.local sends its own records.
        sys.stdout.write(message)


class OutputCapture:
    """Send what a run prints to ``<log_dir>/pipeline.log`` and per-task logs.

    Use as a context manager (not nested in itself).

    Args:
        log_dir: where the logs go (created).
        verbose: also stream everything to the terminal (what kfp.local shows by default).
    """

    def __init__(self, log_dir: str | os.PathLike[str], *, verbose: bool = False) -> None:
        self.log_dir = Path(log_dir)
        self.pipeline_log = self.log_dir / PIPELINE_LOG
        self.verbose = verbose
        self._lock = threading.Lock()
        self._local = threading.local()
        self._pending: dict[int, str] = {}  # thread id -> its unfinished line
        self._tasks: dict[int, str] = {}  # thread id -> the task it runs
        self._running: dict[int, str] = {}  # thread id -> the task it runs and has not ended
        self._files: dict[str, TextIO] = {}  # task -> its open log
        self._pipeline_file: TextIO | None = None
        self._saved_fds: dict[int, int] = {}
        self._saved_streams: tuple[TextIO, TextIO] | None = None
        self._terminals: list[TextIO] = []
        self._routers: tuple[_Router, ...] = ()
        self._saved_logging: tuple[int, list[logging.Handler]] | None = None

    # context ----------------------------------------------------------------------------------

    def __enter__(self) -> OutputCapture:
        if self._saved_streams is not None or self._pipeline_file is not None:
            raise RuntimeError("this OutputCapture is active already")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._pipeline_file = open(self.pipeline_log, "a", encoding="utf-8", errors="replace")
        try:
            self._redirect()
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._restore()

    def _redirect(self) -> None:
        stdout, stderr = sys.stdout, sys.stderr
        for stream in (stdout, stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        terminals = [self._terminal_for(stdout, 1), self._terminal_for(stderr, 2)]
        log_fd = os.open(self.pipeline_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            for fd in (1, 2):
                self._saved_fds[fd] = os.dup(fd)
                os.dup2(log_fd, fd)
        finally:
            os.close(log_fd)
        self._saved_streams = (stdout, stderr)
        self._routers = (_Router(self, terminals[0], 1), _Router(self, terminals[1], 2))
        sys.stdout, sys.stderr = self._routers
        root = logging.getLogger()
        self._saved_logging = (root.level, root.handlers[:])
        root.handlers.clear()
        root.addHandler(_LogHandler())
        root.setLevel(logging.INFO)

    def _terminal_for(self, stream: TextIO, fd: int) -> TextIO:
        """A stream to the terminal that stays there after ``fd`` is redirected."""
        try:
            backed_by_fd = stream.fileno() == fd
        except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError
            backed_by_fd = False
        if not backed_by_fd:
            return stream  # e.g. click's CliRunner or pytest's capsys: keep writing to it
        terminal = io.TextIOWrapper(
            io.FileIO(os.dup(fd), "w", closefd=True),
            encoding=getattr(stream, "encoding", None) or "utf-8",
            errors="replace",
            line_buffering=True,
        )
        self._terminals.append(terminal)
        return terminal

    def _restore(self) -> None:
        if self._saved_logging is not None:
            root = logging.getLogger()
            level, handlers = self._saved_logging
            root.handlers[:] = handlers
            root.setLevel(level)
            self._saved_logging = None
        if self._saved_streams is not None:
            for router, stream in zip(self._routers, self._saved_streams, strict=False):
                router.end(stream)
            self._routers = ()
            sys.stdout, sys.stderr = self._saved_streams
        for fd, saved in self._saved_fds.items():
            os.dup2(saved, fd)
            os.close(saved)
        self._saved_fds.clear()
        with self._lock:
            for thread, text in self._pending.items():
                self._write_line(thread, text + "\n")
            self._pending.clear()
            for handle in [self._pipeline_file, *self._files.values(), *self._terminals]:
                if handle is not None:
                    with contextlib.suppress(OSError, ValueError):
                        handle.close()
            self._files.clear()
            self._terminals.clear()
            self._pipeline_file = None

    # routing ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def to_terminal(self) -> Iterator[None]:
        """In this block, this thread's ``sys.stdout``/``sys.stderr`` write to the terminal."""
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth

    def at_terminal(self) -> bool:
        """Whether this thread writes to the terminal now (inside :meth:`to_terminal`)."""
        return getattr(self._local, "depth", 0) > 0

    def begin_task(self, task: str) -> Path:
        """From now on this thread's lines also go to ``task``'s own log; returns its path."""
        return self.task_log(self.start_task(task))

    def start_task(self, task: str) -> str:
        """:meth:`begin_task`; returns the name the execution's log and lines go by.

        ``task`` itself, unless another thread runs a task of that name now (iterations of a
        ``dsl.ParallelFor`` side by side): then :func:`concurrent_name`'s next free one.
        """
        thread = threading.get_ident()
        with self._lock:
            taken = {name for t, name in self._running.items() if t != thread}
            name = next(
                concurrent_name(task, n)
                for n in range(1, len(taken) + 2)
                if concurrent_name(task, n) not in taken
            )
            if name not in self._files and self._pipeline_file is not None:
                # kept open for the whole capture; closed in _restore
                path = self.task_log(name)
                self._files[name] = open(path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115
            self._tasks[thread] = self._running[thread] = name
        return name

    def finish_task(self, task: str) -> str:
        """This thread's ``task`` has ended; returns the name :meth:`start_task` gave it.

        Its lines still go to its log until the thread begins another (kfp.local's record of
        its end comes after). ``task`` itself when this thread does not run it (kfp.local says
        a loop iteration failed from the loop's thread).
        """
        thread = threading.get_ident()
        with self._lock:
            name = self._running.get(thread, "")
            if base_name(name) != task:
                return task
            del self._running[thread]
        return name

    def end_task(self) -> None:
        """This thread's lines go to ``pipeline.log`` only again."""
        with self._lock:
            self._tasks.pop(threading.get_ident(), None)
            self._running.pop(threading.get_ident(), None)

    def task_log(self, task: str) -> Path:
        """Where ``task``'s own log is (or will be)."""
        return self.log_dir / task_log_name(task)

    def write(self, text: str, terminal: TextIO) -> None:
        """Log ``text`` written by this thread, a line at a time."""
        thread = threading.get_ident()
        with self._lock:
            pending = self._pending.pop(thread, "")
            if text and not text.strip(" ") and not pending.strip(" "):
                # kfp.local's indentation of a task's line, written on its own; nested when
                # tasks run side by side (its print patch wraps another's): indented once.
                self._pending[thread] = KFP_INDENT
                return
            text = pending + text
            body, newline, rest = text.rpartition("\n")
            if rest:
                self._pending[thread] = rest
            if newline:
                self._write_line(thread, body + newline)
        if self.verbose and newline:
            terminal.write(body + newline if terminal.isatty() else strip_ansi(body + newline))

    def _write_line(self, thread: int, text: str) -> None:
        if self._pipeline_file is None:
            return
        clean = strip_ansi(text)
        self._pipeline_file.write(clean)
        self._pipeline_file.flush()
        task = self._tasks.get(thread)
        if task is not None and task in self._files:
            self._files[task].write(clean)
            self._files[task].flush()
