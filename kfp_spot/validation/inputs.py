"""How a component reports a bad input: one line that names the input, never a traceback.

Runtime entry points raise typed errors (``LaunchInputError``, ``PromotionInputError``, ...) so
Python callers can catch them. Inside a KFP task (the executor runs ``python -m
kfp.dsl.executor_main``) nobody catches them: the interpreter would print a traceback into the
task log. :func:`report_input_errors` turns them into ``SystemExit(message)`` there instead: the
task fails (exit status 1) and its log ends with the one line the user needs.

:func:`freeze_at_exit` makes such a process (and ``kfp-spot run``) end quickly.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import sys
from collections.abc import Iterator

KFP_EXECUTOR_MODULE = "kfp.dsl.executor_main"


def in_kfp_executor() -> bool:
    """Whether this process is a KFP task's executor (kfp.local or Vertex AI Pipelines)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == KFP_EXECUTOR_MODULE


@contextlib.contextmanager
def report_input_errors(*error_types: type[BaseException]) -> Iterator[None]:
    """In a KFP task, end the task with the message of an ``error_types`` error, no traceback.

    Elsewhere (tests, notebooks, other Python code) the error propagates unchanged.
    """
    try:
        yield
    except error_types as exc:
        if not in_kfp_executor():
            raise
        raise SystemExit(str(exc)) from None


_FREEZE_REGISTERED: list[bool] = []


def freeze_at_exit() -> None:
    """Spare this process's exit a last walk over everything it imported.

    While the interpreter tears its modules down at exit it collects garbage over every object
    still alive; with Google's API clients and protobuf classes loaded that walk costs about a
    third of a second on a quiet machine and seconds on a busy one, for memory the process gives
    back anyway. ``gc.freeze()`` as an ``atexit`` hook (it runs before the teardown) takes those
    objects out of the collections; nothing changes before the process exits. Registered once.
    """
    if not _FREEZE_REGISTERED:
        _FREEZE_REGISTERED.append(True)
        atexit.register(gc.freeze)
