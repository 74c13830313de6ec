"""Progress on a terminal: one line per event, and one live status line when it is a TTY.

On a TTY the status line is rewritten in place (carriage return + erase line), kept to the
terminal's width, and lifted out of the way whenever an event line is printed. On anything else
(a pipe, a file, CI logs) no control character is ever written: the status comes out as a plain
line at most every ``plain_every`` seconds (or never, with ``plain_every=None``).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")
_ERASE_LINE = "\r\x1b[2K"
_SPINNER = "|/-\\"


def plain(text: str) -> str:
    """``text`` without escape sequences or control characters (tabs become spaces)."""
    return _CONTROL.sub("", text.replace("\t", "    "))


def clock(seconds: float) -> str:
    """Elapsed time as ``m:ss`` (or ``h:mm:ss``)."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def terminal_width(stream: TextIO, default: int = 100) -> int:
    """The width of the terminal ``stream`` writes to (``default`` when it is none)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns or default
    except (OSError, ValueError, AttributeError):
        return default


class Console:
    """Event lines and a live status line on one stream (stderr by default).

    Thread-safe: events and status updates may come from different threads.

    Args:
        stream: returns the stream to write to, looked up at every write (so a stream swapped
            in later, such as one that leads back to the terminal during a capture, is used).
        prefix: put before every line.
        plain_every: on a non-TTY, print the status as a line at most this often (seconds);
            None: never.
        width: the terminal's width (default: measured now).
        clock_fn: the monotonic clock (tests pass their own).
    """

    def __init__(
        self,
        stream: Callable[[], TextIO] = lambda: sys.stderr,
        *,
        prefix: str = "kfp-spot: ",
        plain_every: float | None = 30.0,
        width: int | None = None,
        clock_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._prefix = prefix
        self._plain_every = plain_every
        self._width = width if width is not None else terminal_width(stream())
        self._clock = clock_fn
        self._lock = threading.Lock()
        self._status = ""
        self._line = ""  # the status line as last drawn
        self._shown = False  # a status line is on screen now (TTY only)
        self._spin = 0
        self._last_plain: float | None = None

    def event(self, text: str) -> None:
        """Print one event line (several lines when ``text`` has newlines)."""
        with self._lock:
            stream = self._stream()
            tty = stream.isatty()
            out = [_ERASE_LINE] if tty and self._shown else []
            for line in text.splitlines() or [""]:
                out.append(f"{self._prefix}{line if tty else plain(line)}\n")
            if tty and self._status:
                out.append(self._line)
            self._shown = tty and bool(self._status)
            stream.write("".join(out))
            stream.flush()

    def status(self, text: str) -> None:
        """Show ``text`` as the live status (on a non-TTY: now and then, as a plain line).

        An empty ``text`` removes the status line, as :meth:`clear` does.
        """
        if not text:
            self.clear()
            return
        with self._lock:
            stream = self._stream()
            self._status = text
            if stream.isatty():
                self._line = self._render()
                self._spin += 1
                stream.write(_ERASE_LINE + self._line)
                self._shown = True
                stream.flush()
                return
            now = self._clock()
            if self._last_plain is None:
                self._last_plain = now  # the first line comes one interval after the start
            elif self._plain_every is not None and now - self._last_plain >= self._plain_every:
                self._last_plain = now
                stream.write(f"{self._prefix}{plain(text)}\n")
                stream.flush()

    def clear(self) -> None:
        """Remove the live status line (call when the work is done)."""
        with self._lock:
            stream = self._stream()
            if self._shown and stream.isatty():
                stream.write(_ERASE_LINE)
                stream.flush()
            self._status = self._line = ""
            self._shown = False
            self._last_plain = None

    def _render(self) -> str:
        spinner = _SPINNER[self._spin % len(_SPINNER)]
        line = f"{self._prefix}{spinner} {self._status}"
        return line[: max(10, self._width - 1)]  # never wrap: a wrapped line cannot be rewritten
