"""When Spot attempts are preempted without being asked (``preempt_at``, ``preempt_every``)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class PreemptionPolicy:
    """When Spot attempts are preempted without being asked.

    Attributes:
        preempt_at: attempt *i* (1-based) is preempted ``preempt_at[i-1]`` seconds after it
            started RUNNING.
        preempt_every: for attempts past ``preempt_at``: preempt after an exponentially
            distributed time with this mean (seconds); None for never.
        seed: makes the random times reproducible (same job order, same times).
    """

    preempt_at: tuple[float, ...] = ()
    preempt_every: float | None = None
    seed: int | None = None

    def delay(self, job_seq: int, attempt: int) -> float | None:
        """Seconds after RUNNING at which this attempt is preempted, or None."""
        if attempt <= len(self.preempt_at):
            return self.preempt_at[attempt - 1]
        if self.preempt_every:
            rng = random.Random(f"{self.seed}:{job_seq}:{attempt}")
            if self.seed is None:
                rng.seed()
            return rng.expovariate(1.0 / self.preempt_every)
        return None
