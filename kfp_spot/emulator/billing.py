"""The billing ledger: an attempt's hourly rates, what its running time costs, its ledger row.

Only RUNNING time is billable (queued, pending and the time between attempts are free). The cost
arithmetic is :func:`attempt_costs` alone, so the project's accounting model can take it over in
one place.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from google.cloud.aiplatform_v1.types import AcceleratorType

from kfp_spot import machines
from kfp_spot.emulator.store import AttemptRow


@dataclass(frozen=True)
class Costs:
    """What one attempt's billable time costs, in USD, rounded to 6 decimals.

    Attributes:
        spot: at the Spot price.
        on_demand: at the on-demand price.
        cost: what the attempt's strategy pays (``spot`` for SPOT, else ``on_demand``).
        savings: ``on_demand - cost`` (exact: computed from the rounded figures).
    """

    spot: float
    on_demand: float
    cost: float
    savings: float


def attempt_costs(
    billable_seconds: float,
    spot_usd_per_hour: float,
    on_demand_usd_per_hour: float,
    strategy: str,
) -> Costs:
    """The costs of ``billable_seconds`` of running time at the given hourly rates.

    Args:
        billable_seconds: RUNNING time of the attempt (all replicas together are in the rates).
        spot_usd_per_hour: the Spot price of every replica of the attempt, per hour.
        on_demand_usd_per_hour: the on-demand price of the same, per hour.
        strategy: the ``Scheduling.Strategy`` name; ``"SPOT"`` pays the Spot price.
    """
    hours = billable_seconds / 3600.0
    # rounded first, so every row adds up exactly: savings == on_demand - cost
    spot = round(spot_usd_per_hour * hours, 6)
    on_demand = round(on_demand_usd_per_hour * hours, 6)
    cost = spot if strategy == "SPOT" else on_demand
    return Costs(spot, on_demand, cost, round(on_demand - cost, 6))


def accelerator_name(value: int) -> str:
    """The ``AcceleratorType`` name of an enum value ("" for unspecified or unknown)."""
    if not value:
        return ""
    try:
        return AcceleratorType(value).name
    except ValueError:
        return ""


def hourly_rates(job_spec: Any) -> tuple[float, float]:
    """(Spot, on-demand) USD per hour of every replica of a ``CustomJobSpec`` (raw protobuf)."""
    spot_rate = on_demand_rate = 0.0
    for pool in job_spec.worker_pool_specs:
        if not pool.ByteSize():
            continue
        ms = pool.machine_spec
        args = (ms.machine_type, accelerator_name(ms.accelerator_type), ms.accelerator_count)
        spot_rate += machines.hourly_price(*args, spot=True) * pool.replica_count
        on_demand_rate += machines.hourly_price(*args, spot=False) * pool.replica_count
    return spot_rate, on_demand_rate


def rfc3339(ts: float | None) -> str | None:
    """Epoch seconds as an RFC 3339 UTC string (None stays None)."""
    if ts is None:
        return None
    return (
        datetime.fromtimestamp(ts, tz=timezone.utc)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def billable_seconds(att: AttemptRow, now: float | None = None) -> float:
    """RUNNING time of an attempt; a running attempt is billed up to ``now``."""
    if att.start_time is None:
        return 0.0
    stop = att.end_time if att.end_time is not None else (now or time.time())
    return max(0.0, stop - att.start_time)


def ledger_row(att: AttemptRow, now: float | None = None) -> dict[str, Any]:
    """One ledger line (camelCase, as ``/attempts`` serves it)."""
    billable = billable_seconds(att, now)
    costs = attempt_costs(billable, att.spot_usd_per_hour, att.on_demand_usd_per_hour, att.strategy)
    return {
        "attempt": att.attempt,
        "startTime": rfc3339(att.start_time),
        "endTime": rfc3339(att.end_time),
        "endReason": att.end_reason,
        "billableSeconds": round(billable, 3),
        "queuedSeconds": round(att.queued_seconds, 3),
        "machineType": att.machine_type,
        "replicaCount": att.replica_count,
        "strategy": att.strategy,
        "spotCost": costs.spot,
        "onDemandCost": costs.on_demand,
        "cost": costs.cost,
        "savings": costs.savings,
    }
