"""The job report: the accounting summary of a launch, laid out as the job_report Metrics."""

from __future__ import annotations

import json

import pytest

from kfp_spot import accounting, checkpoints
from kfp_spot.accounting import Pool
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.jobs.recovery import Submission
from kfp_spot.jobs.report import build_report
from kfp_spot.jobs.strategy import Strategy

NO_PRICES = [Pool("no-such-machine")]


def _commit(root, step, wall_time):
    checkpoints.commit_manifest(root, checkpoints.Manifest(step, (), wall_time))


def test_preemptions_and_work_lost_from_attempt_records(tmp_path):
    """Vertex does not count preemptions: the trainer's records next to the checkpoints do."""
    root = str(tmp_path / "checkpoints")
    _commit(root, 8, 80.0)
    _commit(root, 15, 150.0)
    records = {
        "a": {"start_time": 0.0, "end_time": 100.0, "exit_reason": "preempted", "first_step": 0},
        "b": {"start_time": 110.0, "exit_reason": None, "first_step": 8},  # killed, no notice
        "c": {"start_time": 200.0, "end_time": 300.0, "exit_reason": "finished", "first_step": 15},
    }
    for name, record in records.items():
        doc = {"attempt_id": name, **record}
        checkpoints.write_attempt_record(root, checkpoints.AttemptRecord.from_json(doc))
    report = build_report(
        outcome=Outcome.SUCCEEDED,
        submissions=[Submission("t", Strategy.SPOT, job_name="j", submitted_at=0.0)],
        checkpoint_root=root,
        pools=NO_PRICES,
    )
    metrics = report.metrics()
    assert report.summary.source is accounting.Source.ATTEMPT_RECORDS
    # b ended without a record of why (an OOM kill looks alike): lost work, not a preemption
    assert metrics["attempts"] == 3 and metrics["preemptions"] == 1
    assert metrics["billable_seconds"] == pytest.approx(290)
    assert metrics["work_lost_seconds"] == pytest.approx(70)
    assert metrics["goodput"] == pytest.approx(220 / 290, abs=1e-4)
    assert "cost_spot_usd" not in metrics  # no price for an unknown machine: no made-up cost
    assert metrics["latest_step"] == 15


def test_job_timestamps_leave_unknown_figures_out(tmp_path):
    subs = [
        Submission(
            "t1",
            Strategy.SPOT,
            job_name="j1",
            outcome=Outcome.PREEMPTED_EXHAUSTED,
            start_time="2026-01-01T00:00:00Z",
            end_time="2026-01-01T00:10:00Z",
        ),
        Submission(
            "t2",
            Strategy.STANDARD,
            job_name="j2",
            outcome=Outcome.SUCCEEDED,
            start_time="2026-01-01T00:11:00.123456789Z",
            end_time="2026-01-01T00:16:00.123456789Z",
        ),
    ]
    report = build_report(
        outcome=Outcome.SUCCEEDED,
        submissions=subs,
        checkpoint_root=str(tmp_path),
        pools=[Pool("n1-standard-4")],
    )
    metrics = report.metrics()
    assert report.summary.source is accounting.Source.JOB_TIMESTAMPS
    assert metrics["attempts"] == 2 and metrics["resubmissions"] == 1
    assert metrics["billable_seconds"] == pytest.approx(900)
    assert metrics["standard_attempts"] == 1
    # The service restarts a job after a preemption without saying so: not zero, unknown.
    assert "preemptions" not in metrics and "goodput" not in metrics
    assert metrics["cost_spot_usd"] < metrics["cost_on_demand_usd"]


def test_a_foreign_trainers_lost_work_is_unknown_not_zero_goodput(tmp_path):
    """No attempt records, no kfp-spot checkpoints: lost work is unknown (null)."""
    name = "projects/local-project/locations/l/customJobs/1"
    rows = [
        {"attempt": 1, "startTime": 0, "endTime": 100, "endReason": "PREEMPTED",
         "billableSeconds": 100, "strategy": "SPOT", "spotCost": 0.01, "onDemandCost": 0.05},
        {"attempt": 2, "startTime": 110, "endTime": 310, "endReason": "SUCCEEDED",
         "billableSeconds": 200, "strategy": "SPOT", "spotCost": 0.02, "onDemandCost": 0.1},
    ]  # fmt: skip
    report = build_report(
        outcome=Outcome.SUCCEEDED,
        submissions=[Submission("t", Strategy.SPOT, job_name=name, outcome=Outcome.SUCCEEDED)],
        checkpoint_root=str(tmp_path / "foreign"),
        pools=[Pool("n1-standard-4")],
        ledgers={name: rows},
    )
    metrics = report.metrics()
    assert metrics["preemptions"] == 1
    assert "goodput" not in metrics and "work_lost_seconds" not in metrics
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["summary"]["goodput"] is None
    assert doc["summary"]["work_lost_seconds"] is None
    assert doc["attempts"][0]["work_lost_seconds"] is None
    assert doc["attempts"][0]["end_reason"] == "PREEMPTED"


def test_costs_from_the_machine_table_when_no_ledger_and_the_spot_range(tmp_path):
    sub = Submission(
        "t",
        Strategy.SPOT,
        job_name="j",
        outcome=Outcome.SUCCEEDED,
        start_time="2026-01-01T00:00:00Z",
        end_time="2026-01-01T02:00:00Z",
    )
    pools = [Pool("n1-standard-4", "NVIDIA_TESLA_T4", 1, 1), Pool("n1-standard-4", "", 0, 2)]
    report = build_report(
        outcome=Outcome.SUCCEEDED, submissions=[sub], checkpoint_root=str(tmp_path), pools=pools
    )
    rates = accounting.hourly_rates(pools)
    metrics = report.metrics()
    assert metrics["cost_spot_usd"] == pytest.approx(2 * rates.spot_usd_per_hour, abs=1e-6)
    on_demand = 2 * rates.on_demand_usd_per_hour
    assert metrics["cost_on_demand_usd"] == pytest.approx(on_demand, abs=1e-6)
    assert metrics["savings_usd"] > 0
    # The Spot figure is an estimate: the report also gives Google's stated 60-91% range.
    assert metrics["cost_spot_usd_low"] <= metrics["cost_spot_usd"] <= metrics["cost_spot_usd_high"]
    assert "estimates" in report.to_json()["pricing"]


def test_a_ledger_that_cannot_be_read_falls_back_to_the_next_source(tmp_path, caplog):
    name = "projects/local-project/locations/l/customJobs/1"
    sub = Submission(
        "t",
        Strategy.SPOT,
        job_name=name,
        outcome=Outcome.SUCCEEDED,
        start_time="2026-01-01T00:00:00Z",
        end_time="2026-01-01T00:01:00Z",
    )
    report = build_report(
        outcome=Outcome.SUCCEEDED,
        submissions=[sub],
        checkpoint_root=str(tmp_path),
        pools=NO_PRICES,
        ledgers={name: [{"billableSeconds": "lots"}]},
    )
    assert report.summary.source is accounting.Source.JOB_TIMESTAMPS
    assert "billableSeconds must be a number" in caplog.text
