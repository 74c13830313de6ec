"""Python tracebacks read out of a process's output lines: where one starts, where its frames end.

Two readers share this: the launcher, which finds a replica's traceback further up the job's log
(``jobs.backend.traceback_before``), and a local run's console, which shows a task's error
(``progress.taskoutput.error_excerpt``).
"""

from __future__ import annotations

from collections.abc import Sequence

HEADER = "Traceback (most recent call last):"


def frames_end(lines: Sequence[str], header: int) -> int:
    """Where the stack frames of the traceback whose header is at ``header`` end.

    That is the exception's line, or ``len(lines)`` when the output ends inside the frames.

    A frame's lines are indented (or blank, between a chained exception's frames); the exception's
    line is not.
    """
    end = header + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][:1].isspace()):
        end += 1
    return end
