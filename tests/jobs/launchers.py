"""Launcher processes for the signal and crash tests, forked by tests/jobs/launcher_zygote.py.

Each is a process of its own (a pid to signal, stdout and stderr, an exit status) running
launcher_process.py's ``main``, as ``python launcher_process.py INPUTS`` would, without paying
again for the imports every launch makes (about a CPU-second each).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any

HERE = Path(__file__).resolve().parent


class Zygote:
    """The forking process and the launches it made: ``with Zygote() as launchers:``."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, str(HERE / "launcher_zygote.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE,
        )
        self._changed = threading.Condition()
        self._pids: list[int] = []
        self._ready = False
        self.status: dict[int, int] = {}
        self._lock = threading.Lock()
        self._count = 0
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True)
        self._reader.start()
        self._await(lambda: self._ready, 120.0, "the launcher zygote to start")

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            message = json.loads(line)
            with self._changed:
                if "ready" in message:
                    self._ready = True
                elif "pid" in message:
                    self._pids.append(message["pid"])
                else:
                    self.status[message["exited"]] = message["status"]
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _await(self, done: Any, timeout: float | None, what: str) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: done() or self._proc.poll() is not None, timeout):
                raise subprocess.TimeoutExpired(what, timeout or 0.0)
            if not done():
                raise RuntimeError(f"the launcher zygote ended (status {self._proc.returncode})")

    def _send(self, message: dict[str, Any]) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(message) + "\n")
        self._proc.stdin.flush()

    def start(self, inputs: dict[str, Any], out_dir: Path) -> Launched:
        """Start launcher_process.py's ``main`` on ``inputs``; its output goes to ``out_dir``."""
        with self._lock:
            self._count += 1
            stdout = out_dir / f"launcher-{self._count}.stdout"
            stderr = out_dir / f"launcher-{self._count}.stderr"
            before = len(self._pids)
            self._send(
                {
                    "launch": json.dumps(inputs),
                    "stdout": str(stdout),
                    "stderr": str(stderr),
                    "env": dict(os.environ),
                    "cwd": os.getcwd(),
                }
            )
            self._await(lambda: len(self._pids) > before, 60.0, "the launch's pid")
            return Launched(self, self._pids[before], stdout, stderr)

    def signal(self, pid: int, sig: int) -> None:
        """Send ``sig`` to ``pid`` if it has not ended (the zygote knows: no reused pid)."""
        with self._lock:
            self._send({"signal": int(sig), "pid": pid})

    def wait(self, pid: int, timeout: float | None) -> int:
        self._await(lambda: pid in self.status, timeout, f"launcher process {pid}")
        return self.status[pid]

    def __enter__(self) -> Zygote:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=60)
        self._reader.join(timeout=10)


class Launched:
    """One launcher process, used as the tests used a ``subprocess.Popen`` of it."""

    def __init__(self, zygote: Zygote, pid: int, stdout: Path, stderr: Path) -> None:
        self._zygote, self.pid, self._stdout, self._stderr = zygote, pid, stdout, stderr

    @property
    def returncode(self) -> int | None:
        return self._zygote.status.get(self.pid)

    def send_signal(self, sig: int) -> None:
        self._zygote.signal(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        return self._zygote.wait(self.pid, timeout)

    def stderr_so_far(self) -> str:
        return self._stderr.read_text() if self._stderr.exists() else ""

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the end; its stdout and stderr."""
        self.wait(timeout)
        return self._stdout.read_text(), self._stderr.read_text()
