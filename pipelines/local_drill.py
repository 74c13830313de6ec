"""A local run's preemption drill: its bounds, and what the run says when it fell short.

The bounds are one source for ``local.run`` and the CLI; only the standard library at import:
``kfp-spot run``'s options read them when the CLI loads.
"""

from __future__ import annotations

from pathlib import Path
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


def saved_anything(checkpoint_root: str) -> bool:
    """Whether the job wrote anything under its local ``checkpoint_root`` (any layout)."""
    from kfp_spot import fs

    root = Path(fs.to_local_path(checkpoint_root) or checkpoint_root)
    return root.is_dir() and any(root.iterdir())


def short_drill(
    done: list[int], asked: int, interrupted: bool, failed: bool = False, saved: bool = True
) -> str:
    """Why a run preempted its job fewer times than asked (``done``: the steps it preempted at).

    ``failed``: the newest CustomJob failed, which the run has just shown; no advice to train
    longer then. ``saved``: the job wrote anything into its checkpoint directory; a training
    that saved nothing is not told to save more often or train longer, but to checkpoint.
    """
    told = f"the job was preempted {len(done)} of the {asked} time(s) asked"
    if interrupted:  # not the drill's doing: the run was stopped before it could finish
        return f"the run was interrupted before the preemption drill finished ({told})"
    if failed:
        return f"{told}: the training failed (above) before a new checkpoint to preempt after"
    if not saved:
        return (
            f"{told}: the drill preempts an attempt only after it commits a new kfp_spot.trainer "
            "checkpoint (step-<n>/manifest.json), and the training saved nothing in its "
            "checkpoint directory (AIP_CHECKPOINT_DIR): on Vertex AI each preemption would "
            "restart it from the beginning; checkpoint with kfp_spot.trainer (CheckpointManager, "
            "or a framework's SpotCheckpoint callback)"
        )
    return (
        f"{told}: the drill preempts an attempt only after it commits a new kfp_spot.trainer "
        "checkpoint (step-<n>/manifest.json), and the training ended or failed before that; save "
        "more often or train longer to see a preemption"
    )
