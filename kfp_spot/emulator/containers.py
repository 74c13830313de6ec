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
    """:func:`container_runtime`, probed once (``docker info``/``podman info`` take seconds).

    Calling the probe returns the runtime's path or None; it is safe from several threads.
    :meth:`start` probes in the background as the emulator starts, so neither the first
    containerSpec job's create nor its first attempt waits for ``podman info`` (1.5-5 s); a call
    made while the probe runs waits for its answer, as it would have probed itself.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._probed = False
        self._runtime: str | None = None

    def start(self) -> None:
        """Probe now in a daemon thread (a no-op once probed)."""
        threading.Thread(target=self, name="container-probe", daemon=True).start()

    def __call__(self) -> str | None:
        """The runtime's path, or None when none answers."""
        with self._lock:
            if not self._probed:
                self._runtime = container_runtime()
                self._probed = True
            return self._runtime
