from __future__ import annotations

import pytest

from kfp_spot import checkpoints
from kfp_spot.jobs.recovery import Submission
from kfp_spot.jobs.report import Hardware, build_report, parse_time

NO_PRICES = Hardware(pools=(("no-such-machine", "", 0, 1),))


def _commit(root, step, wall_time):
    checkpoints.commit_manifest(root, checkpoints.Manifest(step, (), wall_time))


def test_preemptions_and_work_lost_from_attempt_records(tmp_path):
    """Vertex does not count preemptions: the trainer's records next to the checkpoints do."""
    root = str(tmp_path / "checkpoints")
    _commit(root, 8, 80.0)  # saved during attempt a
    _commit(root, 15, 150.0)  # saved during attempt b
    records = {
        "a": {"start_time": 0.0, "end_time": 100.0, "exit_reason": "preempted", "first_step": 0},
        # b was SIGKILLed: it never wrote its end; it ended when c began.
        "b": {"start_time": 110.0, "exit_reason": "running", "first_step": 8},
        "c": {"start_time": 200.0, "end_time": 300.0, "exit_reason": "finished", "first_step": 15},
    }
    for name, record in records.items():
        checkpoints.write_attempt_record(root, name, record)
    report = build_report(
        outcome="SUCCEEDED",
        submissions=[Submission("t", "SPOT", job_name="j", submitted_at=0.0)],
        checkpoint_root=root,
        hardware=NO_PRICES,
    )
    assert report.source == "attempt-records"
    assert report.attempts == 3
    assert report.preemptions == 2
    assert report.billable_seconds == pytest.approx(100 + 90 + 100)
    assert report.work_lost_seconds == pytest.approx((100 - 80) + (200 - 150))
    assert report.goodput == pytest.approx((290 - 70) / 290)
    assert [a.first_step for a in report.attempt_detail] == [0, 8, 15]
    assert report.cost_spot_usd is None  # no price for an unknown machine: no made-up cost
    assert "cost_spot_usd" not in report.metrics()
    assert report.latest_step == 15


def test_job_timestamps_when_nothing_else_is_known(tmp_path):
    subs = [
        Submission(
            "t1",
            "SPOT",
            job_name="j1",
            outcome="PREEMPTED_EXHAUSTED",
            start_time="2026-01-01T00:00:00Z",
            end_time="2026-01-01T00:10:00Z",
        ),
        Submission(
            "t2",
            "STANDARD",
            job_name="j2",
            outcome="SUCCEEDED",
            start_time="2026-01-01T00:11:00.123456789Z",
            end_time="2026-01-01T00:16:00.123456789Z",
        ),
    ]
    report = build_report(
        outcome="SUCCEEDED", submissions=subs, checkpoint_root=str(tmp_path), hardware=NO_PRICES
    )
    assert report.source == "job-timestamps"
    assert report.attempts == 2 and report.resubmissions == 1
    assert report.billable_seconds == pytest.approx(900)
    assert report.metrics()["standard_attempts"] == 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-01T00:00:00Z", 1767225600.0),
        ("2026-01-01T00:00:00.5+00:00", 1767225600.5),
        ("2026-01-01T00:00:00.123456789Z", 1767225600.123456),
        (12.5, 12.5),
        ("", None),
        ("yesterday", None),
    ],
)
def test_parse_time(value, expected):
    assert parse_time(value) == (pytest.approx(expected) if expected is not None else None)


def test_a_killed_attempt_with_a_notice_ends_at_notice_plus_grace(tmp_path):
    root = str(tmp_path / "checkpoints")
    _commit(root, 4, 40.0)
    # The trainer's record of an attempt SIGKILLed after its notice (as kfp_spot.trainer writes).
    killed = {
        "start_time": 0.0,
        "end_time": None,
        "exit_reason": None,
        "updated_time": 40.0,
        "preemption_notice_time": 50.0,
        "grace_period": 30.0,
        "first_step": 0,
    }
    checkpoints.write_attempt_record(root, "a", killed)
    checkpoints.write_attempt_record(
        root, "b", {"start_time": 200.0, "end_time": 260.0, "exit_reason": "finished"}
    )
    report = build_report(
        outcome="SUCCEEDED",
        submissions=[Submission("t", "SPOT", job_name="j")],
        checkpoint_root=root,
        hardware=NO_PRICES,
    )
    first = report.attempt_detail[0]
    assert first.end == 80.0 and first.end_reason == "PREEMPTED"
    assert first.work_lost_seconds == 40.0  # from the commit at 40 s to the kill at 80 s
    assert report.billable_seconds == 80.0 + 60.0


def test_costs_from_the_machine_table_when_no_ledger(tmp_path):
    from kfp_spot import machines

    sub = Submission(
        "t",
        "SPOT",
        job_name="j",
        start_time="2026-01-01T00:00:00Z",
        end_time="2026-01-01T02:00:00Z",
    )
    hardware = Hardware(
        pools=(("n1-standard-4", "NVIDIA_TESLA_T4", 1, 1), ("n1-standard-4", "", 0, 2))
    )
    report = build_report(
        outcome="SUCCEEDED", submissions=[sub], checkpoint_root=str(tmp_path), hardware=hardware
    )
    spot_hourly = machines.hourly_price("n1-standard-4", "NVIDIA_TESLA_T4", 1, spot=True)
    spot_hourly += 2 * machines.hourly_price("n1-standard-4", spot=True)
    on_demand_hourly = machines.hourly_price("n1-standard-4", "NVIDIA_TESLA_T4", 1, spot=False)
    on_demand_hourly += 2 * machines.hourly_price("n1-standard-4", spot=False)
    assert report.cost_spot_usd == pytest.approx(2 * spot_hourly)
    assert report.cost_on_demand_usd == pytest.approx(2 * on_demand_hourly)
    assert report.savings_usd == pytest.approx(2 * (on_demand_hourly - spot_hourly))
    assert report.savings_usd > 0
