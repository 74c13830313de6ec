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
    """Preempt running attempts ``count`` times, each after it committed a checkpoint of its own.

    An attempt is preempted at most once, and only after the newest committed step has moved past
    the step that was newest when the drill first saw that attempt running, so every preemption
    lands after progress the attempt itself saved.

    Args:
        checkpoint_root: the job's checkpoint directory (``<baseOutputDirectory>/checkpoints``),
            or a function giving it for a job's resource name (for a pipeline whose jobs and
            their output directories are known only once they were submitted; None: not known
            just now, ask again at the next poll).
        running_attempts: returns ``(job resource name, attempt number)`` of attempts RUNNING now.
        preempt: preempts one job by resource name (``Emulator.preempt``).
        count: how many preemptions to cause.
        poll_seconds: how often to look.
        after_last: called with the job's resource name right after the ``count``-th preemption
            (a failover drill takes the region's Spot capacity away there).
    """

    def __init__(
        self,
        checkpoint_root: str | Callable[[str], str | None],
        running_attempts: Callable[[], list[tuple[str, int]]],
        preempt: Callable[[str], object],
        *,
        count: int = 1,
        poll_seconds: float = 0.2,
        after_last: Callable[[str], object] | None = None,
    ) -> None:
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        if poll_seconds <= 0:
            raise ValueError(f"poll_seconds must be > 0, got {poll_seconds}")
        self._root = checkpoint_root
        self._running_attempts = running_attempts
        self._preempt = preempt
        self._count = count
        self._after_last = after_last
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

    def _latest_step(self, job_name: str) -> int | None:
        """The newest committed step of the job (-1: none yet; None: unreadable just now)."""
        root = self._root if isinstance(self._root, str) else self._root(job_name)
        if root is None:
            return None
        try:
            manifest = checkpoints.latest(root, check_hashes=False) if root else None
        except OSError:  # being written or cleaned up right now: look again at the next poll
            return None
        except checkpoints.CheckpointFormatError as exc:  # committed, by a newer kfp-spot
            return exc.step
        return -1 if manifest is None else manifest.step

    def _loop(self) -> None:
        baseline: dict[tuple[str, int], int] = {}  # attempt -> newest step when first seen
        done: set[tuple[str, int]] = set()
        while len(self.preempted_at_steps) < self._count and not self._stop.wait(self._poll):
            attempts = [a for a in self._running_attempts() if a not in done]
            if not attempts:
                continue
            for attempt in attempts:
                step = self._latest_step(attempt[0])
                if step is None:
                    continue
                if attempt not in baseline:
                    baseline[attempt] = step
                elif step > baseline[attempt]:
                    log.info("drill: preempting %s attempt %d at step %d", *attempt, step)
                    self._preempt(attempt[0])
                    done.add(attempt)
                    self.preempted_at_steps.append(step)
                    if len(self.preempted_at_steps) == self._count:
                        if self._after_last is not None:
                            self._after_last(attempt[0])
                        return
