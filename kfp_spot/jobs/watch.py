"""The launcher's running commentary: each attempt's start and end as the backend sees them.

Vertex AI shows a Spot job as RUNNING through its restarts, so the job's state alone does not tell
the story. While the launcher waits, :class:`AttemptWatcher` looks at the job's attempts (the
emulator's ledger, or on Vertex the trainer's attempt records: ``Backend.observe``) on every state
change and every ``observe_every`` seconds, and logs each new attempt and each end, once:

    customJobs/12: attempt 1 started (SPOT, n1-standard-4 x1); newest checkpoint: none
    customJobs/12: attempt 1 was preempted after 12.3 s billed; newest checkpoint: step 9
    customJobs/12: attempt 2 started (SPOT, n1-standard-4 x1); newest checkpoint: step 9
    customJobs/12: attempt 2 succeeded after 20.1 s billed; newest checkpoint: step 30
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kfp_spot import checkpoints
from kfp_spot.accounting import Attempt, EndReason
from kfp_spot.accounting.model import UNKNOWN_END
from kfp_spot.checkpoints import storage_errors
from kfp_spot.jobs.backend import Backend
from kfp_spot.jobs.strategy import Strategy

log = logging.getLogger("kfp_spot.jobs.launcher")


class AttemptWatcher:
    """Logs the attempts of the job being waited on (see the module docstring).

    Args:
        backend: where the job runs.
        checkpoint_root: the job's checkpoint directory (for the newest committed step).
        clock: monotonic seconds (tests pass a fake).
    """

    def __init__(
        self,
        backend: Backend,
        checkpoint_root: str,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.checkpoint_root = checkpoint_root
        self._clock = clock
        self._job = ""
        self._strategy = ""
        self._since = 0.0
        self._next_look = 0.0
        self._started: set[tuple[str, int]] = set()
        self._ended: set[tuple[str, int]] = set()
        self._preempted: set[str] = set()  # jobs seen preempted (or restarted) at least once

    def watch(
        self,
        job_name: str,
        strategy: Strategy,
        submitted_at: float,
        *,
        backend: Backend | None = None,
        checkpoint_root: str = "",
    ) -> None:
        """Follow ``job_name`` from now on (in its region: ``backend``, ``checkpoint_root``)."""
        # The backend and the accounting speak the API's strategy names.
        self._job, self._strategy, self._since = job_name, strategy.value, submitted_at
        self.backend = backend or self.backend
        self.checkpoint_root = checkpoint_root or self.checkpoint_root
        self._next_look = 0.0

    @property
    def preempted(self) -> bool:
        """Whether the job being watched was seen preempted: an attempt ended so, or a second began.

        As current as the last look at its attempts (every state change, every ``observe_every``).
        """
        return self._job in self._preempted

    def poll(self, _job: object = None, changed: bool = False, *, force: bool = False) -> None:
        """Look at the attempts if it is time (or the job's state ``changed``, or ``force``)."""
        now = self._clock()
        if not self._job or not (force or changed or now >= self._next_look):
            return
        self._next_look = now + self.backend.observe_every
        for attempt in self.backend.observe(
            self._job, self._strategy, self.checkpoint_root, self._since
        ):
            self._report(attempt)

    def _report(self, attempt: Attempt) -> None:
        key = (attempt.job_name, attempt.number)
        ended = attempt.end_reason is not EndReason.RUNNING
        if attempt.number > 1 or attempt.end_reason in _PREEMPTIONS:
            self._preempted.add(attempt.job_name)
        if key not in self._started and attempt.start is not None:
            self._started.add(key)
            resumed = f"; resumes from step {attempt.first_step}" if attempt.first_step else ""
            log.info(
                "%s: attempt %d started (%s%s)%s; newest checkpoint: %s",
                _short(attempt.job_name),
                attempt.number,
                attempt.strategy or "strategy unknown",
                f", {attempt.machine_type} x{attempt.replica_count}"
                if attempt.machine_type
                else "",
                resumed,
                self._newest(),
            )
        if ended and key not in self._ended:
            self._ended.add(key)
            self._started.add(key)
            log.info(
                "%s: attempt %d %s after %.1f s billed; newest checkpoint: %s",
                _short(attempt.job_name),
                attempt.number,
                _ending(attempt.end_reason),
                attempt.billable_seconds,
                self._newest(),
            )

    def _newest(self) -> str:
        try:
            latest = checkpoints.latest(self.checkpoint_root, check_hashes=False)
        except storage_errors(ValueError) as exc:
            log.debug("cannot list %s: %s", self.checkpoint_root, exc)
            return "unknown"
        except checkpoints.CheckpointFormatError as exc:  # the job goes on: only a log line
            return f"step {exc.step}, in format {exc.found}, newer than this kfp-spot reads"
        return f"step {latest.step}" if latest else "none"


_PREEMPTIONS = frozenset({EndReason.PREEMPTED, EndReason.EMULATOR_RESTARTED})


def _short(job_name: str) -> str:
    return "/".join(job_name.split("/")[-2:]) or "the job"


def _ending(reason: EndReason) -> str:
    return {
        EndReason.SUCCEEDED: "succeeded",
        EndReason.PREEMPTED: "was preempted",
        EndReason.EMULATOR_RESTARTED: (
            "ended EMULATOR_RESTARTED (the emulator stopped under it; counted as a preemption)"
        ),
        EndReason.UNKNOWN: f"{UNKNOWN_END} (not counted as a preemption)",
    }.get(reason, f"ended {reason.value}")
