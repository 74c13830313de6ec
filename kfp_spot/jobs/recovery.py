"""The recovery ladder: what to do after each CustomJob ends, with separate budgets.

Preemptions and capacity are the weather, not bugs: a Spot job the service gave up on
(PREEMPTED_EXHAUSTED), one that never found capacity (CAPACITY) or one the service failed for its
own reasons (SERVICE_ERROR) is resubmitted on the same checkpoint directory, so training resumes,
up to ``max_resubmissions`` times. A job whose code failed (USER_ERROR) is not retried at all: the
same code would fail the same way and every retry costs money. After ``fallback_after`` Spot
submissions that ran out of Spot capacity (or once past ``deadline_seconds``) the ladder steps
down to ``fallback_strategy`` (STANDARD or FLEX_START) and stays there. (SkyPilot's managed jobs
keep the same two budgets apart: ``max_restarts_on_errors`` for user code, none for preemptions.)

Regions: with ``regions`` (an ordered list), a Spot job that ran out of capacity in one region is
resubmitted in the next one, on the newest verified checkpoint; after the last region the order
starts again at the first. A region is out of Spot capacity when a create there was refused for
capacity or quota, when its job did not start within ``region_wait_seconds``, or when its job's
Spot restarts were spent (PREEMPTED_EXHAUSTED); with ``region_policy=EAGER`` also at its first
preemption (SkyPilot's EAGER_NEXT_REGION: a preemption says capacity is scarce there). Spot is
tried in every region before ``fallback_strategy`` runs anywhere: the fallback waits until each
region had a Spot job run out of capacity, and then runs in the first region (the home region).
A user error is never retried, in this region or another. :func:`plan` gives the order.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kfp_spot import fs, vertex
from kfp_spot.jobs.inputs import LaunchInputError, checked, parse_strategy
from kfp_spot.jobs.outcome import Classified, Outcome
from kfp_spot.jobs.strategy import FALLBACK_STRATEGIES, Strategy

log = logging.getLogger(__name__)

RECOVERABLE = frozenset({Outcome.PREEMPTED_EXHAUSTED, Outcome.CAPACITY, Outcome.SERVICE_ERROR})
# Outcomes that say Spot capacity ran out, and so count towards fallback_after.
SPOT_EXHAUSTION = frozenset({Outcome.PREEMPTED_EXHAUSTED, Outcome.CAPACITY})
STATE_FORMAT = "kfp-spot-launcher/1"


class RegionPolicy(str, enum.Enum):
    """When a launch with several regions leaves a region's Spot capacity for the next one."""

    STAY = "STAY"  # once the region is out of Spot capacity (refused, no start, restarts spent)
    EAGER = "EAGER"  # also at the first preemption there

    def __str__(self) -> str:
        return self.value


REGION_POLICIES = tuple(RegionPolicy)


def parse_region_policy(value: object) -> RegionPolicy:
    """``value`` (a :class:`RegionPolicy` or its name, any case) as a region policy.

    Raises:
        LaunchInputError: naming ``region_policy`` and what it may be.
    """
    if isinstance(value, RegionPolicy):
        return value
    if isinstance(value, str) and value.upper() in RegionPolicy.__members__:
        return RegionPolicy(value.upper())
    raise LaunchInputError(
        "region_policy", f"expected one of {', '.join(REGION_POLICIES)}, got {vertex.show(value)}"
    )


@dataclass(frozen=True)
class RecoveryPolicy:
    """The budgets, the fallback rung and the regions of one launch."""

    max_resubmissions: int = 2
    fallback_after: int = 0  # 0: never leave Spot; n: after n Spot submissions ran out of capacity
    fallback_strategy: Strategy = Strategy.STANDARD
    deadline_seconds: float = 0.0  # 0: none; else past this many seconds, stop waiting for Spot
    regions: Sequence[str] = ()  # the order Spot is tried in; empty: only the job's location
    region_policy: RegionPolicy = RegionPolicy.STAY
    region_wait_seconds: float = 0.0  # 0: wait as long as the service does for a Spot start

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
        if isinstance(self.regions, str):
            raise LaunchInputError(
                "regions", f"expected a list of regions, got the text {vertex.show(self.regions)}"
            )
        regions = tuple(self.regions)
        for region in regions:
            checked("regions", vertex.check_region, region)
        repeated = sorted({r for r in regions if regions.count(r) > 1})
        if repeated:
            raise LaunchInputError(
                "regions", f"names {', '.join(repeated)} more than once; list each region once"
            )
        object.__setattr__(self, "regions", regions)
        object.__setattr__(self, "region_policy", parse_region_policy(self.region_policy))
        if self.region_wait_seconds < 0:
            raise LaunchInputError(
                "region_wait_seconds",
                f"must be >= 0 (0 = wait as the service does), got {self.region_wait_seconds}",
            )

    def order(self, location: str) -> tuple[str, ...]:
        """The regions Spot is tried in: ``regions``, or only ``location`` when it is empty."""
        return tuple(self.regions) or (location,)


@dataclass
class Submission:
    """One CustomJob the launcher submitted (or is about to)."""

    token: str  # the submission label; finds the job if the create's answer was lost
    strategy: Strategy
    job_name: str = ""
    region: str = ""  # where it runs; "" in a state written before regions: the first region
    outcome: Outcome | None = None  # set once the job ended
    message: str = ""
    submitted_at: float = 0.0
    ended_at: float = 0.0
    resume_step: int | None = None  # the newest committed checkpoint step when submitted
    copied_bytes: int = 0  # checkpoint bytes copied into its region's directory before it ran
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
    """What the ladder says to do next: resubmit on ``strategy`` in ``region``, or (None) stop."""

    strategy: Strategy | None
    reason: str = ""
    region: str = ""  # "" when it stops

    @property
    def resubmit(self) -> bool:
        """Whether to submit another CustomJob."""
        return self.strategy is not None


def past_deadline(policy: RecoveryPolicy, started_at: float, now: float) -> bool:
    """Whether the launch has passed its optional deadline for Spot."""
    return policy.deadline_seconds > 0 and now - started_at >= policy.deadline_seconds


def region_of(sub: Submission, order: Sequence[str]) -> str:
    """The region ``sub`` ran in (a record from before regions ran in the first one)."""
    return sub.region or order[0]


def _next_region(order: Sequence[str], region: str) -> str:
    if region not in order:
        return order[0]
    return order[(order.index(region) + 1) % len(order)]


def decide(
    policy: RecoveryPolicy,
    history: list[Submission],
    *,
    started_at: float,
    now: float,
    location: str = "",
) -> Decision:
    """The next step (strategy and region) after the last submission in ``history`` ended.

    Args:
        policy: the budgets and regions.
        history: every submission of this launch, oldest first; the last one has ended.
        started_at: when the launch began (same clock as ``now``).
        now: the current time.
        location: the job's ``location`` input: the only region when ``policy.regions`` is
            empty (default: the region the last submission ran in).
    """
    last = history[-1] if history else None
    if last is None or last.outcome is None:
        raise ValueError("decide() needs a history whose last submission has ended")
    order = policy.order(location or last.region or "")
    here = region_of(last, order)
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
        return Decision(last.strategy, f"{outcome.value} on {last.strategy}; resubmitting", here)
    spot_out = [s for s in history if s.strategy is Strategy.SPOT and s.outcome in SPOT_EXHAUSTION]
    tried = {region_of(s, order) for s in spot_out}
    if policy.fallback_after and len(spot_out) >= policy.fallback_after and tried >= set(order):
        return Decision(
            policy.fallback_strategy,
            f"{len(spot_out)} Spot submission(s) ran out of capacity "
            f"(fallback_after={policy.fallback_after})"
            + (f", in each of {', '.join(order)}" if len(order) > 1 else "")
            + f"; falling back to {policy.fallback_strategy}"
            + (f" in {order[0]}" if len(order) > 1 else ""),
            order[0],
        )
    if past_deadline(policy, started_at, now):
        return Decision(
            policy.fallback_strategy,
            f"past deadline_seconds={policy.deadline_seconds:g}; falling back to "
            f"{policy.fallback_strategy}" + (f" in {order[0]}" if len(order) > 1 else ""),
            order[0],
        )
    if outcome in SPOT_EXHAUSTION and len(order) > 1:
        target = _next_region(order, here)
        return Decision(
            Strategy.SPOT, f"{outcome.value} in {here}; resubmitting on Spot in {target}", target
        )
    return Decision(Strategy.SPOT, f"{outcome.value}; resubmitting on Spot", here)


def plan(policy: RecoveryPolicy, location: str) -> list[tuple[str, Strategy]]:
    """The (region, strategy) pairs a launch tries when every Spot job runs out of capacity.

    What :func:`decide` gives, one submission after another, for a launch whose every job ends
    CAPACITY, up to ``max_resubmissions`` (docs/launcher.md shows it as a table).
    """
    history: list[Submission] = []
    region, strategy = policy.order(location)[0], Strategy.SPOT
    while True:
        history.append(Submission("", strategy, region=region, outcome=Outcome.CAPACITY))
        decision = decide(policy, history, started_at=0.0, now=0.0, location=location)
        if decision.strategy is None:
            return [(region_of(s, policy.order(location)), s.strategy) for s in history]
        region, strategy = decision.region, decision.strategy


def leave_region(
    policy: RecoveryPolicy,
    *,
    regions: int,
    strategy: Strategy,
    preempted: bool,
    waiting_seconds: float,
) -> Classified | None:
    """Whether to give up the Spot job being watched now, to go on in the next region.

    Pure: the launcher asks at every poll. A job is given up (the outcome it is recorded with, so
    :func:`decide` moves on) when the launch has another region to go to and either
    ``region_wait_seconds`` passed while the job waited for Spot VMs (``waiting_seconds``: since
    it was created, or since it last ran) or, with ``region_policy=EAGER``, it was preempted.

    Args:
        policy: the launch's policy.
        regions: how many regions the launch may run in.
        strategy: the job's strategy (only Spot jobs are given up).
        preempted: whether the job was preempted at least once.
        waiting_seconds: how long the job has been waiting for VMs without running (0 if running).
    """
    if strategy is not Strategy.SPOT or regions < 2:
        return None
    if preempted and policy.region_policy is RegionPolicy.EAGER:
        return Classified(
            Outcome.PREEMPTED_EXHAUSTED,
            "preempted; region_policy=EAGER moves on to the next region at the first preemption",
        )
    wait = policy.region_wait_seconds
    if wait and waiting_seconds >= wait:
        return Classified(
            Outcome.CAPACITY if not preempted else Outcome.PREEMPTED_EXHAUSTED,
            f"no Spot VMs within region_wait_seconds={wait:g}",
        )
    return None


def waiting_since(
    *, running: bool, ever_ran: bool, before: float | None, created_at: float, now: float
) -> float:
    """Since when the watched job has waited for VMs, for ``region_wait_seconds`` (pure).

    Args:
        running: whether the job is RUNNING now.
        ever_ran: whether it was RUNNING at some time (``startTime`` is set).
        before: this function's answer at the launcher's previous poll of the job (None: the
            first poll): the last time it was seen RUNNING, or when its wait was first counted.
        created_at: when it was submitted.
        now: the current time.

    A job RUNNING now waits for nothing. One this launcher saw RUNNING has waited since then. One
    that never ran has waited since it was created. One that ran but was never seen RUNNING here
    (a restarted launcher reattaching to a job that is restarting after a preemption) stopped
    running at a moment nobody recorded: its wait counts from now, as counting from its create
    would give up a job that may have been running until a moment ago.
    """
    if running:
        return now
    if before is not None:
        return before
    return now if ever_ran else created_at


@dataclass
class LaunchState:
    """What a restarted launcher needs to carry on: the run it belongs to and its submissions."""

    run_key: str
    started_at: float  # wall clock (time.time()) of the first submission
    submissions: list[Submission] = field(default_factory=list)
    copied_back_bytes: int = 0  # the newest step and the model copied home at the end

    def to_json(self) -> dict[str, Any]:
        """The state file's document."""
        return {
            "format": STATE_FORMAT,
            "run_key": self.run_key,
            "started_at": self.started_at,
            "submissions": [s.to_json() for s in self.submissions],
            "copied_back_bytes": self.copied_back_bytes,
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
            copied_back_bytes=int(doc.get("copied_back_bytes") or 0),
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
