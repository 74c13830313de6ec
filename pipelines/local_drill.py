"""The bounds of a local run's preemption drill, one source for ``local.run`` and the CLI.

Only the standard library at import: ``kfp-spot run``'s options read them when the CLI loads.
"""

from __future__ import annotations

from typing import Any

from kfp_spot.pipelines.local_arguments import LocalRunError

PREEMPTIONS = (0, 6)
"""The preemptions a local run's drill may be asked for (``kfp-spot run --preemptions`` too):
Vertex AI restarts a preempted Spot job up to six times, so a seventh ends the job."""
GRACE_PERIOD = (0.5, 120.0)
"""The seconds from SIGTERM to SIGKILL a local run's preemptions may give (``--grace-period``):
Compute Engine gives a Spot VM 30 s; under half a second no trainer can save."""


def check_run_options(preemptions: Any, grace_period: Any) -> None:
    """Refuse a drill a local run could not carry out, before anything starts.

    Raises:
        LocalRunError: naming ``preemptions`` or ``grace_period`` and what is valid.
    """
    low, high = PREEMPTIONS
    if (
        isinstance(preemptions, bool)
        or not isinstance(preemptions, int)
        or not low <= preemptions <= high
    ):
        raise LocalRunError(
            f"preemptions: must be a whole number from {low} to {high}, got {preemptions!r}"
        )
    from kfp_spot.trainer.preemption import is_grace_period

    shortest, longest = GRACE_PERIOD
    if not is_grace_period(grace_period) or not shortest <= grace_period <= longest:
        raise LocalRunError(
            f"grace_period: must be a number of seconds from {shortest:g} to {longest:g} "
            f"(SIGTERM to SIGKILL), got {grace_period!r}"
        )
