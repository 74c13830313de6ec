"""``kfp-spot ARGS`` run through the script's own ``main`` in the test's process.

A ``kfp-spot`` process costs its interpreter's start and the imports of the command it runs (kfp,
the Vertex AI SDK: up to seconds of CPU each); a test of what one refusal prints pays that for
every case. The script is ``kfp_spot.cli:main`` (``[project.scripts]``), so calling that ``main``
with the argument list runs the same parsing, checks and error printing: its exit code is the
``SystemExit`` it raises, and what it writes is read from file descriptors 1 and 2 (``capfd``),
as a process's caller reads its pipes, so output from a child process or a C library counts too.

Two things a fresh interpreter would show and pytest would otherwise hide are kept visible: a
warning is written to stderr as Python's default filters print it, and an unexpected exception
propagates (a traceback a user would see fails the test). A few tests still run the real script
to show that a refusal is one line with no traceback from the process itself.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from kfp_spot.cli import main

# Python's default filters (``python -W`` unset, not ``__main__``): these categories are silent.
_SILENT_BY_DEFAULT = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def run_cli(args: list[str], capfd: pytest.CaptureFixture[str]) -> subprocess.CompletedProcess[str]:
    """Run ``kfp-spot ARGS`` in this process: its exit code, stdout and stderr.

    The environment and working directory are the test's (set them with ``monkeypatch``).
    """
    capfd.readouterr()  # what the test wrote before is not the command's
    with _process_state_restored(), warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        for category in _SILENT_BY_DEFAULT:
            warnings.simplefilter("ignore", category)
        try:
            main.main(args=list(args), prog_name="kfp-spot")
            status: object = None
        except SystemExit as exc:
            status = exc.code
    out, err = capfd.readouterr()
    if status is not None and not isinstance(status, int):
        err += f"{status}\n"  # ``sys.exit(message)``: the interpreter prints it, exits 1
    err += "".join(
        warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in caught
    )
    code = 0 if status is None else status if isinstance(status, int) else 1
    return subprocess.CompletedProcess(["kfp-spot", *args], code, out, err)


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _process_state_restored() -> Iterator[None]:
    """What a command may set for its own process (ending with it there) is put back after it.

    The environment, the working directory, signal handlers and the root logger's set-up: the
    refusals tested today change none of them, but a command that did would otherwise change the
    tests that run after it in this worker.
    """
    environ, cwd = dict(os.environ), os.getcwd()
    handlers = {s: signal.getsignal(s) for s in _SIGNALS}
    root = logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    try:
        yield
    finally:
        if dict(os.environ) != environ:
            os.environ.clear()
            os.environ.update(environ)
        os.chdir(cwd)
        for sig, handler in handlers.items():
            if handler is not None:  # None: not set from Python, nothing to put back
                signal.signal(sig, handler)
        root.handlers[:] = root_handlers
        root.setLevel(root_level)
