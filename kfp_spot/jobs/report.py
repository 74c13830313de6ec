"""The job report: attempts, preemptions, billable time, work lost, Spot vs on-demand cost, goodput.

Sources, best first: the emulator's billing ledger (one row per attempt, with prices); the attempt
records the trainer helper writes next to the checkpoints (Vertex does not say how often a job was
preempted); the CustomJobs' own timestamps with the machine price table.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kfp_spot import checkpoints
from kfp_spot.jobs.recovery import Submission

log = logging.getLogger(__name__)

_FINISHED = {"finished", "succeeded", "success", "completed"}
_PREEMPTED = {"preempted", "preemption", "stockout", "emulator_restarted"}


@dataclass
class Attempt:
    """One run of the training code on a VM (a job has one per service restart)."""

    job_name: str
    strategy: str
    start: float | None = None  # epoch seconds
    end: float | None = None
    end_reason: str = ""  # SUCCEEDED, PREEMPTED, FAILED, CANCELLED, RUNNING, UNKNOWN
    billable_seconds: float = 0.0
    spot_cost_usd: float | None = None
    on_demand_cost_usd: float | None = None
    first_step: int | None = None
    last_step: int | None = None
    work_lost_seconds: float = 0.0


@dataclass
class JobReport:
    """Everything the job_report Metrics artifact shows, and the per-attempt detail behind it."""

    outcome: str
    submissions: int
    attempts: int
    preemptions: int
    billable_seconds: float
    work_lost_seconds: float
    cost_spot_usd: float | None
    cost_on_demand_usd: float | None
    latest_step: int | None
    source: str  # ledger | attempt-records | job-timestamps
    attempt_detail: list[Attempt] = field(default_factory=list)
    submission_detail: list[Submission] = field(default_factory=list)

    @property
    def resubmissions(self) -> int:
        """Submissions after the first."""
        return max(0, self.submissions - 1)

    @property
    def savings_usd(self) -> float | None:
        """What running on Spot saved against the same billable time on demand."""
        if self.cost_spot_usd is None or self.cost_on_demand_usd is None:
            return None
        return self.cost_on_demand_usd - self.cost_spot_usd

    @property
    def goodput(self) -> float | None:
        """Useful training time / billable time (1.0 when no work was lost)."""
        if self.billable_seconds <= 0:
            return None
        useful = max(0.0, self.billable_seconds - self.work_lost_seconds)
        return useful / self.billable_seconds

    def metrics(self) -> dict[str, float]:
        """Scalar metrics for the Metrics artifact (log_metric style: name -> number)."""
        out: dict[str, float] = {
            "attempts": self.attempts,
            "preemptions": self.preemptions,
            "resubmissions": self.resubmissions,
            "submissions": self.submissions,
            "spot_attempts": sum(1 for a in self.attempt_detail if a.strategy == "SPOT"),
            "standard_attempts": sum(1 for a in self.attempt_detail if a.strategy != "SPOT"),
            "billable_seconds": round(self.billable_seconds, 3),
            "work_lost_seconds": round(self.work_lost_seconds, 3),
        }
        if self.cost_spot_usd is not None and self.cost_on_demand_usd is not None:
            out["cost_spot_usd"] = round(self.cost_spot_usd, 6)
            out["cost_on_demand_usd"] = round(self.cost_on_demand_usd, 6)
            out["savings_usd"] = round(self.savings_usd or 0.0, 6)
        if self.goodput is not None:
            out["goodput"] = round(self.goodput, 4)
        if self.latest_step is not None:
            out["latest_step"] = self.latest_step
        return out

    def to_json(self) -> dict[str, Any]:
        """The full report (written to the Metrics artifact's file)."""
        return {
            "outcome": self.outcome,
            "source": self.source,
            "metrics": self.metrics(),
            "strategy_per_attempt": [a.strategy for a in self.attempt_detail],
            "attempts": [asdict(a) for a in self.attempt_detail],
            "submissions": [asdict(s) for s in self.submission_detail],
        }


def parse_time(value: Any) -> float | None:
    """Epoch seconds from a number, an RFC 3339 string or a datetime; None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dt.datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        return stamp.timestamp()
    text = str(value).strip().replace("Z", "+00:00")
    # fromisoformat before 3.11 takes at most 6 fractional digits.
    if "." in text:
        head, _, tail = text.partition(".")
        digits = "".join(c for c in tail if c.isdigit())
        zone = tail[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    try:
        stamp = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.timezone.utc)
    return stamp.timestamp()


def fetch_ledger(
    base_url: str, job_name: str, timeout: float = 10.0
) -> list[dict[str, Any]] | None:
    """The emulator's ledger rows of ``job_name``, or None when the endpoint does not serve one."""
    url = f"{base_url}/emulator/v1/{job_name}/attempts"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            doc = json.loads(response.read())
    except (OSError, ValueError) as exc:
        log.info("no billing ledger at %s: %s", url, exc)
        return None
    rows = doc.get("attempts") if isinstance(doc, Mapping) else None
    return rows if isinstance(rows, list) else None


def fetch_log_tail(base_url: str, job_name: str, lines: int = 20, timeout: float = 10.0) -> str:
    """The last ``lines`` log lines of each replica of the job's last attempt (emulator only).

    Returns "" when the endpoint serves no logs (Vertex AI keeps them in Cloud Logging).
    """
    url = f"{base_url}/emulator/v1/{job_name}/logs?tail=16384"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            entries = json.loads(response.read()).get("logs") or []
    except (OSError, ValueError, AttributeError) as exc:
        log.info("no logs at %s: %s", url, exc)
        return ""
    if not entries:
        return ""
    last = max(int(e.get("attempt") or 0) for e in entries)
    parts = []
    for entry in entries:
        if int(entry.get("attempt") or 0) != last:
            continue
        text = "\n".join(str(entry.get("text") or "").rstrip().splitlines()[-lines:])
        if text:
            parts.append(f"--- {entry.get('replica')} (attempt {last}), last lines ---\n{text}")
    return "\n".join(parts)


def _record_reason(record: Mapping[str, Any]) -> str:
    for key in ("exit_reason", "end_reason", "reason", "status"):
        value = record.get(key)
        if value:
            return str(value).lower()
    return ""


def _record_step(record: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
    return None


def _commit_times(checkpoint_root: str) -> list[float]:
    try:
        return checkpoints.commit_times(checkpoint_root)
    except (OSError, ValueError) as exc:
        log.info("cannot list checkpoints under %s: %s", checkpoint_root, exc)
        return []


def _work_lost(start: float | None, end: float | None, commits: Sequence[float]) -> float:
    """Seconds of an interrupted attempt after its last commit (all of it if it never committed)."""
    if start is None or end is None or end <= start:
        return 0.0
    inside = [t for t in commits if start <= t <= end]
    return end - (max(inside) if inside else start)


def _prices(
    machine: str, accelerator_type: str, accelerator_count: int
) -> tuple[float, float] | None:
    try:
        from kfp_spot import machines  # the machine table (owned by the emulator's module)
    except ImportError:  # TODO(launcher): drop once kfp_spot.machines is on main
        return None
    try:
        spot = machines.hourly_price(machine, accelerator_type, accelerator_count, spot=True)
        on_demand = machines.hourly_price(machine, accelerator_type, accelerator_count, spot=False)
    except ValueError as exc:
        log.info("no price for %s: %s", machine, exc)
        return None
    return spot, on_demand


@dataclass(frozen=True)
class Hardware:
    """What one attempt bills for: every replica of every pool."""

    pools: tuple[tuple[str, str, int, int], ...]  # (machine, accelerator, count, replicas)

    def hourly(self) -> tuple[float, float] | None:
        """(Spot, on-demand) USD per hour of the whole job, or None when a price is unknown."""
        spot = on_demand = 0.0
        for machine, accelerator, count, replicas in self.pools:
            prices = _prices(machine, accelerator, count)
            if prices is None:
                return None
            spot += prices[0] * replicas
            on_demand += prices[1] * replicas
        return spot, on_demand


def build_report(
    *,
    outcome: str,
    submissions: Sequence[Submission],
    checkpoint_root: str,
    hardware: Hardware,
    ledgers: Mapping[str, list[dict[str, Any]] | None] | None = None,
) -> JobReport:
    """Put the report together from the best sources available.

    Args:
        outcome: the launch's outcome.
        submissions: every CustomJob of the launch, oldest first.
        checkpoint_root: where the checkpoints and attempt records are.
        hardware: the job's machines (for prices when the ledger has none).
        ledgers: ledger rows per job name (from the emulator), None for a job without one.
    """
    ledgers = ledgers or {}
    commits = _commit_times(checkpoint_root)
    latest = checkpoints.latest(checkpoint_root, check_hashes=False)
    records = checkpoints.read_attempt_records(checkpoint_root)
    strategy_of = {s.job_name: s.strategy for s in submissions}
    attempts: list[Attempt] = []
    source = "ledger"
    have_ledgers = all(ledgers.get(s.job_name) is not None for s in submissions if s.job_name)
    if submissions and have_ledgers:
        for sub in submissions:
            for row in ledgers.get(sub.job_name) or []:
                reason = str(row.get("endReason") or "RUNNING").upper()
                start, end = parse_time(row.get("startTime")), parse_time(row.get("endTime"))
                attempt = Attempt(
                    job_name=sub.job_name,
                    strategy=str(row.get("strategy") or strategy_of.get(sub.job_name, "")),
                    start=start,
                    end=end,
                    end_reason=reason,
                    billable_seconds=float(row.get("billableSeconds") or 0.0),
                    spot_cost_usd=_float_or_none(row.get("spotCost")),
                    on_demand_cost_usd=_float_or_none(row.get("onDemandCost")),
                )
                if reason in ("PREEMPTED", "EMULATOR_RESTARTED"):
                    attempt.work_lost_seconds = _work_lost(start, end, commits)
                attempts.append(attempt)
    elif records:
        source = "attempt-records"
        attempts = _attempts_from_records(records, submissions, commits)
    else:
        source = "job-timestamps"
        for sub in submissions:
            start, end = parse_time(sub.start_time), parse_time(sub.end_time)
            seconds = end - start if start is not None and end is not None and end > start else 0.0
            attempts.append(
                Attempt(sub.job_name, sub.strategy, start, end, sub.outcome or "RUNNING", seconds)
            )
    if source != "attempt-records":
        _fill_steps(attempts, records)
    _fill_costs(attempts, hardware)
    costs_known = all(
        a.spot_cost_usd is not None and a.on_demand_cost_usd is not None for a in attempts
    )
    return JobReport(
        outcome=outcome,
        submissions=len(submissions),
        attempts=len(attempts),
        preemptions=sum(1 for a in attempts if a.end_reason in ("PREEMPTED", "EMULATOR_RESTARTED")),
        billable_seconds=sum(a.billable_seconds for a in attempts),
        work_lost_seconds=sum(a.work_lost_seconds for a in attempts),
        cost_spot_usd=(
            sum(
                (a.spot_cost_usd if a.strategy == "SPOT" else a.on_demand_cost_usd) or 0.0
                for a in attempts
            )
            if costs_known and attempts
            else None
        ),
        cost_on_demand_usd=(
            sum(a.on_demand_cost_usd or 0.0 for a in attempts) if costs_known and attempts else None
        ),
        latest_step=latest.step if latest else None,
        source=source,
        attempt_detail=attempts,
        submission_detail=list(submissions),
    )


def _float_or_none(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _attempts_from_records(
    records: Sequence[Mapping[str, Any]],
    submissions: Sequence[Submission],
    commits: Sequence[float],
) -> list[Attempt]:
    """Attempts from the trainer's records; an attempt that never wrote its end was killed."""
    attempts = []
    for index, record in enumerate(records):
        start = parse_time(record.get("start_time"))
        end = parse_time(record.get("end_time"))
        reason = _record_reason(record)
        followed = index + 1 < len(records)
        if end is None:
            end = _killed_at(record, records[index + 1] if followed else None)
            if followed:
                reason = reason or "preempted"  # killed without a word, and training went on
        if reason in _FINISHED:
            end_reason = "SUCCEEDED"
        elif reason in _PREEMPTED or (followed and reason in ("", "running")):
            end_reason = "PREEMPTED"
        elif reason in ("error", "failed"):
            end_reason = "FAILED"
        else:
            end_reason = reason.upper() or "RUNNING"
        job_name = str(record.get("job_id") or record.get("job_name") or "")
        strategy = _strategy_at(start, submissions)
        billable = end - start if start is not None and end is not None and end > start else 0.0
        attempt = Attempt(job_name, strategy, start, end, end_reason, billable)
        attempt.first_step = _record_step(record, "first_step", "start_step", "resumed_from")
        attempt.last_step = _record_step(record, "last_committed_step", "last_step", "end_step")
        if end_reason == "PREEMPTED":
            attempt.work_lost_seconds = _work_lost(start, end, commits)
        attempts.append(attempt)
    return attempts


def _killed_at(record: Mapping[str, Any], following: Mapping[str, Any] | None) -> float | None:
    """When an attempt that never wrote its end stopped being billed.

    With a preemption notice on record: the notice plus the grace period (SIGKILL time), but not
    after the next attempt began. Without one: when the next attempt began, or the record's last
    sign of life (``updated_time``) when there is no next attempt.
    """
    next_start = parse_time(following.get("start_time")) if following else None
    notice = parse_time(record.get("preemption_notice_time"))
    if notice is not None:
        grace = record.get("grace_period")
        killed = notice + (float(grace) if isinstance(grace, (int, float)) else 0.0)
        return min(killed, next_start) if next_start is not None else killed
    if next_start is not None:
        return next_start
    return parse_time(record.get("updated_time"))


def _strategy_at(start: float | None, submissions: Sequence[Submission]) -> str:
    """The strategy of the submission running at ``start`` (the last one submitted before it)."""
    chosen = submissions[0].strategy if submissions else "SPOT"
    for sub in submissions:
        if start is not None and sub.submitted_at and sub.submitted_at <= start:
            chosen = sub.strategy
    return chosen


def _fill_steps(attempts: list[Attempt], records: Sequence[Mapping[str, Any]]) -> None:
    """Attach each trainer record's first/last step to the attempt it ran in.

    That is the attempt that started last before the record (the service starts an attempt's
    clock a little before its process starts).
    """
    timed = [a for a in attempts if a.start is not None]
    for record in records:
        start = parse_time(record.get("start_time"))
        if start is None:
            continue
        candidates = [a for a in timed if a.start is not None and a.start - 1.0 <= start]
        if not candidates:
            continue
        attempt = max(candidates, key=lambda a: a.start or 0.0)
        attempt.first_step = _record_step(record, "first_step", "start_step", "resumed_from")
        attempt.last_step = _record_step(record, "last_committed_step", "last_step", "end_step")


def _fill_costs(attempts: list[Attempt], hardware: Hardware) -> None:
    hourly = hardware.hourly()
    for attempt in attempts:
        if attempt.spot_cost_usd is not None and attempt.on_demand_cost_usd is not None:
            continue
        if hourly is None:
            continue
        hours = attempt.billable_seconds / 3600.0
        attempt.spot_cost_usd = hourly[0] * hours
        attempt.on_demand_cost_usd = hourly[1] * hours
