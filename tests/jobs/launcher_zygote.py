"""Forks a launch_spot_job process per request (see tests/jobs/launchers.py for the client).

A fresh interpreter spends about a CPU-second importing the launcher and Vertex AI's client
library before ``launch_spot_job`` starts; this process imports them once and forks a child per
launch. The child is a process of its own, as a launcher in a pipeline pod is: its own pid for the
test's signals, its own stdout and stderr (files), its own exit status. It runs
:func:`launcher_process.main` with the environment and working directory the test had.

One JSON object a line. Read from stdin: ``{"launch": argv1, "stdout": path, "stderr": path,
"env": {...}, "cwd": path}`` (answered ``{"pid": N}``), ``{"signal": N, "pid": N}`` (sent only to
a child not yet reaped, so never to a reused pid). Written to stdout: ``{"ready": true}`` once
imported, ``{"exited": pid, "status": S}`` as each child ends (S as ``Popen.returncode``:
``-N`` for a signal). At the end of stdin it waits for every child and exits.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import traceback
from typing import Any

import launcher_process  # also imports kfp_spot.jobs.entry
from google.cloud import aiplatform_v1  # noqa: F401 - imported by the launch's client, once here


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _child(request: dict[str, Any]) -> int:
    """In the forked child: be the launcher process the request asks for; its exit status."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh interpreter
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = [launcher_process.__file__, request["launch"]]
    try:
        launcher_process.main()
        code = 0
    except SystemExit as exc:  # as the interpreter turns one into an exit status
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - as the interpreter: the traceback, status 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _reap(children: set[int]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        children.discard(pid)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        _say({"exited": pid, "status": code})


def main() -> None:
    children: set[int] = set()
    _say({"ready": True})
    pending = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
        _reap(children)
        if not readable:
            continue
        data = os.read(0, 65536)  # not sys.stdin: its buffer would hide lines from select
        if not data:
            break
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            if "signal" in request:
                if request["pid"] in children:
                    os.kill(request["pid"], request["signal"])
                continue
            pid = os.fork()
            if pid == 0:  # the child: never back into this loop, whatever happens
                code = 1
                try:
                    code = _child(request)
                finally:
                    os._exit(code)
            children.add(pid)
            _say({"pid": pid})
    for pid in children:  # the tests have ended: a launcher still running is not waited for
        os.kill(pid, signal.SIGKILL)
    while children:
        children.discard(os.waitpid(-1, 0)[0])


if __name__ == "__main__":
    main()
