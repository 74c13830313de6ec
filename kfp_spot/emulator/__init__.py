"""A local Vertex AI training emulator with faithful Spot VM semantics.

It serves the CustomJob REST surface of Vertex AI on 127.0.0.1, so the unmodified
``google-cloud-aiplatform`` SDK and the GAPIC ``JobServiceClient`` (``transport="rest"``) talk to
it; it runs ``pythonPackageSpec`` jobs as local processes with Vertex's environment, preempts Spot
attempts (SIGTERM, grace period, SIGKILL; STOCKOUT; up to six restarts), bills running time only
and keeps everything in SQLite under its state dir.

Example:
    >>> from kfp_spot.emulator import Emulator
    >>> with Emulator("/tmp/emu", preempt_at=(5.0,)) as emu:  # doctest: +SKIP
    ...     print(emu.endpoint)
"""

from kfp_spot.emulator.emulator import Emulator, EmulatorError
from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.lifecycle import MAX_RESTARTS
from kfp_spot.emulator.policy import PreemptionPolicy

__all__ = ["MAX_RESTARTS", "ApiError", "Emulator", "EmulatorError", "PreemptionPolicy"]
