"""Preemption drills: take Spot capacity back from a running job at a meaningful moment.

A drill watches a job's checkpoint directory and preempts the job through the emulator once the
attempt has committed a new checkpoint, so every preemption in a demo or test provably lands after
saved progress (no sleep-and-hope timing): the next attempt must resume from a step > 0.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kfp_spot import checkpoints

log = logging.getLogger(__name__)


class CheckpointPreemptionDrill:
    """Preempt the running job ``count`` times, each time after a new checkpoint is committed.

    Args:
        checkpoint_root: the job's checkpoint directory (``<baseOutputDirectory>/checkpoints``).
        running_jobs: returns the resource names of jobs that are RUNNING now.
        preempt: preempts one job by resource name (``Emulator.preempt``).
        count: how many preemptions to cause.
        poll_seconds: how often to look.
    """

    def __init__(
        self,
        checkpoint_root: str,
        running_jobs: Callable[[], list[str]],
        preempt: Callable[[str], None],
        *,
        count: int = 1,
        poll_seconds: float = 0.2,
    ) -> None:
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        if poll_seconds <= 0:
            raise ValueError(f"poll_seconds must be > 0, got {poll_seconds}")
        self._root = checkpoint_root
        self._running_jobs = running_jobs
        self._preempt = preempt
        self._count = count
        self._poll = poll_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="preemption-drill", daemon=True)
        self.preempted_at_steps: list[int] = []

    def __enter__(self) -> CheckpointPreemptionDrill:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        last_step = -1
        while len(self.preempted_at_steps) < self._count and not self._stop.wait(self._poll):
            manifest = checkpoints.latest(self._root, check_hashes=False)
            if manifest is None or manifest.step <= last_step:
                continue
            jobs = self._running_jobs()
            if not jobs:
                continue
            for job in jobs:
                log.info("drill: preempting %s after checkpoint step %d", job, manifest.step)
                self._preempt(job)
            self.preempted_at_steps.append(manifest.step)
            last_step = manifest.step
