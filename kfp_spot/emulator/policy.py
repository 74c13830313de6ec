"""When Spot VMs are preempted without being asked: a whole attempt, or one VM at a time.

Two kinds of automatic preemption, both for Spot jobs only:

- **attempt-level** (``preempt_at``, ``preempt_every``): the attempt is preempted, every VM at
  once, and the job runs again as its next attempt (what Vertex does when the primary replica's
  VM is reclaimed);
- **per VM** (``preempt_vm_at``, ``preempt_vm_every``): each replica's VM has its own clock. A
  worker's VM is replaced while the others keep running (unless the job sets
  ``scheduling.restartJobOnWorkerRestart``); the primary replica's VM takes the attempt with it.

A VM's *lives* are counted over the whole job: life 1 is the replica's first process, and every
start of that replica after a preemption (of the VM or of the attempt) is the next life.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

REPLICA_NAME = re.compile(r"^workerpool([0-3])-(0|[1-9][0-9]*)$")


@dataclass(frozen=True)
class PreemptionPolicy:
    """When Spot attempts and VMs are preempted without being asked.

    Attributes:
        preempt_at: attempt *i* (1-based) is preempted ``preempt_at[i-1]`` seconds after it
            started RUNNING.
        preempt_every: for attempts past ``preempt_at``: preempt after an exponentially
            distributed time with this mean (seconds); None for never.
        seed: makes the random times reproducible (same job order, same times).
        preempt_vm_at: replica name (``workerpool1-0``) -> offsets: life *i* of that replica's
            VM is preempted ``offsets[i-1]`` seconds after that life started running; later
            lives run unpreempted unless ``preempt_vm_every`` is set.
        preempt_vm_every: mean seconds between preemptions of each VM (exponential, drawn per
            life of every replica, past its ``preempt_vm_at`` list); None for never.
        vm_downtime: seconds a preempted worker's VM stays away (no replacement yet, not billed)
            before its replacement starts.
    """

    preempt_at: tuple[float, ...] = ()
    preempt_every: float | None = None
    seed: int | None = None
    preempt_vm_at: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    preempt_vm_every: float | None = None
    vm_downtime: float = 0.0

    def _draw(self, key: str, mean: float) -> float:
        rng = random.Random(f"{self.seed}:{key}")
        if self.seed is None:
            rng.seed()
        return rng.expovariate(1.0 / mean)

    def delay(self, job_seq: int, attempt: int) -> float | None:
        """Seconds after RUNNING at which this attempt is preempted, or None."""
        if attempt <= len(self.preempt_at):
            return self.preempt_at[attempt - 1]
        if self.preempt_every:
            return self._draw(f"{job_seq}:{attempt}", self.preempt_every)
        return None

    def vm_delay(self, job_seq: int, replica: str, life: int) -> float | None:
        """When life ``life`` (1-based) of a replica's VM is preempted: seconds after it started.

        None: never (this life runs until the attempt ends).
        """
        offsets = self.preempt_vm_at.get(replica, ())
        if life <= len(offsets):
            return offsets[life - 1]
        if self.preempt_vm_every:
            return self._draw(f"{job_seq}:vm:{replica}:{life}", self.preempt_vm_every)
        return None

    @property
    def per_vm(self) -> bool:
        """Whether any VM is preempted on its own clock."""
        return bool(self.preempt_vm_at) or bool(self.preempt_vm_every)
