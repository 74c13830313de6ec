"""What a task printed, read from the log the capture wrote for it (or a replica's log).

kfp.local indents what a task's process prints and sets its own records (``HH:MM:SS.mmm - LEVEL -
...``) around it; a component's own log records start ``[KFP Executor <time> <LEVEL>]:``. From
that: the task's own lines (:func:`task_output`), the part that says what went wrong
(:func:`error_excerpt`, with :func:`exit_status_hint` for a replica killed by a signal), its
``kfp-spot: warning:`` lines (:func:`task_warnings`), which a local run shows as the task ends
and again at its end,
and for the live status the last line it printed (:func:`last_printed_line`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from kfp_spot import tracebacks

_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x1f\x7f]")
_RECORD = re.compile(r"^\d{2}:\d{2}:\d{2}\.\d{3} - [A-Z]+ - ")  # kfp.local's log format
_INDENT = "    "  # kfp.local indents what a task's process prints


_EXIT_STATUS = re.compile(r"exited with a non-zero status of (?P<status>\d+)")
_SIGNAL_CAUSES = {
    "SIGKILL": "most often out of memory: the kernel's OOM killer",
    "SIGSEGV": "a crash in native code (a C extension, a GPU library)",
    "SIGABRT": "native code aborted (a failed assertion in a C/C++ library)",
    "SIGBUS": "a crash in native code, or shared memory (/dev/shm) too small",
}


def exit_status_hint(lines: Sequence[str]) -> str | None:
    """What a replica's exit status over 128 means (killed by signal ``status - 128``), or None.

    ``exited with a non-zero status of 137`` is a process killed by SIGKILL: its log ends
    mid-line, with no traceback to say so.
    """
    import signal

    for line in lines:
        match = _EXIT_STATUS.search(line)
        if match is None or not 128 < int(match["status"]) < 128 + 65:
            continue
        number = int(match["status"]) - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            return None
        cause = _SIGNAL_CAUSES.get(name)
        return f"status {match['status']} is 128+{number}: the process was killed by {name}" + (
            f" ({cause})" if cause else ""
        )
    return None


def task_output(log_text: str) -> list[str]:
    """What the task's own process printed, from a task log the capture wrote.

    The lines of its last execution (after the last ``Executing task`` record), without
    kfp.local's records, separators and indentation, and without the executor's dump of its
    input.
    """
    lines = log_text.splitlines()
    starts = [i for i, line in enumerate(lines) if _RECORD.match(line) and "Executing task" in line]
    own: list[str] = []
    in_input = False  # the executor's dump of its input, a JSON object: noise for a person
    for line in lines[starts[-1] + 1 if starts else 0 :]:
        if _RECORD.match(line):
            if " finished with status " in line:
                break
            continue
        if set(line.strip()) == {"-"}:  # kfp.local's horizontal rule
            continue
        line = (line[len(_INDENT) :] if line.startswith(_INDENT) else line).rstrip()
        if in_input:
            in_input = line != "}"
            continue
        if line.endswith("Got executor_input:"):
            in_input = True
            continue
        own.append(line)
    while own and not own[0]:
        own.pop(0)
    while own and not own[-1]:
        own.pop()
    return own


WARNING_PREFIX = "kfp-spot: warning: "
"""How kfp-spot's runtime starts a warning line on a task's stderr (prepare_package, launcher)."""


def task_warnings(log_text: str) -> list[str]:
    """The ``kfp-spot: warning:`` lines a task printed, from a task log the capture wrote.

    Their text after the prefix, in order, each once, from every execution in the log; kfp.local's
    own records are not the task's. Where the run shows them again at its end, as a task's log is
    a place a person reads only when something went wrong.
    """
    found: list[str] = []
    for line in log_text.splitlines():
        if _RECORD.match(line):
            continue
        text = (line[len(_INDENT) :] if line.startswith(_INDENT) else line).rstrip()
        if text.startswith(WARNING_PREFIX):
            warning = text[len(WARNING_PREFIX) :].strip()
            if warning and warning not in found:
                found.append(warning)
    return found


OUTPUT_CHARS = 80
"""How much of a last printed line the live status shows."""
_TAIL_BYTES = 4096


def logged_warnings(log: Path | None) -> list[str]:
    """:func:`task_warnings` of the task log ``log`` (none where there is no such file)."""
    if log is None or not log.is_file():
        return []
    return task_warnings(log.read_text(encoding="utf-8", errors="replace"))


def last_printed_line(path: Path, *, task_log: bool = False) -> str | None:
    """The last line printed into the file at ``path``, for the live status; None: none yet.

    Read from its end; a progress bar's carriage return ends a line too; colours and control
    characters are left out and the line is cut to :data:`OUTPUT_CHARS`. ``task_log``: a task's
    log the capture writes, where only the task's own lines count (kfp.local indents them),
    not kfp.local's records or the executor's dump of its input, and a component's log record
    is shown without its prefix.
    """
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - _TAIL_BYTES))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:  # not there yet, or cleaned up
        return None
    for raw in reversed(re.split(r"[\r\n]", tail)):
        if task_log:
            if not raw.startswith(_INDENT) or raw[len(_INDENT) :][:1].isspace():
                continue  # kfp.local's record, or the executor input's JSON
            raw = _EXECUTOR_LOG.sub("", raw[len(_INDENT) :])
            if raw.strip() in ("{", "}") or raw.endswith("Got executor_input:"):
                continue
        line = one_line(_CONTROL.sub("", raw), OUTPUT_CHARS)
        if line:
            return line
    return None


def one_line(text: str, chars: int) -> str:
    """``text`` on one line (each run of whitespace a space), cut to ``chars`` with ``...``."""
    line = " ".join(text.split())
    return line if len(line) <= chars else line[: chars - 3] + "..."


_EXECUTOR_LOG = re.compile(r"^\[KFP Executor [^\]]*\]: ")  # a component's log record
_CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


def error_excerpt(lines: Sequence[str], limit: int = 20) -> list[str]:
    """The part of a task's output that says what went wrong, at most about ``limit`` lines.

    From the line that names the exception that ended the task (the last of a chain of Python
    tracebacks) to the end: the error message, which may itself quote a log holding another
    traceback (as the launcher's error quotes the replica's last lines). An error message that
    quotes a traceback after its first lines (``python_module: ... does not import ...:``, or
    ``evaluation with M:F failed (exit 4):`` and ``M:F raised:``, then the traceback of the
    user's code) is kept whole: its first line names the field or step at fault, the traceback's
    last frames the user's file and line; logged and then raised, it is shown once. Without a
    traceback: from the last error the task logged (``[KFP Executor ... ERROR]:``), once when the
    task then exited with it, else the last ``limit`` lines but the task's progress records
    (``[KFP Executor ... INFO]:``) and its warnings (shown at the run's end).
    """
    lines = list(lines)
    start = next((i for i, line in enumerate(lines) if line.startswith(tracebacks.HEADER)), None)
    intro = _quoting_intro(lines, start) if start else []
    if start is None:
        said = [line for line in lines if not _PROGRESS.match(line)]  # not the error
        excerpt = _logged_error(lines) or (said or lines)[-limit:]
    elif intro:
        quoted = lines[start:]
        if intro[0] in quoted:  # a task that logged its error and then raised it: say it once
            quoted = quoted[: quoted.index(intro[0])]
        excerpt = [*intro, *quoted]
    else:
        while True:
            i = tracebacks.frames_end(lines, start)
            chained = _next_chained(lines, i)
            if chained is None:
                break
            start = chained
        excerpt = lines[i:] or lines[start:]
    if len(excerpt) > limit:
        head = max(1, limit // 4)
        tail = limit - head - 1
        left_out = len(excerpt) - head - tail
        excerpt = [*excerpt[:head], f"... ({left_out} lines left out)", *excerpt[-tail:]]
    return excerpt


_PROGRESS = re.compile(r"^\[KFP Executor [^\]]* (?:INFO|DEBUG)\]: |^" + re.escape(WARNING_PREFIX))
_LOGGED_ERROR = re.compile(r"^\[KFP Executor [^\]]* (?:ERROR|CRITICAL)\]: ")


def _logged_error(lines: list[str]) -> list[str]:
    """From the last error record the task logged to the end, the message once; [] if none.

    A component that logs its error and exits with it (``SystemExit(message)``, no traceback)
    printed the message twice, after its own INFO records.
    """
    at = next((i for i in reversed(range(len(lines))) if _LOGGED_ERROR.match(lines[i])), None)
    if at is None:
        return []
    first = _LOGGED_ERROR.sub("", lines[at])
    rest = lines[at + 1 :]
    if first in rest:  # logged, then exited with: say it once
        rest = rest[: rest.index(first)]
    return [first, *rest]


_INTRO_LINES = 3
"""How many lines of an error message may come before the traceback it quotes."""


def _quoting_intro(lines: list[str], traceback: int) -> list[str]:
    """The lines of an error message that go on with the traceback at ``traceback``; [] if none.

    Each ends with a colon, and the first says what failed (``field: ...:``); a log record's
    prefix is left out.
    """
    intro: list[str] = []
    for line in reversed(lines[max(0, traceback - _INTRO_LINES) : traceback]):
        text = _EXECUTOR_LOG.sub("", line).rstrip()
        if not text.endswith(":") or text.startswith(("[", " ")):
            break
        intro.insert(0, text)
        if _EXECUTOR_LOG.match(line):  # a log record starts the message
            break
    while intro and not _introduces_a_quote(intro[0]):
        intro.pop(0)
    return intro


def _introduces_a_quote(line: str) -> bool:
    """Whether ``line`` opens an error message that goes on with a quoted traceback."""
    text = line.rstrip()
    return text.endswith(":") and ": " in text and not line.startswith(("[", " "))


def _next_chained(lines: list[str], after: int) -> int | None:
    """Where the next traceback of an exception chain starts after line ``after``, or None."""
    for i in range(after, len(lines)):
        if lines[i] in _CHAINED:
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and lines[j].startswith(tracebacks.HEADER):
                return j
    return None
