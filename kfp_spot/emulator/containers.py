"""Which container runtime (``docker`` or ``podman``) can run a containerSpec replica, if any."""

from __future__ import annotations

import shutil
import subprocess
import threading


def container_runtime() -> str | None:
    """The container runtime (``docker`` or ``podman``) that answers, or None."""
    for tool in ("docker", "podman"):
        exe = shutil.which(tool)
        if not exe:
            continue
        try:
            probe = subprocess.run([exe, "info"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return exe
    return None


class RuntimeProbe:
    """:func:`container_runtime`, probed once on first use (``docker info`` can take seconds).

    Calling the probe returns the runtime's path or None; it is safe from several threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._probed = False
        self._runtime: str | None = None

    def __call__(self) -> str | None:
        """The runtime's path, or None when none answers."""
        with self._lock:
            if not self._probed:
                self._runtime = container_runtime()
                self._probed = True
            return self._runtime
