"""Which committed steps a checkpoint root keeps: the newest N, plus the best M by a metric."""

from __future__ import annotations

import logging
import math

from kfp_spot import checkpoints
from kfp_spot.checkpoints.numeric import real_number, whole_number

log = logging.getLogger(__name__)


def check_retention(
    keep_last: int | None, keep_best: int, best_metric: str | None, best_mode: str
) -> None:
    """Raise ValueError naming the first retention argument that is invalid."""
    if keep_last is not None and (not _is_count(keep_last) or keep_last < 1):
        raise ValueError(f"keep_last must be an int >= 1 or None (keep all), got {keep_last!r}")
    if not _is_count(keep_best) or keep_best < 0:
        raise ValueError(f"keep_best must be an int >= 0, got {keep_best!r}")
    if best_metric is not None and not isinstance(best_metric, str):
        raise ValueError(
            f"best_metric must be the name (a str) of a metric given to save(..., metrics=...), "
            f"got {best_metric!r}"
        )
    if keep_best and not best_metric:
        raise ValueError("best_metric: keep_best > 0 needs the name of the metric to rank by")
    if best_mode not in ("max", "min"):
        raise ValueError(f"best_mode must be 'max' or 'min', got {best_mode!r}")


def _is_count(value: object) -> bool:
    return whole_number(value) is not None  # True is no count; numpy.int64 is one


def _rankable(value: object) -> bool:
    number = real_number(value)
    return number is not None and math.isfinite(number)


def apply_retention(
    root: str,
    *,
    keep_last: int | None,
    keep_best: int = 0,
    best_metric: str | None = None,
    best_mode: str = "max",
) -> list[int]:
    """Delete the committed steps the policy does not keep, and torn steps older than the newest.

    ``keep_last=None`` keeps everything. A torn step newer than every committed one is left alone:
    it may be a save still being written. While a step in a newer format than this version
    reads is there (a newer kfp-spot wrote it), nothing is deleted: it is no damage, and which
    steps it ranks among is not known here; a warning names it and the fix.

    Returns:
        The committed steps deleted.
    """
    if keep_last is None:
        return []
    try:
        manifests = checkpoints.committed_steps(root)
    except checkpoints.CheckpointFormatError as exc:
        log.warning("retention deletes no step: %s", exc)
        return []
    committed = [m.step for m in manifests]
    keep = set(committed[-keep_last:])
    if keep_best and best_metric:
        metric = best_metric
        # NaN (a diverged loss) compares false with everything, which leaves a sort's order
        # arbitrary: the best step could be deleted. Steps without a finite number never rank.
        ranked = [m for m in manifests if _rankable((m.metadata.get("metrics") or {}).get(metric))]
        ranked.sort(key=lambda m: m.metadata["metrics"][metric], reverse=best_mode == "max")
        keep.update(m.step for m in ranked[:keep_best])
    newest = committed[-1] if committed else None
    removed = []
    for step in checkpoints.list_steps(root):
        torn_and_old = step not in committed and newest is not None and step < newest
        if (step in committed and step not in keep) or torn_and_old:
            checkpoints.delete_step(root, step)
            log.debug("retention: removed step %d", step)
            if step in committed:
                removed.append(step)
    return removed
