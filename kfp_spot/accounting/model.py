"""The accounting model: typed attempts, one definition of a preemption and of every figure.

An :class:`Attempt` is one billed run of a job's code on its VMs (the service restarts a job after
a Spot preemption: each restart is a new attempt). :func:`summarize` turns attempts into the one
:class:`Summary` that the job report, the run report (Markdown and PNG) and ``kfp-spot run``'s
printout all show. Definitions (also in docs/reports.md):

- **preemption**: an attempt that ended ``PREEMPTED`` or ``EMULATOR_RESTARTED`` (the emulator
  stopped under it; the job carried on as after a preemption), and each worker VM that was
  preempted and replaced while its attempt ran on (per-VM preemption: the job slowed down but
  did not stop). An attempt that ended ``UNKNOWN`` (a trainer's record never closed and no
  notice on it: killed without one) is not.
- **paid**: each attempt's billable seconds at its strategy's rate (Spot for SPOT, on-demand for
  every other strategy). **on-demand**: the same seconds at on-demand rates. **savings**: on-demand
  minus paid.
- **work lost**: for an attempt that did not finish, its billed time after the last checkpoint
  committed during it; all of it when it committed none *and* the trainer keeps attempt records
  (so a commit would be known); unknown otherwise. **goodput**: (billable - lost) / billable,
  unknown when any loss is.

Strings appear only at the edges (``from_json``/``to_json``); inside, reasons are enums.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kfp_spot import machines
from kfp_spot.accounting.fields import enum_member
from kfp_spot.accounting.pricing import AttemptCost, is_spot, spot_range

UNKNOWN_END = "ended without a record of why"
"""What an attempt that ended UNKNOWN did: it is not counted as a preemption."""


class EndReason(str, enum.Enum):
    """How a billed attempt ended."""

    SUCCEEDED = "SUCCEEDED"
    PREEMPTED = "PREEMPTED"
    EMULATOR_RESTARTED = "EMULATOR_RESTARTED"  # the emulator stopped under it: a preemption
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    RUNNING = "RUNNING"  # not ended (yet)
    UNDEPLOYED = "UNDEPLOYED"  # a serving replica stopped because its model was undeployed
    UNKNOWN = "UNKNOWN"  # ended, and nothing recorded why (a trainer killed without notice)

    def __str__(self) -> str:
        return self.value

    @property
    def is_preemption(self) -> bool:
        """The one definition of a preemption."""
        return self in (EndReason.PREEMPTED, EndReason.EMULATOR_RESTARTED)

    @property
    def described(self) -> str:
        """The reason as a report's cell shows it: UNKNOWN says what it means."""
        if self is EndReason.UNKNOWN:
            return f"{self.value} ({UNKNOWN_END})"
        return str(self.value)

    @property
    def keeps_all_work(self) -> bool:
        """Whether none of the attempt's time can have been lost (finished, or still running)."""
        return self in (EndReason.SUCCEEDED, EndReason.RUNNING)

    @classmethod
    def parse(cls, value: Any) -> EndReason:
        """The reason named by ``value`` (a ledger's ``endReason``); UNKNOWN for anything else."""
        aliases = {"PREEMPTION": cls.PREEMPTED, "STOCKOUT": cls.PREEMPTED, "ERROR": cls.FAILED}
        return enum_member(cls, str(value or "").strip().upper(), aliases, cls.UNKNOWN)


class Source(str, enum.Enum):
    """Where a summary's attempts came from, best first."""

    LEDGER = "ledger"  # the service's billing rows (the emulator serves them)
    ATTEMPT_RECORDS = "attempt-records"  # what the trainer wrote under <checkpoints>/_attempts
    JOB_TIMESTAMPS = "job-timestamps"  # each CustomJob's start and end: one row per job

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class VmRuns:
    """One replica's VM during an attempt (from a ledger with per-VM rows).

    Attributes:
        replica: Vertex's replica name, e.g. ``workerpool1-0``.
        runs: ``(start, end)`` of each time the VM ran (``end`` None while it runs); a gap between
            two runs is a preemption the attempt rode out, the VM away and unbilled.
    """

    replica: str
    runs: tuple[tuple[float, float | None], ...] = ()

    @property
    def replacements(self) -> int:
        """How many times this VM was preempted and replaced within the attempt."""
        return max(0, len(self.runs) - 1)


@dataclass(frozen=True)
class Attempt:
    """One billed attempt of a CustomJob.

    Attributes:
        job_name: the CustomJob's resource name.
        number: 1-based within its job (0 when the source does not say).
        strategy: the ``Scheduling.Strategy`` name it ran under (SPOT, STANDARD, FLEX_START...).
        start: when it started RUNNING (epoch seconds), if known.
        end: when it stopped, if it did.
        end_reason: how it ended.
        billable_seconds: RUNNING time (queued and preempted time is free).
        queued_seconds: time waiting for capacity first (the ledger only).
        machine_type: the primary pool's machine type, when known.
        replica_count: replicas of every pool (0 when unknown).
        cost: what its billable time costs; None when a price is unknown.
        first_step: the checkpoint step it resumed from (from the trainer's records).
        last_step: the last step it committed.
        lost_seconds: billed time after its last commit; None when unknown.
        vms: each replica's VM, when the source has per-VM detail (the emulator's ledger).
    """

    job_name: str
    number: int
    strategy: str
    start: float | None
    end: float | None
    end_reason: EndReason
    billable_seconds: float
    queued_seconds: float | None = None
    machine_type: str = ""
    replica_count: int = 0
    cost: AttemptCost | None = None
    first_step: int | None = None
    last_step: int | None = None
    lost_seconds: float | None = 0.0
    vms: tuple[VmRuns, ...] = ()

    @property
    def is_preemption(self) -> bool:
        """See :attr:`EndReason.is_preemption`."""
        return self.end_reason.is_preemption

    @property
    def vm_preemptions(self) -> int:
        """Worker VMs preempted and replaced while this attempt ran on."""
        return sum(vm.replacements for vm in self.vms)

    @property
    def preemptions(self) -> int:
        """The preemptions this attempt counts for (its own, if it was one, plus its VMs')."""
        return int(self.is_preemption) + self.vm_preemptions

    @property
    def job_id(self) -> str:
        """The last segment of the job's resource name."""
        return self.job_name.rsplit("/", 1)[-1]

    def to_json(self) -> dict[str, Any]:
        """The attempt as the job report's JSON lists it (snake_case, enums as strings)."""
        return {
            "job_name": self.job_name,
            "attempt": self.number,
            "strategy": self.strategy,
            "start": self.start,
            "end": self.end,
            "end_reason": self.end_reason.value,
            "preemption": self.is_preemption,
            "vm_preemptions": self.vm_preemptions,
            "billable_seconds": self.billable_seconds,
            "queued_seconds": self.queued_seconds,
            "machine_type": self.machine_type,
            "replica_count": self.replica_count,
            "paid_usd": self.cost.paid_usd if self.cost else None,
            "spot_usd": self.cost.spot_usd if self.cost else None,
            "on_demand_usd": self.cost.on_demand_usd if self.cost else None,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "work_lost_seconds": self.lost_seconds,
        }


@dataclass(frozen=True)
class Costs:
    """What the attempts cost, summed (USD).

    Attributes:
        paid_usd: every attempt at its strategy's rate (Spot attempts at the table's estimate).
        on_demand_usd: the same billable time on demand.
        paid_low_usd: ``paid_usd`` with every Spot attempt at 91% off on-demand.
        paid_high_usd: ... at 60% off (the other end of Google's stated Spot discounts).
        spot_estimated: whether any of ``paid_usd`` is at an estimated Spot rate.
    """

    paid_usd: float
    on_demand_usd: float
    paid_low_usd: float
    paid_high_usd: float
    spot_estimated: bool

    @property
    def savings_usd(self) -> float:
        """On-demand minus paid."""
        return self.on_demand_usd - self.paid_usd

    @property
    def savings_fraction(self) -> float | None:
        """Savings as a share of the on-demand cost; None when that is 0."""
        return self.savings_usd / self.on_demand_usd if self.on_demand_usd > 0 else None


@dataclass(frozen=True)
class Summary:
    """The one summary of a job's (or a run's) attempts.

    Attributes:
        source: where the attempts came from.
        attempts: every attempt, in order.
        preemptions: attempts that were preempted plus worker VMs preempted and replaced; None
            when the source cannot tell (job timestamps: the service restarts a job after a
            preemption without saying so).
        billable_seconds: Σ billable seconds.
        queued_seconds: Σ queued seconds (the ledger only, else None).
        lost_seconds: Σ work lost; None when any attempt's is unknown.
        costs: None when any attempt's price is unknown.
    """

    source: Source
    attempts: tuple[Attempt, ...] = field(default_factory=tuple)
    preemptions: int | None = 0
    billable_seconds: float = 0.0
    queued_seconds: float | None = None
    lost_seconds: float | None = 0.0
    costs: Costs | None = None

    @property
    def cost_unknown_reason(self) -> str:
        """Why ``costs`` is None, for a message: not every cause is a machine the table lacks."""
        unpriced = [a for a in self.attempts if a.cost is None]
        missing = sorted(
            {a.machine_type for a in unpriced if machines.machine_type(a.machine_type) is None}
            - {""}
        )
        if missing:
            return f"no price for machine type {', '.join(map(repr, missing))} in {PRICE_TABLE}"
        carried = {
            Source.LEDGER: "the billing ledger does not price them",
            Source.ATTEMPT_RECORDS: "the trainer's attempt records name no machine",
            Source.JOB_TIMESTAMPS: "the jobs' start and end times name no machine",
        }[self.source]
        return f"no price for {len(unpriced)} of {self.attempt_count} attempts ({carried})"

    @property
    def attempt_count(self) -> int:
        """How many attempts."""
        return len(self.attempts)

    @property
    def spot_attempts(self) -> int:
        """Attempts that ran on Spot VMs."""
        return sum(1 for a in self.attempts if is_spot(a.strategy))

    @property
    def kept_seconds(self) -> float | None:
        """Billable time whose progress was kept (or is still running)."""
        if self.lost_seconds is None:
            return None
        return max(0.0, self.billable_seconds - self.lost_seconds)

    @property
    def goodput(self) -> float | None:
        """Kept / billable time, in [0, 1]; None when unknown or nothing was billed."""
        kept = self.kept_seconds
        if kept is None or self.billable_seconds <= 0:
            return None
        return min(1.0, kept / self.billable_seconds)

    def to_json(self) -> dict[str, Any]:
        """Every figure (None where unknown) and every attempt, for JSON files."""
        costs = self.costs
        return {
            "source": self.source.value,
            "attempts": self.attempt_count,
            "preemptions": self.preemptions,
            "spot_attempts": self.spot_attempts,
            "billable_seconds": self.billable_seconds,
            "queued_seconds": self.queued_seconds,
            "work_lost_seconds": self.lost_seconds,
            "goodput": self.goodput,
            "cost_usd": costs.paid_usd if costs else None,
            "cost_usd_range": [costs.paid_low_usd, costs.paid_high_usd] if costs else None,
            "cost_on_demand_usd": costs.on_demand_usd if costs else None,
            "savings_usd": costs.savings_usd if costs else None,
            "spot_prices_estimated": costs.spot_estimated if costs else None,
            "attempt_detail": [a.to_json() for a in self.attempts],
        }


def total_costs(costs: Sequence[AttemptCost | None]) -> Costs | None:
    """The sum of priced runs (attempts, serving replica lives); None when any price is unknown."""
    known = [c for c in costs if c is not None]
    if len(known) != len(costs):
        return None
    low = high = 0.0
    for cost in known:
        if cost.spot:
            lo, hi = spot_range(cost.on_demand_usd)
            low, high = low + round(lo, 6), high + round(hi, 6)
        else:
            low, high = low + cost.paid_usd, high + cost.paid_usd
    return Costs(
        paid_usd=math.fsum(c.paid_usd for c in known),
        on_demand_usd=math.fsum(c.on_demand_usd for c in known),
        paid_low_usd=low,
        paid_high_usd=high,
        spot_estimated=any(c.spot and c.on_demand_usd > 0 for c in known),
    )


def summarize(source: Source, attempts: Sequence[Attempt]) -> Summary:
    """Add up ``attempts`` (the definitions are in this module's docstring)."""
    attempts = tuple(attempts)
    costs = total_costs([a.cost for a in attempts])
    lost = [a.lost_seconds for a in attempts]
    queued = [a.queued_seconds for a in attempts]
    return Summary(
        source=source,
        attempts=attempts,
        preemptions=(
            None if source is Source.JOB_TIMESTAMPS else sum(a.preemptions for a in attempts)
        ),
        billable_seconds=math.fsum(a.billable_seconds for a in attempts),
        queued_seconds=(
            math.fsum(q for q in queued if q is not None)
            if attempts and all(q is not None for q in queued)
            else None
        ),
        lost_seconds=(
            None if any(x is None for x in lost) else math.fsum(x for x in lost if x is not None)
        ),
        costs=costs,
    )


def usd(value: float | None) -> str:
    """USD with six decimals (emulated runs cost fractions of a cent), or ``-``."""
    return "-" if value is None else f"${value:,.6f}"


PRICE_TABLE = "kfp_spot/data/machines.csv"
UNKNOWN_PRICE = f"a machine type has no price in {PRICE_TABLE}"


def describe_cost(costs: Costs | None, unknown: str = UNKNOWN_PRICE) -> str:
    """One line: what was paid (Spot part an estimate, with its range), on-demand, savings.

    ``unknown``: why the cost is unknown when ``costs`` is None (``Summary.cost_unknown_reason``).
    """
    if costs is None:
        return f"cost unknown ({unknown})"
    text = f"{usd(costs.paid_usd)}"
    if costs.spot_estimated:
        low, high = usd(costs.paid_low_usd), usd(costs.paid_high_usd)
        text += f" (Spot estimate; {low}-{high} at 60-91% off)"
    text += f" vs {usd(costs.on_demand_usd)} on demand"
    if costs.savings_fraction is not None:
        text += f", saved {usd(costs.savings_usd)} ({costs.savings_fraction:.0%})"
    return text
