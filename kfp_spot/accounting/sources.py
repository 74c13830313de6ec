"""Attempts from each source, and :func:`account`, which picks the best one and summarizes.

Sources, best first:

1. the billing ledger (the emulator's ``/attempts`` rows: one per attempt, with costs);
2. the trainer's attempt records under ``<checkpoints>/_attempts/`` (Vertex AI does not say how
   often it restarted a job; a trainer that records its attempts does);
3. the CustomJobs' own start and end times (one row per job; preemptions unknown).

Whatever the source, steps come from the trainer's records, commit times from the checkpoints,
and missing costs from the machine price table.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kfp_spot.accounting.fields import AccountingError, number, parse_time
from kfp_spot.accounting.model import Attempt, EndReason, Source, Summary, VmRuns, summarize
from kfp_spot.accounting.pricing import AttemptCost, Rates, attempt_cost, is_spot
from kfp_spot.checkpoints import AttemptRecord, ExitReason

log = logging.getLogger(__name__)

# The service starts an attempt's clock a little before its process writes its record.
_RECORD_SLACK_SECONDS = 1.0


@dataclass(frozen=True)
class JobRun:
    """One CustomJob of a launch, as the launcher knows it."""

    name: str
    strategy: str
    submitted_at: float | None = None
    start: float | None = None
    end: float | None = None
    end_reason: EndReason = EndReason.RUNNING


def ledger_attempts(
    rows: Sequence[Any],
    *,
    where: str = "ledger",
    default_job: str = "",
    strategy_of: Mapping[str, str] | None = None,
) -> list[Attempt]:
    """Attempts from ledger rows (camelCase, as the emulator's ``/attempts`` serves them).

    Args:
        rows: the rows; a row's optional ``job`` names its CustomJob.
        where: how errors name the rows (``run.json: ledger``).
        default_job: the job of rows without ``job``.
        strategy_of: each job's strategy, for rows that do not carry one.

    Raises:
        AccountingError: a row or field of the wrong type (the message names it).
    """
    out = []
    for index, row in enumerate(rows):
        at = f"{where}[{index}]"
        if not isinstance(row, Mapping):
            raise AccountingError(f"{at} must be an object, got {type(row).__name__}")
        job = str(row.get("job") or default_job)
        strategy = str(row.get("strategy") or (strategy_of or {}).get(job) or "").upper()
        billable = number(row, "billableSeconds", at)
        cost = row_cost(row, at, strategy)
        out.append(
            Attempt(
                job_name=job,
                number=int(number(row, "attempt", at)),
                strategy=strategy,
                start=parse_time(row.get("startTime"), f"{at}.startTime"),
                end=parse_time(row.get("endTime"), f"{at}.endTime"),
                end_reason=EndReason.parse(row.get("endReason") or "RUNNING"),
                billable_seconds=billable,
                queued_seconds=number(row, "queuedSeconds", at),
                machine_type=str(row.get("machineType") or ""),
                replica_count=int(number(row, "replicaCount", at, default=1)),
                cost=cost,
                vms=_vms(row.get("vms"), f"{at}.vms"),
            )
        )
    return out


def row_cost(row: Mapping[str, Any], where: str, strategy: str) -> AttemptCost | None:
    """The cost fields of a ledger row (``spotCost``, ``onDemandCost``, ``cost``); None without.

    A row that carries one of the two prices and not the other (written by hand, cut short) is
    unpriced too: the missing one read as 0 showed a Spot attempt that cost nothing, or savings
    below zero, where the cost is unknown.

    Raises:
        AccountingError: a cost field that is not a number (the message names it).
    """
    spot_usd = number(row, "spotCost", where)  # a field given is a number, or it is named
    on_demand_usd = number(row, "onDemandCost", where)
    if any(row.get(key) in (None, "") for key in ("spotCost", "onDemandCost")):
        return None
    spot = is_spot(strategy)
    paid = number(row, "cost", where, default=spot_usd if spot else on_demand_usd)
    return AttemptCost(spot_usd, on_demand_usd, paid, on_demand_usd - paid, spot)


def _vms(value: Any, where: str) -> tuple[VmRuns, ...]:
    """A ledger row's optional per-VM detail (docs/emulator.md): each replica's runs."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise AccountingError(f"{where} must be a list, got {type(value).__name__}")
    out = []
    for index, vm in enumerate(value):
        at = f"{where}[{index}]"
        runs_json = vm.get("runs") if isinstance(vm, Mapping) else None
        if not isinstance(runs_json, list):
            raise AccountingError(f"{at} must be an object with a list of runs")
        runs = []
        for i, run in enumerate(runs_json):
            if not isinstance(run, Mapping):
                raise AccountingError(f"{at}.runs[{i}] must be an object")
            start = parse_time(run.get("startTime"), f"{at}.runs[{i}].startTime")
            if start is not None:
                runs.append((start, parse_time(run.get("endTime"), f"{at}.runs[{i}].endTime")))
        out.append(VmRuns(str(vm.get("replica") or "?"), tuple(runs)))
    return tuple(out)


def record_attempts(records: Sequence[AttemptRecord], jobs: Sequence[JobRun]) -> list[Attempt]:
    """Attempts from the trainer's records (by start time), in the jobs they ran in.

    A record never closed ended as :func:`record_end_reason` says: a preemption when its notice
    is on record, else its job's end when it is the job's last record and the job ended, else
    UNKNOWN when another attempt followed it, else RUNNING.
    """
    attempts = []
    per_job: dict[str, int] = {}
    owners = [_job_of(record, jobs) for record in records]
    for index, record in enumerate(records):
        following = records[index + 1] if index + 1 < len(records) else None
        end = record.end_time if record.end_time is not None else _killed_at(record, following)
        job = owners[index]
        last_of_job = all(owner is not job for owner in owners[index + 1 :])
        end_reason = record_end_reason(
            record,
            followed=following is not None,
            job_end=job.end_reason if job is not None and last_of_job else None,
        )
        job_name = job.name if job else record.job_id or ""
        per_job[job_name] = per_job.get(job_name, 0) + 1
        billable = end - record.start_time if end is not None else 0.0
        attempts.append(
            Attempt(
                job_name=job_name,
                number=per_job[job_name],
                strategy=job.strategy if job else "",
                start=record.start_time,
                end=end,
                end_reason=end_reason,
                billable_seconds=max(0.0, billable),
                first_step=record.first_step,
                last_step=record.last_committed_step,
            )
        )
    return attempts


def record_end_reason(
    record: AttemptRecord, *, followed: bool, job_end: EndReason | None = None
) -> EndReason:
    """How the attempt of ``record`` ended.

    A closed record says so itself. One never closed was killed, or is still running: a
    preempted trainer gets Spot's notice (SIGTERM, ~30 s before the VM stops) and records it
    at once, so without a notice on record nothing says it was preempted; an OOM kill, a
    replica the service restarted after a non-zero exit, a VM that vanished look alike.

    Cancelling a job stops its containers with the same SIGTERM, which the trainer records as
    a preemption notice: the last record of a job that ended CANCELLED ended by the cancel, not
    by a preemption (the notice was the cancel's), so it is not counted as one.

    Args:
        record: the attempt's record.
        followed: another attempt began after it (so it ended).
        job_end: how its job ended, when this is the job's last record (RUNNING: the job runs
            on); None when unknown or not its last record.

    Returns:
        For a record never closed: PREEMPTED with a notice on record; else ``job_end`` when the
        job ended; else UNKNOWN when it was followed (it ended without a record of why), else
        RUNNING (nothing says it ended: never counted as ended). CANCELLED instead of PREEMPTED
        where ``job_end`` is CANCELLED.
    """
    if record.exit_reason is ExitReason.FINISHED:
        return EndReason.SUCCEEDED
    noticed = record.exit_reason is ExitReason.PREEMPTED or (
        record.exit_reason is None and record.preemption_notice_time is not None
    )
    if noticed and job_end is EndReason.CANCELLED:
        return EndReason.CANCELLED  # the cancel's SIGTERM, recorded as a notice
    if record.exit_reason is ExitReason.PREEMPTED:
        return EndReason.PREEMPTED
    if record.exit_reason is ExitReason.ERROR:
        return EndReason.FAILED
    if record.preemption_notice_time is not None:
        return EndReason.PREEMPTED  # as a record closed after the notice says
    if job_end is not None and job_end is not EndReason.RUNNING:
        return job_end
    return EndReason.UNKNOWN if followed else EndReason.RUNNING


def _killed_at(record: AttemptRecord, following: AttemptRecord | None) -> float | None:
    """When an attempt that never wrote its end stopped being billed.

    With a preemption notice on record: the notice plus the grace period (SIGKILL time), but not
    after the next attempt began. Without one: when the next attempt began, or the record's last
    sign of life (``updated_time``) when there is no next attempt.
    """
    next_start = following.start_time if following else None
    if record.preemption_notice_time is not None:
        killed = record.preemption_notice_time + (record.grace_period or 0.0)
        return min(killed, next_start) if next_start is not None else killed
    if next_start is not None:
        return next_start
    return record.updated_time


def _job_of(record: AttemptRecord, jobs: Sequence[JobRun]) -> JobRun | None:
    """The job a record ran in: by its job id, else the last one submitted before it started."""
    if record.job_id:
        for job in jobs:
            if job.name == record.job_id or job.name.endswith(f"/{record.job_id}"):
                return job
    chosen = jobs[0] if jobs else None
    for job in jobs:
        if job.submitted_at and job.submitted_at <= record.start_time:
            chosen = job
    return chosen


def job_attempts(jobs: Sequence[JobRun]) -> list[Attempt]:
    """One row per CustomJob from its own start and end times.

    An upper bound on billed time: the service does not bill the gaps between its restarts,
    which this source cannot see.
    """
    out = []
    for job in jobs:
        seconds = job.end - job.start if job.start is not None and job.end is not None else 0.0
        out.append(
            Attempt(
                job_name=job.name,
                number=0,
                strategy=job.strategy,
                start=job.start,
                end=job.end,
                end_reason=job.end_reason,
                billable_seconds=max(0.0, seconds),
                # The service's restarts inside a job, and the work they lost, are invisible here.
                lost_seconds=None if seconds > 0 else 0.0,
            )
        )
    return out


def _with_steps(attempts: list[Attempt], records: Sequence[AttemptRecord]) -> list[Attempt]:
    """Attach each record's first/last step to the attempt that started last before it."""
    steps: dict[int, tuple[int | None, int | None]] = {}
    for record in records:
        best = None
        for index, attempt in enumerate(attempts):
            if attempt.start is None or attempt.start - _RECORD_SLACK_SECONDS > record.start_time:
                continue
            if best is None or (attempts[best].start or 0.0) < attempt.start:
                best = index
        if best is not None:
            steps[best] = (record.first_step, record.last_committed_step)
    return [
        dataclasses.replace(a, first_step=steps[i][0], last_step=steps[i][1]) if i in steps else a
        for i, a in enumerate(attempts)
    ]


def lost_seconds(
    attempt: Attempt, commits: Sequence[float], *, records_known: bool
) -> float | None:
    """Billed time of ``attempt`` after its last commit (the definition in the model's docstring).

    Args:
        attempt: the attempt.
        commits: every checkpoint commit time of the run.
        records_known: whether the trainer keeps attempt records (so a commit would be known).
    """
    if attempt.end_reason.keeps_all_work or attempt.billable_seconds <= 0:
        return 0.0
    if attempt.start is None or attempt.end is None:
        return None
    inside = [t for t in commits if attempt.start <= t <= attempt.end]
    if inside:
        return min(attempt.billable_seconds, max(0.0, attempt.end - max(inside)))
    return attempt.billable_seconds if records_known else None


def account(
    *,
    ledger: Sequence[Attempt] | None = None,
    records: Sequence[AttemptRecord] = (),
    commits: Sequence[float] = (),
    jobs: Sequence[JobRun] = (),
    rates: Rates | None = None,
) -> Summary:
    """The summary of a launch or run from the best source available.

    Args:
        ledger: attempts from the billing ledger (:func:`ledger_attempts`), or None without one.
        records: the trainer's attempt records (:func:`read_records`).
        commits: checkpoint commit times (:func:`read_commits`).
        jobs: the CustomJobs, in submission order.
        rates: the job's hourly rates, for attempts the ledger did not price (None: unknown).
    """
    if ledger is not None and (ledger or not records):
        source, attempts = Source.LEDGER, _with_steps(list(ledger), records)
    elif records:
        source, attempts = Source.ATTEMPT_RECORDS, record_attempts(records, jobs)
    else:
        source, attempts = Source.JOB_TIMESTAMPS, job_attempts(jobs)
    records_known = bool(records)
    filled = []
    for attempt in attempts:
        cost = attempt.cost
        if cost is None and rates is not None:
            cost = attempt_cost(attempt.billable_seconds, rates, attempt.strategy)
        lost = attempt.lost_seconds
        if source is not Source.JOB_TIMESTAMPS:
            lost = lost_seconds(attempt, commits, records_known=records_known)
        filled.append(dataclasses.replace(attempt, cost=cost, lost_seconds=lost))
    return summarize(source, filled)
