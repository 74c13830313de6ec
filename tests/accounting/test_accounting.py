"""The accounting model: one definition of a preemption, of every cost and of lost work."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfp_spot import accounting, checkpoints, machines
from kfp_spot.accounting import (
    AccountingError,
    Attempt,
    EndReason,
    JobRun,
    Pool,
    Rates,
    Source,
    account,
    attempt_cost,
    hourly_rates,
    ledger_attempts,
    parse_time,
)


def _row(attempt, reason, billable, *, strategy="SPOT", start=1000.0, **extra):
    return {
        "attempt": attempt,
        "startTime": start,
        "endTime": start + billable,
        "endReason": reason,
        "billableSeconds": billable,
        "strategy": strategy,
        **extra,
    }


# -- pricing ------------------------------------------------------------------------------------


def test_pricing_imports_nothing_heavy():
    """The emulator's billing calls it: no fsspec, no Google client, no KFP."""
    code = (
        "import sys, kfp_spot.accounting.pricing as p; "
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('fsspec', 'kfp', 'proto') "
        "or m.startswith(('google.cloud.aiplatform', 'google.api_core'))]; "
        "print(heavy); assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_attempt_cost_pays_the_strategys_rate_and_rows_add_up():
    rates = Rates(spot_usd_per_hour=0.05, on_demand_usd_per_hour=0.25)
    spot = attempt_cost(3600.0, rates, "SPOT")
    assert (spot.spot_usd, spot.on_demand_usd, spot.paid_usd) == (0.05, 0.25, 0.05)
    assert spot.savings_usd == 0.2 and spot.spot
    for strategy in ("STANDARD", "FLEX_START", "STRATEGY_UNSPECIFIED", ""):
        cost = attempt_cost(3600.0, rates, strategy)
        assert cost.paid_usd == 0.25 and cost.savings_usd == 0.0 and not cost.spot
    assert attempt_cost(-5.0, rates, "SPOT").paid_usd == 0.0
    assert attempt_cost(1.0, rates, "spot").to_ledger() == {
        "spotCost": 0.000014,
        "onDemandCost": 0.000069,
        "cost": 0.000014,
        "savings": 0.000055,
    }


@given(st.floats(0, 10 * 24 * 3600), st.floats(0.001, 50), st.floats(1.0, 20.0))
def test_rounded_costs_add_up_exactly(seconds, spot_rate, factor):
    cost = attempt_cost(seconds, Rates(spot_rate, spot_rate * factor), "SPOT")
    assert cost.savings_usd == round(cost.on_demand_usd - cost.paid_usd, 6)
    assert cost.paid_usd <= cost.on_demand_usd


def test_hourly_rates_are_the_machine_tables_for_every_replica():
    pools = [Pool("n1-standard-4", "NVIDIA_TESLA_T4", 1, 1), Pool("n1-standard-4", "", 0, 2)]
    rates = hourly_rates([*pools, Pool("n1-standard-8", replica_count=0)])
    spot = machines.hourly_price("n1-standard-4", "NVIDIA_TESLA_T4", 1, spot=True)
    spot += 2 * machines.hourly_price("n1-standard-4", spot=True)
    on_demand = machines.hourly_price("n1-standard-4", "NVIDIA_TESLA_T4", 1, spot=False)
    on_demand += 2 * machines.hourly_price("n1-standard-4", spot=False)
    assert rates == Rates(pytest.approx(spot), pytest.approx(on_demand))
    with pytest.raises(accounting.UnknownPriceError, match="'no-such-machine'"):
        hourly_rates([Pool("no-such-machine")])


@pytest.mark.parametrize("name", sorted(machines.machine_types()))
def test_every_table_spot_price_lies_in_googles_stated_discount_range(name):
    """The table's Spot figure must be a possible Spot price: 60-91% off on-demand."""
    mt = machines.machine_type(name)
    if mt.on_demand_usd_per_hour == 0:
        pytest.skip("priced per accelerator")
    low, high = accounting.spot_range(mt.on_demand_usd_per_hour)
    assert low - 1e-9 <= mt.spot_usd_per_hour <= high + 1e-9


# -- preemptions and costs ----------------------------------------------------------------------


def test_an_emulator_restart_counts_as_a_preemption():
    rows = [
        _row(1, "PREEMPTED", 10.0, spotCost=0.1, onDemandCost=0.5),
        _row(2, "EMULATOR_RESTARTED", 20.0, start=1020.0, spotCost=0.2, onDemandCost=1.0),
        _row(3, "SUCCEEDED", 30.0, start=1050.0, spotCost=0.3, onDemandCost=1.5),
    ]
    summary = account(ledger=ledger_attempts(rows, default_job="j"))
    assert summary.source is Source.LEDGER
    assert [a.end_reason for a in summary.attempts] == [
        EndReason.PREEMPTED,
        EndReason.EMULATOR_RESTARTED,
        EndReason.SUCCEEDED,
    ]
    assert summary.preemptions == 2
    assert summary.billable_seconds == 60.0
    assert summary.costs.paid_usd == pytest.approx(0.6)
    assert summary.costs.on_demand_usd == pytest.approx(3.0)
    assert summary.costs.savings_usd == pytest.approx(2.4)
    assert summary.costs.spot_estimated
    assert summary.costs.paid_low_usd == pytest.approx(3.0 * 0.09)
    assert summary.costs.paid_high_usd == pytest.approx(3.0 * 0.40)


def test_a_fallback_attempt_is_paid_on_demand_and_saves_nothing():
    rows = [
        _row(1, "PREEMPTED", 10.0, spotCost=0.1, onDemandCost=0.5),
        _row(1, "SUCCEEDED", 10.0, strategy="STANDARD", job="j2", spotCost=0.1, onDemandCost=0.5),
    ]
    summary = account(ledger=ledger_attempts(rows, default_job="j1"))
    assert summary.costs.paid_usd == pytest.approx(0.6)  # 0.1 on Spot + 0.5 on demand
    assert summary.costs.savings_usd == pytest.approx(0.4)
    # Only the Spot part is an estimate: the range moves by the Spot attempt's range alone.
    assert summary.costs.paid_low_usd == pytest.approx(0.5 * 0.09 + 0.5)
    assert summary.spot_attempts == 1


def test_an_unknown_price_gives_no_cost_rather_than_a_made_up_one():
    records = checkpoints.parse_attempt_records(
        [{"attempt_id": "a", "start_time": 0.0, "end_time": 60.0}]
    )
    summary = account(records=records, jobs=[JobRun("j", "SPOT")])
    assert summary.costs is None
    priced = account(records=records, jobs=[JobRun("j", "SPOT")], rates=Rates(3.6, 36.0))
    assert priced.costs.paid_usd == pytest.approx(0.06)
    assert priced.costs.on_demand_usd == pytest.approx(0.6)


# -- lost work and goodput ----------------------------------------------------------------------


def test_lost_work_without_commit_information_is_unknown_not_all_lost():
    """A foreign trainer (no attempt records, no kfp-spot checkpoints): unknown, never zero."""
    rows = [_row(1, "PREEMPTED", 100.0), _row(2, "SUCCEEDED", 200.0, start=1200.0)]
    summary = account(ledger=ledger_attempts(rows, default_job="j"))
    assert summary.attempts[0].lost_seconds is None
    assert summary.attempts[1].lost_seconds == 0.0
    assert summary.lost_seconds is None
    assert summary.goodput is None
    assert summary.to_json()["goodput"] is None


def test_lost_work_after_the_last_commit_inside_the_attempt():
    rows = [_row(1, "PREEMPTED", 100.0), _row(2, "SUCCEEDED", 200.0, start=1200.0)]
    summary = account(ledger=ledger_attempts(rows, default_job="j"), commits=[1030.0, 1080.0])
    assert summary.attempts[0].lost_seconds == pytest.approx(20.0)
    assert summary.goodput == pytest.approx(280 / 300)


def test_a_trainer_that_keeps_records_and_committed_nothing_lost_it_all():
    rows = [_row(1, "PREEMPTED", 100.0), _row(2, "SUCCEEDED", 200.0, start=1200.0)]
    records = checkpoints.parse_attempt_records(
        [
            {"attempt_id": "a", "start_time": 1000.5, "end_time": 1100, "exit_reason": "preempted"},
            {"attempt_id": "b", "start_time": 1200.5, "end_time": 1400, "exit_reason": "finished"},
        ]
    )
    summary = account(ledger=ledger_attempts(rows, default_job="j"), records=records)
    assert summary.lost_seconds == 100.0
    assert summary.goodput == pytest.approx(200 / 300)
    assert [a.first_step for a in summary.attempts] == [None, None]


def test_job_timestamps_cannot_count_preemptions():
    jobs = [
        JobRun("j1", "SPOT", start=0.0, end=600.0, end_reason=EndReason.PREEMPTED),
        JobRun("j2", "STANDARD", start=660.0, end=960.0, end_reason=EndReason.SUCCEEDED),
    ]
    summary = account(jobs=jobs, rates=Rates(0.1, 1.0))
    assert summary.source is Source.JOB_TIMESTAMPS
    assert summary.billable_seconds == 900.0
    assert summary.preemptions is None
    assert summary.goodput is None
    assert summary.costs.paid_usd == pytest.approx(600 / 3600 * 0.1 + 300 / 3600 * 1.0)


def test_attempts_from_records_a_killed_attempt_ends_when_the_next_began(tmp_path):
    root = str(tmp_path / "checkpoints")
    checkpoints.commit_manifest(root, checkpoints.Manifest(8, (), 80.0))
    checkpoints.commit_manifest(root, checkpoints.Manifest(15, (), 150.0))
    raw = {
        "a": {"start_time": 0.0, "end_time": 100.0, "exit_reason": "preempted", "first_step": 0},
        "b": {"start_time": 110.0, "exit_reason": None, "first_step": 8},  # SIGKILLed
        "c": {"start_time": 200.0, "end_time": 300.0, "exit_reason": "finished", "first_step": 15},
    }
    for name, record in raw.items():
        doc = {"attempt_id": name, **record}
        checkpoints.write_attempt_record(root, checkpoints.AttemptRecord.from_json(doc))
    summary = account(
        records=accounting.read_records(root),
        commits=accounting.read_commits(root),
        jobs=[JobRun("projects/local-project/locations/l/customJobs/1", "SPOT", submitted_at=0.0)],
    )
    assert summary.source is Source.ATTEMPT_RECORDS
    # b never closed its record and had no notice: it ended, nothing says it was preempted
    assert [a.end_reason for a in summary.attempts] == [
        EndReason.PREEMPTED,
        EndReason.UNKNOWN,
        EndReason.SUCCEEDED,
    ]
    assert summary.preemptions == 1
    assert summary.billable_seconds == pytest.approx(100 + 90 + 100)
    assert summary.lost_seconds == pytest.approx((100 - 80) + (200 - 150))
    assert summary.goodput == pytest.approx((290 - 70) / 290)
    assert [a.first_step for a in summary.attempts] == [0, 8, 15]
    assert [a.number for a in summary.attempts] == [1, 2, 3]


def test_a_killed_attempt_with_a_notice_ends_at_notice_plus_grace():
    records = checkpoints.parse_attempt_records(
        [
            {
                "attempt_id": "a",
                "start_time": 0.0,
                "end_time": None,
                "exit_reason": None,
                "updated_time": 40.0,
                "preemption_notice_time": 50.0,
                "grace_period": 30.0,
                "last_commit_time": 40.0,
            },
            {"attempt_id": "b", "start_time": 200.0, "end_time": 260.0, "exit_reason": "finished"},
        ]
    )
    summary = account(records=records, commits=[40.0], jobs=[JobRun("j", "SPOT")])
    first = summary.attempts[0]
    assert first.end == 80.0 and first.end_reason is EndReason.PREEMPTED
    assert first.lost_seconds == 40.0  # from the commit at 40 s to the kill at 80 s
    assert summary.billable_seconds == 80.0 + 60.0


def _unclosed(attempt_id, start, updated, **fields):
    """A record its trainer never closed: killed (OOM, SIGKILL, a VM gone), or still running."""
    return {"attempt_id": attempt_id, "start_time": start, "updated_time": updated, **fields}


def test_an_unclosed_record_followed_by_another_ended_unknown_not_preempted():
    # Killed without a notice (a replica restarted after an OOM kill): not a preemption, and the
    # work after its last commit is lost all the same.
    records = checkpoints.parse_attempt_records(
        [
            _unclosed("a", 0.0, 90.0, last_commit_time=60.0),
            {"attempt_id": "b", "start_time": 100.0, "end_time": 160.0, "exit_reason": "finished"},
        ]
    )
    summary = account(records=records, commits=[60.0], jobs=[JobRun("j", "SPOT")])
    first = summary.attempts[0]
    assert first.end_reason is EndReason.UNKNOWN and not first.is_preemption
    assert summary.preemptions == 0
    assert first.end == 100.0 and first.lost_seconds == 40.0


def test_an_unclosed_last_record_takes_its_jobs_end():
    # The job failed when its trainer was killed (OOM): the attempt failed, it is not running.
    records = checkpoints.parse_attempt_records(
        [
            _unclosed("a", 0.0, 50.0),
            _unclosed("b", 100.0, 180.0, last_commit_time=150.0),
        ]
    )
    failed = JobRun("j", "SPOT", end_reason=EndReason.FAILED)
    summary = account(records=records, commits=[150.0], jobs=[failed])
    assert [a.end_reason for a in summary.attempts] == [EndReason.UNKNOWN, EndReason.FAILED]
    assert summary.preemptions == 0
    assert summary.attempts[1].lost_seconds == 30.0  # from its commit to its last sign of life


def test_each_jobs_last_unclosed_record_takes_that_jobs_end():
    records = checkpoints.parse_attempt_records(
        [_unclosed("a", 10.0, 50.0, job_id="1"), _unclosed("b", 100.0, 150.0, job_id="2")]
    )
    jobs = [
        JobRun("p/l/customJobs/1", "SPOT", submitted_at=0.0, end_reason=EndReason.CANCELLED),
        JobRun("p/l/customJobs/2", "STANDARD", submitted_at=90.0),  # still running
    ]
    summary = account(records=records, jobs=jobs)
    assert [a.end_reason for a in summary.attempts] == [EndReason.CANCELLED, EndReason.RUNNING]
    assert summary.preemptions == 0


def test_a_still_running_attempt_is_never_counted_as_ended():
    records = checkpoints.parse_attempt_records([_unclosed("a", 0.0, 50.0)])
    for jobs in ([JobRun("j", "SPOT")], []):  # its job running, or no job known
        summary = account(records=records, jobs=jobs)
        assert summary.attempts[0].end_reason is EndReason.RUNNING
        assert summary.preemptions == 0 and summary.lost_seconds == 0.0


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["PREEMPTED", "EMULATOR_RESTARTED", "FAILED", "SUCCEEDED"]),
            st.floats(0, 5000),
        ),
        max_size=8,
    )
)
def test_summary_figures_are_sums_of_the_attempts(spec):
    rows, t = [], 0.0
    for i, (reason, seconds) in enumerate(spec, start=1):
        rows.append(_row(i, reason, seconds, start=t))
        t += seconds + 1
    rates = Rates(0.05, 0.25)
    summary = account(ledger=ledger_attempts(rows, default_job="j"), records=(), rates=rates)
    assert summary.attempt_count == len(rows)
    assert summary.preemptions == sum(r in ("PREEMPTED", "EMULATOR_RESTARTED") for r, _ in spec)
    assert summary.billable_seconds == pytest.approx(math.fsum(s for _, s in spec))
    assert summary.costs.paid_usd == pytest.approx(
        math.fsum(attempt_cost(s, rates, "SPOT").paid_usd for _, s in spec)
    )
    # The table's Spot rate (20% of on-demand here) lies inside the stated range, to the
    # micro-dollar each attempt is rounded to.
    slack = 1e-6 * len(rows)
    costs = summary.costs
    assert costs.paid_low_usd - slack <= costs.paid_usd <= costs.paid_high_usd + slack
    # Without attempt records or commits, what an attempt that did not finish lost is unknown:
    # goodput is then unknown too; attempts that all succeeded kept all their billed time.
    unknown = any(reason != "SUCCEEDED" and seconds > 0 for reason, seconds in spec)
    billed = math.fsum(s for _, s in spec) > 0
    assert summary.goodput == (1.0 if billed and not unknown else None)


# -- parsing at the edges -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-01T00:00:00Z", 1767225600.0),
        ("2026-01-01T00:00:00.5+00:00", 1767225600.5),
        ("2026-01-01T00:00:00.123456789Z", 1767225600.123456),
        # the emulator's and Vertex AI's form, read alike on Python 3.10 (whose fromisoformat
        # takes neither Z nor 9 digits) and later; an offset after a fraction is kept
        ("2026-01-01T00:00:00.775Z", 1767225600.775),
        ("2026-01-01T05:00:00.25+05:00", 1767225600.25),
        ("2026-01-01T00:00:00.123456789-01:30", 1767225600.123456 + 5400),
        ("2026-01-01", 1767225600.0),
        (12.5, 12.5),
        ("12.5", 12.5),
        ("", None),
        (None, None),
    ],
)
def test_parse_time(value, expected):
    assert parse_time(value) == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize("value", ["yesterday", True, float("nan"), [1], 1e308, "-1e20"])
def test_parse_time_names_the_field(value):
    with pytest.raises(AccountingError, match=r"^run\.startTime must be a"):
        parse_time(value, "run.startTime")


def test_a_bad_ledger_field_is_named():
    with pytest.raises(AccountingError, match=r"ledger\[1\]\.spotCost must be a number, got 'x'"):
        ledger_attempts([_row(1, "SUCCEEDED", 1.0), _row(2, "SUCCEEDED", 1.0, spotCost="x")])


def test_end_reasons_are_enums_inside_and_strings_at_the_edges():
    (attempt,) = ledger_attempts([_row(1, "emulator_restarted", 1.0)], default_job="j")
    assert isinstance(attempt, Attempt) and attempt.end_reason is EndReason.EMULATOR_RESTARTED
    assert attempt.to_json()["end_reason"] == "EMULATOR_RESTARTED"
    assert attempt.to_json()["preemption"] is True
    assert EndReason.parse("what") is EndReason.UNKNOWN


# -- serving replica lives ----------------------------------------------------------------------


def _life(replica, life, reason, billable, *, strategy="SPOT", **extra):
    return {
        "deployedModelId": "42",
        "replica": replica,
        "life": life,
        "startTime": 1000.0 + 100 * life,
        "endTime": None if reason is None else 1000.0 + 100 * life + billable,
        "endReason": reason,
        "billableSeconds": billable,
        "machineType": "n1-standard-4",
        "strategy": strategy,
        **extra,
    }


def test_serving_lives_are_priced_and_counted_like_attempts():
    rates = hourly_rates([Pool("n1-standard-4")])
    rows = []
    for replica, life, reason, billable in [
        (0, 1, "PREEMPTED", 30.0),
        (0, 2, None, 90.0),
        (1, 1, "EMULATOR_RESTARTED", 50.0),
        (1, 2, "UNDEPLOYED", 70.0),
    ]:
        cost = attempt_cost(billable, rates, "SPOT").to_ledger()
        rows.append(_life(replica, life, reason, billable, endpoint="projects/1/e", **cost))
    lives = accounting.serving_lives(rows)
    assert [life.end_reason for life in lives] == [
        EndReason.PREEMPTED,
        EndReason.RUNNING,
        EndReason.EMULATOR_RESTARTED,
        EndReason.UNDEPLOYED,
    ]
    summary = accounting.summarize_serving(lives)
    assert summary.preemptions == 2 and summary.spot_lives == 4
    assert summary.billable_seconds == 240.0 and summary.endpoints == ("projects/1/e",)
    # The same function and the same sums as training attempts: 240 s of Spot replica time.
    whole = attempt_cost(240.0, rates, "SPOT")
    assert summary.costs is not None and summary.costs.spot_estimated
    assert summary.costs.paid_usd == pytest.approx(whole.paid_usd, abs=4e-6)
    assert summary.costs.on_demand_usd == pytest.approx(whole.on_demand_usd, abs=4e-6)
    low, high = accounting.spot_range(summary.costs.on_demand_usd)
    assert summary.costs.paid_low_usd == pytest.approx(low, abs=4e-6)
    assert summary.costs.paid_high_usd == pytest.approx(high, abs=4e-6)
    doc = summary.to_json()
    assert doc["replica_lives"] == 4 and doc["preemptions"] == 2
    assert doc["life_detail"][3]["end_reason"] == "UNDEPLOYED"


def test_standard_replicas_pay_on_demand_and_unpriced_lives_give_no_cost():
    rates = hourly_rates([Pool("n1-standard-4")])
    cost = attempt_cost(60.0, rates, "STANDARD").to_ledger()
    row = _life(0, 1, "UNDEPLOYED", 60.0, strategy="STANDARD", **cost)
    (life,) = accounting.serving_lives([row])
    assert life.cost is not None and life.cost.paid_usd == life.cost.on_demand_usd
    assert accounting.summarize_serving([life]).costs.savings_usd == 0.0
    unpriced = accounting.serving_lives([_life(0, 1, "PREEMPTED", 60.0)])
    assert accounting.summarize_serving(unpriced).costs is None


def test_a_bad_serving_field_is_named():
    with pytest.raises(AccountingError, match=r"serving\[0\]\.billableSeconds must be a number"):
        accounting.serving_lives([_life(0, 1, "PREEMPTED", 1.0) | {"billableSeconds": "long"}])
    with pytest.raises(AccountingError, match=r"serving\[0\] must be an object"):
        accounting.serving_lives(["row"])


@pytest.mark.parametrize("missing", ["spotCost", "onDemandCost"])
@pytest.mark.parametrize("strategy", ["SPOT", "STANDARD"])
def test_a_ledger_row_with_one_price_of_two_is_unpriced_not_free(missing, strategy):
    # The missing one was read as 0: a Spot attempt cost $0 and saved 100%, an on-demand one
    # showed savings below zero, where the row does not say what the attempt cost.
    row = _row(1, "SUCCEEDED", 3600.0, strategy=strategy, spotCost=0.1, onDemandCost=0.5)
    for absent in (None, ""):
        (attempt,) = ledger_attempts([{**row, missing: absent}], default_job="j")
        assert attempt.cost is None
        assert account(ledger=[attempt]).costs is None  # the report says "unknown"
    (priced,) = ledger_attempts([row], default_job="j")
    assert priced.cost is not None and priced.cost.on_demand_usd == 0.5


@pytest.mark.parametrize(
    ("pool", "says"),
    [
        (
            Pool("cloud-tpu", "TPU_V4_POD", 32),
            "no price for accelerator 'TPU_V4_POD' (on cloud-tpu)",
        ),
        (Pool("n1-standard-8", "NVIDIA_NEW_GPU", 1), "no price for accelerator 'NVIDIA_NEW_GPU'"),
        (Pool("cloud-tpu"), "no price for machine type 'cloud-tpu' without accelerators"),
        (Pool("no-such-machine"), "no price for machine type 'no-such-machine'"),
    ],
)
def test_a_pool_the_table_cannot_price_whole_has_no_rates_not_lower_ones(pool, says):
    # They were priced without the accelerator: a TPU v4 Pod slice cost $0 an hour, and a GPU
    # missing from the table cost what the bare VM does.
    with pytest.raises(accounting.UnknownPriceError, match=re.escape(says)):
        hourly_rates([Pool("n1-standard-4"), pool])
    # Priced whole: built-in accelerators, attached ones the table lists, TPU v3 per core.
    for priced in (
        Pool("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1),
        Pool("n1-standard-8", "NVIDIA_TESLA_T4", 2),
        Pool("cloud-tpu", "TPU_V3", 8),
    ):
        assert hourly_rates([priced]).on_demand_usd_per_hour > 0


@pytest.mark.parametrize(
    "last",
    [
        {"end_time": 230.0, "exit_reason": "preempted"},  # the trainer closed it after the SIGTERM
        {"updated_time": 220.0, "preemption_notice_time": 225.0, "grace_period": 30.0},  # killed
    ],
    ids=["closed", "killed"],
)
def test_a_cancelled_jobs_last_sigterm_is_the_cancel_not_a_preemption(last):
    """Cancelling a job sends the SIGTERM of a preemption notice; the job's end tells them apart.

    The earlier attempt of the same job, followed by another, stays a preemption.
    """
    records = checkpoints.parse_attempt_records(
        [
            {"attempt_id": "a", "start_time": 0.0, "end_time": 90.0, "exit_reason": "preempted"},
            {"attempt_id": "b", "start_time": 100.0, **last},
        ]
    )
    cancelled = JobRun("j", "SPOT", end_reason=EndReason.CANCELLED)
    summary = account(records=records, jobs=[cancelled])
    assert [a.end_reason for a in summary.attempts] == [EndReason.PREEMPTED, EndReason.CANCELLED]
    assert summary.preemptions == 1
    # the same records in a job that ran on: both are preemptions
    running = account(records=records, jobs=[JobRun("j", "SPOT")])
    assert [a.end_reason for a in running.attempts] == [EndReason.PREEMPTED] * 2
    assert running.preemptions == 2
