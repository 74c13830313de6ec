"""The replicas a dead emulator left running: found again by their token, then stopped.

Each replica's environment holds ``KFP_SPOT_EMULATOR_PROCESS`` with a token of its own, kept in
the state dir beside its pid, so a restarted emulator stops its own orphans and never a process
that was given a reused pid. The token is read from ``/proc`` on Linux and from ``ps -E`` where
there is no ``/proc`` (macOS).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kfp_spot.emulator import replicas


def _orphan_alive(pid: int, token: str) -> bool:
    """Whether ``pid`` is still a live replica started with ``token`` (not a reused pid).

    The token is in the replica's environment: read from ``/proc`` on Linux and from ``ps -E``
    where there is no ``/proc`` (macOS). A process whose environment cannot be read counts as gone:
    it is never signalled.
    """
    mark = f"{replicas.TOKEN_VAR}={token}"
    if not Path("/proc/self/environ").exists():
        return _alive_in_ps(pid, mark)
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    return mark.encode() in environ.split(b"\0")


PS_ENVIRONMENT = ("ps", "-E", "-ww", "-o", "stat=", "-o", "command=", "-p")
"""BSD ``ps`` (macOS): a process's state, then its command line followed by its environment."""


def _alive_in_ps(pid: int, mark: str) -> bool:
    """Whether ``pid`` lives (no zombie) with ``mark`` in its environment, as ``ps -E`` shows."""
    try:
        shown = subprocess.run(
            [*PS_ENVIRONMENT, str(pid)], capture_output=True, timeout=10, check=False
        ).stdout.split()
    except (OSError, subprocess.TimeoutExpired):  # no ps, or one that hangs: leave it alone
        return False
    # Bytes, not text: ps may print the environment's bytes as the process got them, and one
    # variable that is not UTF-8 (a Latin-1 path) must not stop a restart with UnicodeDecodeError.
    return bool(shown) and not shown[0].startswith(b"Z") and mark.encode() in shown[1:]


def stop_orphans(processes: Sequence[Mapping[str, Any]], grace_period: float) -> int:
    """Stop replicas a previous emulator left behind (SIGTERM, grace, SIGKILL).

    Args:
        processes: records with ``pid`` and ``token`` as stored for an attempt.
        grace_period: seconds between SIGTERM and SIGKILL.

    Returns:
        How many were still running.
    """
    alive = [p for p in processes if _orphan_alive(int(p["pid"]), str(p["token"]))]
    for proc in alive:
        replicas.signal_group(int(proc["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + grace_period
    while time.monotonic() < deadline and any(
        _orphan_alive(int(p["pid"]), str(p["token"])) for p in alive
    ):
        time.sleep(0.05)
    for proc in alive:
        replicas.signal_group(int(proc["pid"]), signal.SIGKILL)
    return len(alive)
