"""The recovery ladder: what to do after each CustomJob ends, with separate budgets.

Preemptions and capacity are the weather, not bugs: a Spot job the service gave up on
(PREEMPTED_EXHAUSTED), one that never found capacity (CAPACITY) or one the service failed for its
own reasons (SERVICE_ERROR) is resubmitted on the same checkpoint directory, so training resumes,
up to ``max_resubmissions`` times. A job whose code failed (USER_ERROR) is not retried at all: the
same code would fail the same way and every retry costs money. After ``fallback_after`` Spot
submissions that ran out of Spot capacity (or once past ``deadline_seconds``) the ladder steps
down to ``fallback_strategy`` (STANDARD or FLEX_START) and stays there. (SkyPilot's managed jobs
keep the same two budgets apart: ``max_restarts_on_errors`` for user code, none for preemptions.)
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from kfp_spot import fs
from kfp_spot.jobs.inputs import LaunchInputError, parse_strategy
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.jobs.strategy import FALLBACK_STRATEGIES, Strategy

log = logging.getLogger(__name__)

RECOVERABLE = frozenset({Outcome.PREEMPTED_EXHAUSTED, Outcome.CAPACITY, Outcome.SERVICE_ERROR})
# Outcomes that say Spot capacity ran out, and so count towards fallback_after.
SPOT_EXHAUSTION = frozenset({Outcome.PREEMPTED_EXHAUSTED, Outcome.CAPACITY})
STATE_FORMAT = "kfp-spot-launcher/1"


@dataclass(frozen=True)
class RecoveryPolicy:
    """The budgets and the fallback rung of one launch."""

    max_resubmissions: int = 2
    fallback_after: int = 0  # 0: never leave Spot; n: after n Spot submissions ran out of capacity
    fallback_strategy: Strategy = Strategy.STANDARD
    deadline_seconds: float = 0.0  # 0: none; else past this many seconds, stop waiting for Spot

    def __post_init__(self) -> None:
        if self.max_resubmissions < 0:
            raise LaunchInputError(
                "max_resubmissions", f"must be >= 0, got {self.max_resubmissions}"
            )
        if self.fallback_after < 0:
            raise LaunchInputError(
                "fallback_after", f"must be >= 0 (0 = never fall back), got {self.fallback_after}"
            )
        # A name is taken too (the policy is public API): held as the enum either way.
        strategy = parse_strategy("fallback_strategy", self.fallback_strategy, FALLBACK_STRATEGIES)
        object.__setattr__(self, "fallback_strategy", strategy)
        if self.deadline_seconds < 0:
            raise LaunchInputError(
                "deadline_seconds", f"must be >= 0 (0 = no deadline), got {self.deadline_seconds}"
            )


@dataclass
class Submission:
    """One CustomJob the launcher submitted (or is about to)."""

    token: str  # the submission label; finds the job if the create's answer was lost
    strategy: Strategy
    job_name: str = ""
    outcome: Outcome | None = None  # set once the job ended
    message: str = ""
    submitted_at: float = 0.0
    ended_at: float = 0.0
    resume_step: int | None = None  # the newest committed checkpoint step when submitted
    create_time: str = ""
    start_time: str = ""
    end_time: str = ""

    def to_json(self) -> dict[str, Any]:
        """The state file's record: enums as their names, ``outcome`` "" until the job ended."""
        doc = asdict(self)
        doc["strategy"] = self.strategy.value
        doc["outcome"] = self.outcome.value if self.outcome is not None else ""
        return doc

    @classmethod
    def from_json(cls, doc: object) -> Submission:
        """Parse a state file's record (fields this version does not know are ignored).

        Raises:
            ValueError: the record, its strategy or its outcome is not one.
            KeyError: it has no token or strategy.
        """
        if not isinstance(doc, dict):
            raise ValueError(f"a submission must be a JSON object, got {doc!r}")
        fields = {k: v for k, v in doc.items() if k in cls.__dataclass_fields__}
        fields["strategy"] = Strategy.from_api(str(fields["strategy"]))
        fields["outcome"] = Outcome(fields["outcome"]) if fields.get("outcome") else None
        return cls(**fields)


@dataclass(frozen=True)
class Decision:
    """What the ladder says to do next: resubmit on ``strategy``, or (None) stop."""

    strategy: Strategy | None
    reason: str = ""

    @property
    def resubmit(self) -> bool:
        """Whether to submit another CustomJob."""
        return self.strategy is not None


def past_deadline(policy: RecoveryPolicy, started_at: float, now: float) -> bool:
    """Whether the launch has passed its optional deadline for Spot."""
    return policy.deadline_seconds > 0 and now - started_at >= policy.deadline_seconds


def decide(
    policy: RecoveryPolicy, history: list[Submission], *, started_at: float, now: float
) -> Decision:
    """The next step after the last submission in ``history`` ended.

    Args:
        policy: the budgets.
        history: every submission of this launch, oldest first; the last one has ended.
        started_at: when the launch began (same clock as ``now``).
        now: the current time.
    """
    last = history[-1] if history else None
    if last is None or last.outcome is None:
        raise ValueError("decide() needs a history whose last submission has ended")
    outcome = last.outcome
    if outcome not in RECOVERABLE:
        return Decision(None, f"{outcome.value} is not retried")
    resubmissions = len(history) - 1
    if resubmissions >= policy.max_resubmissions:
        return Decision(
            None,
            f"{outcome.value} and the resubmission budget is spent "
            f"({resubmissions} of max_resubmissions={policy.max_resubmissions})",
        )
    if last.strategy in FALLBACK_STRATEGIES:
        return Decision(last.strategy, f"{outcome.value} on {last.strategy}; resubmitting")
    exhausted = sum(
        1 for s in history if s.strategy is Strategy.SPOT and s.outcome in SPOT_EXHAUSTION
    )
    if policy.fallback_after and exhausted >= policy.fallback_after:
        return Decision(
            policy.fallback_strategy,
            f"{exhausted} Spot submission(s) ran out of capacity "
            f"(fallback_after={policy.fallback_after}); falling back to {policy.fallback_strategy}",
        )
    if past_deadline(policy, started_at, now):
        return Decision(
            policy.fallback_strategy,
            f"past deadline_seconds={policy.deadline_seconds:g}; falling back to "
            f"{policy.fallback_strategy}",
        )
    return Decision(Strategy.SPOT, f"{outcome.value}; resubmitting on Spot")


@dataclass
class LaunchState:
    """What a restarted launcher needs to carry on: the run it belongs to and its submissions."""

    run_key: str
    started_at: float  # wall clock (time.time()) of the first submission
    submissions: list[Submission] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The state file's document."""
        return {
            "format": STATE_FORMAT,
            "run_key": self.run_key,
            "started_at": self.started_at,
            "submissions": [s.to_json() for s in self.submissions],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> LaunchState:
        """Parse a state document; raises ValueError when it is not one."""
        if doc.get("format") != STATE_FORMAT:
            raise ValueError(f"not a launcher state (format {doc.get('format')!r})")
        return cls(
            run_key=str(doc["run_key"]),
            started_at=float(doc["started_at"]),
            submissions=[Submission.from_json(s) for s in doc["submissions"]],
        )


def state_uri(base_output_directory: str, run_key: str) -> str:
    """Where the launch state of ``run_key`` lives: next to the job's outputs."""
    digest = hashlib.sha256(run_key.encode()).hexdigest()[:16]
    return fs.join(base_output_directory, "_launcher", f"{digest}.json")


def load_state(uri: str, run_key: str) -> LaunchState | None:
    """The saved state of ``run_key``, or None (missing, unreadable, or another run's)."""
    filesystem, path = fs.filesystem(uri)
    try:
        with filesystem.open(path, "rb") as handle:
            state = LaunchState.from_json(json.loads(handle.read()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring unreadable launcher state %s: %s", uri, exc)
        return None
    if state.run_key != run_key:
        log.warning("ignoring launcher state %s of another run (%s)", uri, state.run_key)
        return None
    return state


def save_state(uri: str, state: LaunchState) -> None:
    """Write the state whole (a local rename; one object PUT on gs://)."""
    data = json.dumps(state.to_json(), indent=1, sort_keys=True).encode()
    fs.atomic_write(uri, data)
