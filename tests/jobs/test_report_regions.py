"""The job report per region: attempts, costs, failovers, checkpoint copies, the home baseline."""

from __future__ import annotations

import pytest

from kfp_spot import accounting
from kfp_spot.accounting import Pool
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.jobs.recovery import Submission
from kfp_spot.jobs.report import build_report
from kfp_spot.jobs.strategy import Strategy

US = "projects/local-project/locations/us-central1/customJobs/1"
EU = "projects/local-project/locations/europe-west4/customJobs/2"
GIB = 1024**3


def _row(attempt, start, end, reason, billable, spot, on_demand):
    return {
        "attempt": attempt,
        "startTime": start,
        "endTime": end,
        "endReason": reason,
        "billableSeconds": billable,
        "strategy": "SPOT",
        "spotCost": spot,
        "onDemandCost": on_demand,
    }


def _report(tmp_path, **extra):
    subs = [
        Submission(
            "t1", Strategy.SPOT, job_name=US, region="us-central1", outcome=Outcome.CAPACITY
        ),
        Submission(
            "t2",
            Strategy.SPOT,
            job_name=EU,
            region="europe-west4",
            outcome=Outcome.SUCCEEDED,
            copied_bytes=2 * GIB,
        ),
    ]
    ledgers = {
        US: [
            _row(1, 0.0, 100.0, "PREEMPTED", 100.0, 0.01, 0.05),
            _row(2, 110.0, 150.0, "PREEMPTED", 40.0, 0.004, 0.02),
        ],
        EU: [_row(1, 200.0, 300.0, "SUCCEEDED", 100.0, 0.01, 0.05)],
    }
    return build_report(
        outcome=Outcome.SUCCEEDED,
        submissions=subs,
        checkpoint_root=str(tmp_path / "none"),
        pools=[Pool("n1-standard-4")],
        ledgers=ledgers,
        **extra,
    )


def test_attempts_and_costs_per_region_with_the_home_baseline(tmp_path):
    report = _report(tmp_path)
    regions = report.regions
    assert regions is not None and regions.home == "us-central1"
    rows = {r.region: r for r in regions.regions}
    assert list(rows) == ["us-central1", "europe-west4"]
    assert rows["us-central1"].attempts == 2 and rows["europe-west4"].attempts == 1
    assert rows["us-central1"].billable_seconds == pytest.approx(140)
    assert rows["us-central1"].costs.paid_usd == pytest.approx(0.014)
    assert rows["europe-west4"].costs.on_demand_usd == pytest.approx(0.05)
    assert regions.home_on_demand_usd == pytest.approx(0.12)  # the whole run, on demand, at home
    [failover] = regions.failovers
    assert failover.describe() == "us-central1 → europe-west4"


def test_copy_cost_is_the_bytes_at_the_stored_transfer_price(tmp_path):
    report = _report(tmp_path, copied_home_bytes=GIB)
    price = accounting.regions.transfer_prices()["intercontinental"]
    metrics = report.metrics()
    assert metrics["regions_used"] == 2 and metrics["failovers"] == 1
    assert metrics["cost_copy_usd"] == pytest.approx(3 * price)  # 2 GiB there, 1 GiB back home
    assert metrics["cost_on_demand_home_usd"] == pytest.approx(0.12)
    doc = report.to_json()["regions"]
    assert doc["copies"] == [
        {
            "from": "us-central1",
            "to": "europe-west4",
            "copied_bytes": 2 * GIB,
            "route": "intercontinental",
            "cost_usd": pytest.approx(2 * price),
        },
        {
            "from": "europe-west4",
            "to": "us-central1",
            "copied_bytes": GIB,
            "route": "intercontinental",
            "cost_usd": pytest.approx(price),
        },
    ]
    assert "us-central1" in doc["pricing"]  # every region priced with the one table, said so
    assert [r["region"] for r in doc["per_region"]] == ["us-central1", "europe-west4"]


def test_a_launch_in_one_region_has_no_failover_or_copy(tmp_path):
    report = build_report(
        outcome=Outcome.SUCCEEDED,
        submissions=[Submission("t", Strategy.SPOT, job_name=US)],
        checkpoint_root=str(tmp_path / "none"),
        pools=[Pool("n1-standard-4")],
        ledgers={US: [_row(1, 0.0, 10.0, "SUCCEEDED", 10.0, 0.001, 0.005)]},
    )
    metrics = report.metrics()
    assert metrics["regions_used"] == 1 and metrics["failovers"] == 0
    assert metrics["cost_copy_usd"] == 0


def test_transfer_routes():
    route = accounting.regions.transfer_route
    assert route("us-central1", "us-central1") == "same-region"
    assert route("us-central1", "us-east1") == "same-continent"
    assert route("europe-west4", "australia-southeast1") == "intercontinental-oceania"
    assert route("us-central1", "mars-north1") is None
