"""Per-VM billing rows from stored attempts (no processes): runs, gaps, sums, old state dirs."""

from __future__ import annotations

import json

import pytest

from kfp_spot.emulator import billing
from kfp_spot.emulator.store import AttemptRow


def _attempt(processes, *, start=1000.0, end=None, reason=None, strategy="SPOT") -> AttemptRow:
    return AttemptRow(
        job_id="1",
        attempt=1,
        queued_seconds=0.0,
        admit_time=start - 1,
        start_time=start,
        end_time=end,
        last_seen=end,
        end_reason=reason,
        machine_type="n1-standard-4",
        replica_count=len(processes) or 2,
        strategy=strategy,
        spot_usd_per_hour=2.0,
        on_demand_usd_per_hour=6.0,
        processes=json.dumps(processes),
    )


def _vm(replica, runs, spot=1.0, on_demand=3.0):
    return {
        "replica": replica,
        "pid": 1,
        "token": "t",
        "machine_type": "n1-standard-4",
        "spot_usd_per_hour": spot,
        "on_demand_usd_per_hour": on_demand,
        "runs": runs,
    }


def test_each_vm_is_billed_for_its_runs_only():
    att = _attempt(
        [
            _vm("workerpool0-0", [[1000.0, None, None]]),
            _vm("workerpool1-0", [[1000.0, 1100.0, "PREEMPTED"], [1400.0, None, None]]),
        ],
        end=4600.0,
        reason="SUCCEEDED",
    )
    row = billing.ledger_row(att)
    chief, worker = row["vms"]
    assert row["billableSeconds"] == chief["billableSeconds"] == 3600.0
    assert worker["billableSeconds"] == 100.0 + 3200.0
    assert worker["gaps"] == [
        {"startTime": billing.rfc3339(1100.0), "endTime": billing.rfc3339(1400.0), "seconds": 300.0}
    ]
    assert [r["endReason"] for r in worker["runs"]] == ["PREEMPTED", "SUCCEEDED"]
    assert worker["runs"][-1]["endTime"] == billing.rfc3339(4600.0)
    assert (chief["preemptions"], worker["preemptions"], row["vmPreemptions"]) == (0, 1, 1)
    assert row["vmSeconds"] == 3600.0 + 3300.0
    assert chief["spotCost"] == 1.0 and worker["spotCost"] == round(3300.0 / 3600.0, 6)
    assert row["spotCost"] == pytest.approx(chief["spotCost"] + worker["spotCost"], abs=1e-9)
    assert row["cost"] == row["spotCost"]
    assert row["savings"] == pytest.approx(row["onDemandCost"] - row["spotCost"], abs=1e-9)


def test_a_vm_away_when_the_attempt_ends_has_an_open_gap_up_to_the_end():
    att = _attempt(
        [
            _vm("workerpool0-0", [[1000.0, None, None]]),
            _vm("workerpool1-0", [[1000.0, 1010.0, "PREEMPTED"]]),
        ],
        end=1030.0,
        reason="PREEMPTED",
    )
    worker = billing.ledger_row(att)["vms"][1]
    assert worker["billableSeconds"] == 10.0
    assert worker["gaps"] == [
        {"startTime": billing.rfc3339(1010.0), "endTime": billing.rfc3339(1030.0), "seconds": 20.0}
    ]
    running = _attempt(
        [
            _vm("workerpool0-0", [[1000.0, None, None]]),
            _vm("workerpool1-0", [[1000.0, 1010.0, "PREEMPTED"]]),
        ]
    )
    live = billing.ledger_row(running, now=1025.0)["vms"][1]
    assert live["gaps"][0]["endTime"] is None and live["gaps"][0]["seconds"] == 15.0
    assert live["runs"][0]["endReason"] == "PREEMPTED"


def test_attempts_recorded_without_vm_runs_keep_the_attempt_level_billing():
    att = _attempt(
        [{"replica": "workerpool0-0", "pid": 1, "token": "t"}], end=2800.0, reason="SUCCEEDED"
    )
    row = billing.ledger_row(att)
    assert "vms" not in row and "vmSeconds" not in row
    assert row["billableSeconds"] == 1800.0 and row["spotCost"] == 1.0  # 2 $/h for half an hour


def test_on_demand_vms_pay_the_on_demand_price():
    att = _attempt(
        [_vm("workerpool0-0", [[1000.0, None, None]])],
        end=4600.0,
        reason="SUCCEEDED",
        strategy="ON_DEMAND",
    )
    row = billing.ledger_row(att)
    assert row["cost"] == row["onDemandCost"] == 3.0 and row["savings"] == 0
