"""The job report (the ``job_report`` Metrics artifact): the accounting summary of one launch.

The figures and their definitions are :mod:`kfp_spot.accounting`'s (docs/reports.md); this module
gathers the launch's inputs to it (the backend's ledger when it has one, the trainer's attempt
records, the checkpoints' commit times, the submissions' timestamps, the machines' prices) and lays
the summary out as Metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kfp_spot import accounting, checkpoints
from kfp_spot.accounting import EndReason, JobRun, Pool, RegionSummary, Summary
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.jobs.recovery import Submission

if TYPE_CHECKING:  # GAPIC's types load where a job is read, not on import
    from google.cloud.aiplatform_v1.types.custom_job import CustomJob

log = logging.getLogger(__name__)

_END_OF_OUTCOME = {
    Outcome.SUCCEEDED: EndReason.SUCCEEDED,
    Outcome.PREEMPTED_EXHAUSTED: EndReason.PREEMPTED,
    Outcome.CANCELLED: EndReason.CANCELLED,
}


def job_run(sub: Submission) -> JobRun:
    """The accounting's view of one submission."""
    if sub.outcome is not None:
        end_reason = _END_OF_OUTCOME.get(sub.outcome, EndReason.FAILED)
    else:
        end_reason = EndReason.RUNNING
    return JobRun(
        name=sub.job_name,
        strategy=sub.strategy.value,  # the accounting keeps the API's names (ledger rows have any)
        submitted_at=sub.submitted_at or None,
        start=_time(sub.start_time),
        end=_time(sub.end_time),
        end_reason=end_reason,
    )


def _time(value: str) -> float | None:
    try:
        return accounting.parse_time(value)
    except accounting.AccountingError:
        return None


@dataclass
class JobReport:
    """Everything the job_report Metrics artifact shows, and the per-attempt detail behind it."""

    outcome: Outcome
    summary: Summary
    latest_step: int | None
    submission_detail: list[Submission] = field(default_factory=list)
    regions: RegionSummary | None = None  # attempts and costs per region, failovers, copies

    @property
    def submissions(self) -> int:
        """CustomJobs submitted."""
        return len(self.submission_detail)

    @property
    def resubmissions(self) -> int:
        """Submissions after the first."""
        return max(0, self.submissions - 1)

    def metrics(self) -> dict[str, float]:
        """Scalar metrics for the Metrics artifact (log_metric style: name -> number).

        A figure that is unknown (no price, no commit information) is left out, never zeroed.
        """
        s = self.summary
        out: dict[str, float] = {
            "attempts": s.attempt_count,
            "resubmissions": self.resubmissions,
            "submissions": self.submissions,
            "spot_attempts": s.spot_attempts,
            "standard_attempts": s.attempt_count - s.spot_attempts,
            "billable_seconds": round(s.billable_seconds, 3),
        }
        if s.preemptions is not None:
            out["preemptions"] = s.preemptions
        if s.lost_seconds is not None:
            out["work_lost_seconds"] = round(s.lost_seconds, 3)
        if s.costs is not None:
            out["cost_spot_usd"] = round(s.costs.paid_usd, 6)
            out["cost_on_demand_usd"] = round(s.costs.on_demand_usd, 6)
            out["savings_usd"] = round(s.costs.savings_usd, 6)
            if s.costs.spot_estimated:
                out["cost_spot_usd_low"] = round(s.costs.paid_low_usd, 6)
                out["cost_spot_usd_high"] = round(s.costs.paid_high_usd, 6)
        if s.goodput is not None:
            out["goodput"] = round(s.goodput, 4)
        if self.latest_step is not None:
            out["latest_step"] = self.latest_step
        r = self.regions
        if r is not None:
            out["regions_used"] = r.regions_used
            out["failovers"] = len(r.failovers)
            if r.copy_usd is not None:
                out["cost_copy_usd"] = r.copy_usd
            if r.home_on_demand_usd is not None:
                out["cost_on_demand_home_usd"] = round(r.home_on_demand_usd, 6)
        return out

    def to_json(self) -> dict[str, Any]:
        """The full report (written to the Metrics artifact's file)."""
        summary = self.summary.to_json()
        attempts = summary.pop("attempt_detail")
        return {
            "outcome": self.outcome.value,
            "source": self.summary.source.value,
            "metrics": self.metrics(),
            "summary": summary,
            "pricing": accounting.SPOT_PRICE_NOTE,
            "strategy_per_attempt": [a.strategy for a in self.summary.attempts],
            "attempts": attempts,
            "submissions": [s.to_json() for s in self.submission_detail],
            "regions": self.regions.to_json() if self.regions is not None else None,
        }


def pools_of(job: CustomJob) -> list[Pool]:
    """What one attempt of ``job`` bills for."""
    from google.cloud.aiplatform_v1.types.accelerator_type import AcceleratorType

    pools = []
    for pool in job.job_spec.worker_pool_specs:
        if not pool.replica_count:
            continue
        accelerator = pool.machine_spec.accelerator_type
        pools.append(
            Pool(
                machine_type=pool.machine_spec.machine_type,
                accelerator_type=AcceleratorType(accelerator).name if accelerator else "",
                accelerator_count=int(pool.machine_spec.accelerator_count),
                replica_count=int(pool.replica_count),
            )
        )
    return pools


def rates_of(pools: Sequence[Pool]) -> accounting.Rates | None:
    """The job's hourly rates, or None (logged) when a machine type has no price."""
    try:
        return accounting.hourly_rates(pools)
    except accounting.UnknownPriceError as exc:
        log.info("costs left out of the report: %s", exc)
        return None


def build_report(
    *,
    outcome: Outcome,
    submissions: Sequence[Submission],
    checkpoint_root: str,
    pools: Sequence[Pool],
    ledgers: Mapping[str, Sequence[Mapping[str, Any]] | None] | None = None,
    home_region: str = "",
    copied_home_bytes: int = 0,
) -> JobReport:
    """Put the report together from the best sources available.

    Args:
        outcome: the launch's outcome.
        submissions: every CustomJob of the launch, oldest first.
        checkpoint_root: where the checkpoints and attempt records are.
        pools: the job's machines (for prices where the ledger has none).
        ledgers: ledger rows per job name (the backend's), None for a job without one.
        home_region: the first region of the launch's order (default: the first submission's).
        copied_home_bytes: bytes copied back into the home region at the end (the newest step
            and the model, after a job elsewhere).
    """
    jobs = [job_run(s) for s in submissions if s.job_name]
    ledgers = ledgers or {}
    ledger = None
    if jobs and all(ledgers.get(j.name) is not None for j in jobs):
        try:
            ledger = [
                attempt
                for j in jobs
                for attempt in accounting.ledger_attempts(
                    ledgers[j.name] or [],
                    where=f"ledger of {j.name}",
                    default_job=j.name,
                    strategy_of={j.name: j.strategy},
                )
            ]
        except accounting.AccountingError as exc:
            log.warning("ignoring the billing ledger: %s", exc)
    summary = accounting.account(
        ledger=ledger,
        records=accounting.read_records(checkpoint_root),
        commits=accounting.read_commits(checkpoint_root),
        jobs=jobs,
        rates=rates_of(pools),
    )
    latest = checkpoints.latest(checkpoint_root, check_hashes=False)
    named = [s for s in submissions if s.job_name]
    # The first job runs in the first region of the order; a region "" (a state written before
    # regions) leaves it to the job's name.
    home = home_region or (named[0].region if named else "")
    return JobReport(
        outcome=outcome,
        summary=summary,
        latest_step=latest.step if latest else None,
        submission_detail=list(submissions),
        regions=accounting.summarize_regions(
            summary.attempts,
            job_names=[s.job_name for s in named],
            job_regions={s.job_name: s.region for s in named if s.region},
            home=home,
            copied_bytes={s.job_name: s.copied_bytes for s in named if s.copied_bytes},
            copied_home_bytes=copied_home_bytes,
        ),
    )
