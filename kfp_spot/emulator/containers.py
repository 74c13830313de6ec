"""Which container runtime (``docker`` or ``podman``) can run a containerSpec replica, if any.

``KFP_SPOT_CONTAINER_RUNTIME`` (read when the emulator first asks) names the runtime instead of
probing for one: ``docker``, ``podman`` or a path to either runs containers with it, ``none`` runs
none (a containerSpec job is refused, as on a machine without a runtime). Unset or ``auto``: the
first of ``docker info`` / ``podman info`` that answers (0.5-5 s of subprocesses per emulator).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading

ENV = "KFP_SPOT_CONTAINER_RUNTIME"
_TOOLS = ("docker", "podman")

log = logging.getLogger(__name__)


def container_runtime() -> str | None:
    """The container runtime that runs containerSpec replicas here, or None.

    The one ``$KFP_SPOT_CONTAINER_RUNTIME`` names (see the module docstring), else the first of
    ``docker`` and ``podman`` whose ``info`` answers.
    """
    chosen = _chosen()
    if chosen:
        return _named_runtime(chosen)
    for tool in _TOOLS:
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


def _chosen() -> str:
    """What ``$KFP_SPOT_CONTAINER_RUNTIME`` chooses; "" when it leaves it to the probe."""
    chosen = os.environ.get(ENV, "").strip()
    return "" if chosen == "auto" else chosen


def _named_runtime(chosen: str) -> str | None:
    """The runtime ``$KFP_SPOT_CONTAINER_RUNTIME`` names, trusted without a probe.

    None for ``none``, or for a value that names no runtime here (said in the log; containerSpec
    jobs are then refused, naming the variable).
    """
    if chosen == "none":
        return None
    if os.path.basename(chosen) not in _TOOLS:
        log.warning(
            "%s=%r: expected docker, podman, a path to either, none or auto; running no containers",
            ENV,
            chosen,
        )
        return None
    exe = shutil.which(chosen)
    if exe is None:
        log.warning("%s=%r: no such executable here; running no containers", ENV, chosen)
    return exe


def no_runtime() -> str:
    """Why no container runtime runs containers here, for the errors that say so."""
    chosen = _chosen()
    if chosen:
        return f"{ENV}={chosen!r} names none that runs here"
    return "none answers on this machine (docker info, podman info)"


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
