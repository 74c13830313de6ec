"""Serving replica lives: what a Spot endpoint's replicas ran and cost, in the accounting's terms.

Each serving replica of a deployed model is one VM. A *life* is one run of that replica, from
its start to its stop (preempted, undeployed, cancelled, failed, or the emulator stopping under
it); the next start of the same replica is its next life. A life is billed for its running time
at its strategy's rate, priced by the same function as a training attempt
(:func:`kfp_spot.accounting.pricing.attempt_cost`), and summed with the same
:func:`~kfp_spot.accounting.model.total_costs`. A **preemption** is a life that ended
``PREEMPTED`` or ``EMULATOR_RESTARTED`` (:attr:`EndReason.is_preemption`).

Rows come from the emulator's serving ledger (``GET /emulator/v1/{endpoint}/ledger``'s
``lives``, ``run.json``'s ``serving``), camelCase; :func:`serving_lives` reads them with errors
that name the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kfp_spot.accounting.fields import AccountingError, number, parse_time
from kfp_spot.accounting.model import Costs, EndReason, total_costs
from kfp_spot.accounting.pricing import AttemptCost, is_spot
from kfp_spot.accounting.sources import row_cost

__all__ = ["ReplicaLife", "ServingSummary", "serving_lives", "summarize_serving"]


@dataclass(frozen=True)
class ReplicaLife:
    """One life of a serving replica (its VM from start to stop).

    Attributes:
        endpoint: the endpoint's resource name ("" when the row does not say).
        deployed_model_id: the DeployedModel it served.
        replica: the replica's index within the deployed model.
        life: 1-based, counted over the deployment (a replica's restart is its next life).
        strategy: ``SPOT`` or ``STANDARD``.
        start: when it started (epoch seconds).
        ready: when it first answered its health route, if it did.
        end: when it stopped, if it did.
        end_reason: how it ended (RUNNING while it runs).
        billable_seconds: its running time.
        machine_type: its machine type.
        cost: what its running time costs; None when unpriced.
    """

    endpoint: str
    deployed_model_id: str
    replica: int
    life: int
    strategy: str
    start: float | None
    ready: float | None
    end: float | None
    end_reason: EndReason
    billable_seconds: float
    machine_type: str = ""
    cost: AttemptCost | None = None

    @property
    def is_preemption(self) -> bool:
        """See :attr:`EndReason.is_preemption`."""
        return self.end_reason.is_preemption

    def to_json(self) -> dict[str, Any]:
        """The life as the summary's JSON lists it (snake_case, enums as strings)."""
        return {
            "endpoint": self.endpoint,
            "deployed_model_id": self.deployed_model_id,
            "replica": self.replica,
            "life": self.life,
            "strategy": self.strategy,
            "start": self.start,
            "ready": self.ready,
            "end": self.end,
            "end_reason": self.end_reason.value,
            "preemption": self.is_preemption,
            "billable_seconds": self.billable_seconds,
            "machine_type": self.machine_type,
            "paid_usd": self.cost.paid_usd if self.cost else None,
            "spot_usd": self.cost.spot_usd if self.cost else None,
            "on_demand_usd": self.cost.on_demand_usd if self.cost else None,
        }


@dataclass(frozen=True)
class ServingSummary:
    """The serving replicas of a run (or an endpoint), summed.

    Attributes:
        lives: every replica life, in ledger order.
        preemptions: lives that ended in a preemption.
        billable_seconds: Σ running seconds of every life (replica-seconds).
        costs: what they cost; None when any life's price is unknown.
    """

    lives: tuple[ReplicaLife, ...]
    preemptions: int
    billable_seconds: float
    costs: Costs | None

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The endpoints served, in first-seen order."""
        return tuple(dict.fromkeys(life.endpoint for life in self.lives if life.endpoint))

    @property
    def spot_lives(self) -> int:
        """Lives on Spot VMs."""
        return sum(1 for life in self.lives if is_spot(life.strategy))

    def to_json(self) -> dict[str, Any]:
        """Every figure (None where unknown) and every life, for JSON files."""
        costs = self.costs
        return {
            "endpoints": list(self.endpoints),
            "replica_lives": len(self.lives),
            "spot_lives": self.spot_lives,
            "preemptions": self.preemptions,
            "billable_seconds": self.billable_seconds,
            "cost_usd": costs.paid_usd if costs else None,
            "cost_usd_range": [costs.paid_low_usd, costs.paid_high_usd] if costs else None,
            "cost_on_demand_usd": costs.on_demand_usd if costs else None,
            "savings_usd": costs.savings_usd if costs else None,
            "spot_prices_estimated": costs.spot_estimated if costs else None,
            "life_detail": [life.to_json() for life in self.lives],
        }


def serving_lives(
    rows: Sequence[Any], *, where: str = "serving", default_endpoint: str = ""
) -> list[ReplicaLife]:
    """Replica lives from serving ledger rows (camelCase; a row's ``endpoint`` is optional).

    Raises:
        AccountingError: a row or field of the wrong type (the message names it).
    """
    out = []
    for index, row in enumerate(rows):
        at = f"{where}[{index}]"
        if not isinstance(row, Mapping):
            raise AccountingError(f"{at} must be an object, got {type(row).__name__}")
        strategy = str(row.get("strategy") or "").upper()
        out.append(
            ReplicaLife(
                endpoint=str(row.get("endpoint") or default_endpoint),
                deployed_model_id=str(row.get("deployedModelId") or ""),
                replica=int(number(row, "replica", at)),
                life=int(number(row, "life", at)),
                strategy=strategy,
                start=parse_time(row.get("startTime"), f"{at}.startTime"),
                ready=parse_time(row.get("readyTime"), f"{at}.readyTime"),
                end=parse_time(row.get("endTime"), f"{at}.endTime"),
                end_reason=EndReason.parse(row.get("endReason") or "RUNNING"),
                billable_seconds=number(row, "billableSeconds", at),
                machine_type=str(row.get("machineType") or ""),
                cost=row_cost(row, at, strategy),
            )
        )
    return out


def summarize_serving(lives: Sequence[ReplicaLife]) -> ServingSummary:
    """Add up replica lives (the definitions are in this module's docstring)."""
    lives = tuple(lives)
    return ServingSummary(
        lives=lives,
        preemptions=sum(1 for life in lives if life.is_preemption),
        billable_seconds=math.fsum(life.billable_seconds for life in lives),
        costs=total_costs([life.cost for life in lives]),
    )
