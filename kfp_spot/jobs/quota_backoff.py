"""How long to wait before creating a job again where the last creates were refused for quota.

A create refused with 429 RESOURCE_EXHAUSTED (a quota of the region: its Spot CPUs or GPUs, or
its requests per minute) is a CAPACITY outcome that :func:`kfp_spot.jobs.recovery.decide` may
resubmit. Resubmitted at once, the next create meets the same quota a second later and the
launch spends its ``max_resubmissions`` in seconds. Google's advice for 429 quota errors is a
retry with exponential intervals plus randomness, 30 s at the least (Service Usage's
troubleshooting page); :func:`quota_wait` says how long, from the launch's own history, so a
restarted launcher waits only what is left.

Pure: the launcher asks before each resubmission and sleeps what it answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kfp_spot.jobs.outcome import Outcome
from kfp_spot.jobs.recovery import Submission, region_of


@dataclass(frozen=True)
class QuotaBackoff:
    """Exponential intervals with jitter between creates refused for quota in one region.

    The ``n``-th refusal in a row waits ``min(maximum, initial * multiplier ** (n - 1))``
    stretched by up to ``jitter`` of itself (a random part, so that launches refused together
    do not come back together): never less than ``initial``, never more than
    ``maximum * (1 + jitter)``.
    """

    initial: float
    maximum: float
    multiplier: float = 2.0
    jitter: float = 0.5

    def step(self, refusals: int, draw: float) -> float:
        """The wait after ``refusals`` creates in a row were refused (``draw`` in [0, 1))."""
        if refusals < 1:
            return 0.0
        base = min(self.maximum, self.initial * self.multiplier ** (refusals - 1))
        return base * (1.0 + self.jitter * min(max(draw, 0.0), 1.0))


@dataclass(frozen=True)
class QuotaWait:
    """A wait before the next create in ``region``: ``seconds`` left, after ``refusals``."""

    seconds: float
    refusals: int
    region: str
    message: str  # the service's words for the last refusal


def refused_at_create(sub: Submission) -> bool:
    """Whether ``sub`` was refused when created for capacity or quota (no job was made)."""
    return not sub.job_name and sub.outcome is Outcome.CAPACITY


def quota_wait(
    backoff: QuotaBackoff,
    history: Sequence[Submission],
    region: str,
    *,
    order: Sequence[str],
    now: float,
    draw: float,
) -> QuotaWait | None:
    """How long to wait before the next create in ``region``; None when it may go at once.

    The refusals counted are the creates in ``region`` refused for quota since the launch last
    made a job anywhere (a job made says the quota let one through); refusals in other regions
    say nothing of this one's quota. The wait runs from the last refusal's end (``ended_at``).

    Args:
        backoff: the intervals.
        history: every submission of the launch, oldest first.
        region: where the next job is to be created.
        order: the launch's regions (a record from before regions ran in the first one).
        now: the current time, on the clock of ``ended_at``.
        draw: a uniform draw in [0, 1) for the jitter.
    """
    refused: list[Submission] = []
    for sub in reversed(history):
        if not refused_at_create(sub):
            if sub.job_name:
                break  # a job was made since: what came before is no longer the quota's state
            continue
        if region_of(sub, order) == region:
            refused.append(sub)
    if not refused:
        return None
    last = refused[0]
    left = backoff.step(len(refused), draw) - max(0.0, now - last.ended_at)
    if left <= 0:
        return None
    return QuotaWait(left, len(refused), region, last.message)
