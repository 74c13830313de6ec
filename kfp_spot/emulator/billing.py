"""The billing ledger: an attempt's hourly rates, what its running time costs, its ledger row.

Only RUNNING time is billable (queued, pending and the time between attempts are free). The cost
arithmetic is :func:`kfp_spot.accounting.pricing.attempt_cost`, the one cost function of training
attempts, per-VM rows and serving replica lives alike.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from kfp_spot import machines
from kfp_spot.accounting import pricing
from kfp_spot.emulator.store import AttemptRow


def attempt_costs(
    billable_seconds: float,
    spot_usd_per_hour: float,
    on_demand_usd_per_hour: float,
    strategy: str,
) -> pricing.AttemptCost:
    """The costs of ``billable_seconds`` of running time at the given hourly rates.

    ``kfp_spot.accounting.pricing.attempt_cost`` at a ledger row's rates (as stored per attempt
    and per VM).

    Args:
        billable_seconds: RUNNING time of the attempt (all replicas together are in the rates).
        spot_usd_per_hour: the Spot price of every replica of the attempt, per hour.
        on_demand_usd_per_hour: the on-demand price of the same, per hour.
        strategy: the ``Scheduling.Strategy`` name; ``"SPOT"`` pays the Spot price.
    """
    rates = pricing.Rates(spot_usd_per_hour, on_demand_usd_per_hour)
    return pricing.attempt_cost(billable_seconds, rates, strategy)


def accelerator_name(value: int) -> str:
    """The ``AcceleratorType`` name of an enum value ("" for unspecified or unknown)."""
    if not value:
        return ""
    from google.cloud.aiplatform_v1.types.accelerator_type import AcceleratorType

    try:
        return str(AcceleratorType(value).name)
    except ValueError:
        return ""


def pool_rates(pool: Any) -> tuple[float, float]:
    """(Spot, on-demand) USD per hour of one replica (VM) of a ``WorkerPoolSpec`` (raw protobuf)."""
    ms = pool.machine_spec
    args = (ms.machine_type, accelerator_name(ms.accelerator_type), ms.accelerator_count)
    return machines.hourly_price(*args, spot=True), machines.hourly_price(*args, spot=False)


def hourly_rates(job_spec: Any) -> tuple[float, float]:
    """(Spot, on-demand) USD per hour of every replica of a ``CustomJobSpec`` (raw protobuf)."""
    spot_rate = on_demand_rate = 0.0
    for pool in job_spec.worker_pool_specs:
        if not pool.ByteSize():
            continue
        spot, on_demand = pool_rates(pool)
        spot_rate += spot * pool.replica_count
        on_demand_rate += on_demand * pool.replica_count
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


def vm_rows(att: AttemptRow, now: float | None = None) -> list[dict[str, Any]] | None:
    """The attempt's VMs (one per replica) with their running time, gaps and costs.

    Each VM is billed for its own running time only: from the attempt's RUNNING (or its
    replacement's start) to its preemption, and from its last start to the attempt's end. None
    for an attempt recorded without per-VM runs (a state dir of an older emulator).
    """
    vms = [p for p in att.process_list if isinstance(p.get("runs"), list)]
    if att.start_time is None or not vms or len(vms) != len(att.process_list):
        return None
    end = att.end_time if att.end_time is not None else (now or time.time())
    out = []
    for vm in vms:
        runs, gaps = [], []
        billable = 0.0
        preemptions = 0
        previous_end: float | None = None
        for start, stop, reason in vm["runs"]:
            if previous_end is not None:
                gaps.append(_gap(previous_end, start))
            closed = stop if stop is not None else end
            billable += max(0.0, closed - start)
            preemptions += reason == "PREEMPTED"
            runs.append(
                {
                    "startTime": rfc3339(start),
                    "endTime": rfc3339(stop if stop is not None else att.end_time),
                    "endReason": reason if stop is not None else att.end_reason,
                }
            )
            previous_end = closed
        if previous_end is not None and previous_end < end:  # away when the attempt ended / now
            gaps.append(_gap(previous_end, att.end_time, now=end))
        costs = attempt_costs(
            billable, vm["spot_usd_per_hour"], vm["on_demand_usd_per_hour"], att.strategy
        )
        out.append(
            {
                "replica": vm["replica"],
                "machineType": vm.get("machine_type", ""),
                "billableSeconds": round(billable, 3),
                "preemptions": preemptions,
                "runs": runs,
                "gaps": gaps,
                **costs.to_ledger(),
            }
        )
    return out


def _gap(start: float, stop: float | None, now: float | None = None) -> dict[str, Any]:
    """A time a VM was away (preempted, its replacement not started yet); open while away."""
    until = stop if stop is not None else now
    return {
        "startTime": rfc3339(start),
        "endTime": rfc3339(stop),
        "seconds": round(max(0.0, (until or start) - start), 3),
    }


def ledger_row(att: AttemptRow, now: float | None = None) -> dict[str, Any]:
    """One ledger line (camelCase, as ``/attempts`` serves it).

    ``billableSeconds`` is the attempt's RUNNING time (the job's clock); with per-VM records the
    costs are the sums over ``vms`` (each VM billed for its own running time), ``vmSeconds`` the
    VM-seconds billed and ``vmPreemptions`` how many VMs were preempted and replaced.
    """
    billable = billable_seconds(att, now)
    vms = vm_rows(att, now)
    if vms is None:
        costs = attempt_costs(
            billable, att.spot_usd_per_hour, att.on_demand_usd_per_hour, att.strategy
        )
    else:
        spot = round(sum(v["spotCost"] for v in vms), 6)
        on_demand = round(sum(v["onDemandCost"] for v in vms), 6)
        spot_paid = pricing.is_spot(att.strategy)
        cost = spot if spot_paid else on_demand
        costs = pricing.AttemptCost(spot, on_demand, cost, round(on_demand - cost, 6), spot_paid)
    row: dict[str, Any] = {
        "attempt": att.attempt,
        "startTime": rfc3339(att.start_time),
        "endTime": rfc3339(att.end_time),
        "endReason": att.end_reason,
        "billableSeconds": round(billable, 3),
        "queuedSeconds": round(att.queued_seconds, 3),
        "machineType": att.machine_type,
        "replicaCount": att.replica_count,
        "strategy": att.strategy,
        **costs.to_ledger(),
    }
    if vms is not None:
        row["vmSeconds"] = round(sum(v["billableSeconds"] for v in vms), 3)
        row["vmPreemptions"] = sum(v["preemptions"] for v in vms)
        row["vms"] = vms
    return row
