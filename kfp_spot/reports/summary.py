"""The numbers of a run (cost, savings, goodput) and its Markdown summary."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from kfp_spot.reports.run import (
    PREEMPTED,
    AttemptRecord,
    CheckpointSave,
    RunData,
    last_commit_in,
)


@dataclass(frozen=True)
class RunSummary:
    """What a run cost and how much of the billed time made lasting progress."""

    attempts: int
    preemptions: int
    billable_seconds: float
    queued_seconds: float
    spot_cost: float
    on_demand_cost: float
    savings: float
    savings_fraction: float | None  # savings / on-demand cost; None when that is 0
    kept_seconds: float | None  # training time whose progress a committed checkpoint kept
    lost_seconds: float | None  # training time after an attempt's last commit, redone later
    goodput: float | None  # kept_seconds / billable_seconds, in [0, 1]
    checkpoints: int
    latest_step: int | None
    final_loss: float | None


def _kept_and_lost(
    attempt: AttemptRecord, saves: list[CheckpointSave]
) -> tuple[float, float] | None:
    """Seconds of ``attempt`` whose progress was kept, and seconds lost after its last commit."""
    if attempt.start is None or attempt.end is None or attempt.end < attempt.start:
        return None
    duration = attempt.end - attempt.start
    if attempt.exit_reason == "finished":
        return duration, 0.0
    last = last_commit_in(attempt, saves)
    kept = (last - attempt.start) if last is not None else 0.0
    return kept, duration - kept


def summarize(run: RunData) -> RunSummary:
    """Compute the report's numbers from the ledger, attempt records and checkpoints.

    Cost and savings are sums over the ledger rows (what the service billed). Goodput is the
    share of billed seconds whose training progress survived: a finished attempt keeps all its
    time; an interrupted one keeps the time up to the last checkpoint it committed, and the rest
    is lost (redone by the next attempt). None when there are no attempt records or no billed time.
    """
    ledger = run.ledger
    billable = math.fsum(r.billable_seconds for r in ledger)
    spot = math.fsum(r.spot_cost for r in ledger)
    on_demand = math.fsum(r.on_demand_cost for r in ledger)
    savings = math.fsum(r.savings for r in ledger)
    spans = [s for s in (_kept_and_lost(a, run.saves) for a in run.attempts) if s is not None]
    kept = math.fsum(k for k, _ in spans) if spans else None
    lost = math.fsum(lost for _, lost in spans) if spans else None
    goodput = None
    if kept is not None and billable > 0:
        goodput = min(1.0, max(0.0, kept / billable))
    losses = [s.loss for s in sorted(run.saves, key=lambda s: s.step) if s.loss is not None]
    return RunSummary(
        attempts=len(ledger),
        preemptions=sum(1 for r in ledger if r.end_reason == PREEMPTED),
        billable_seconds=billable,
        queued_seconds=math.fsum(r.queued_seconds for r in ledger),
        spot_cost=spot,
        on_demand_cost=on_demand,
        savings=savings,
        savings_fraction=(savings / on_demand) if on_demand > 0 else None,
        kept_seconds=kept,
        lost_seconds=lost,
        goodput=goodput,
        checkpoints=len(run.saves),
        latest_step=max((s.step for s in run.saves), default=None),
        final_loss=losses[-1] if losses else None,
    )


def money(value: float) -> str:
    """USD with six decimals (emulated runs cost fractions of a cent)."""
    return f"${value:,.6f}"


def seconds(value: float | None) -> str:
    """Seconds with one decimal, or ``-``."""
    return "-" if value is None else f"{value:.1f} s"


def percent(value: float | None) -> str:
    """A fraction as a percentage with one decimal, or ``-``."""
    return "-" if value is None else f"{100 * value:.1f}%"


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch)) + f".{int(epoch % 1 * 10)}Z"


def _gate(passed: object) -> str:
    if isinstance(passed, bool):
        return "passed" if passed else "failed"
    return "-"


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _serving_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The serving ledger: Spot (or standard) replica lives of the run's endpoints, with costs."""
    spot = math.fsum(float(r.get("spotCost", 0)) for r in rows)
    on_demand = math.fsum(float(r.get("onDemandCost", 0)) for r in rows)
    lines = [
        "## Serving replicas (serving ledger)",
        "",
        f"{len(rows)} replica lives, {seconds(math.fsum(r['billableSeconds'] for r in rows))} "
        f"billed: {money(spot)} on Spot vs {money(on_demand)} on demand; "
        f"{sum(r.get('endReason') == 'PREEMPTED' for r in rows)} preempted.",
        "",
        "| Deployed model | Replica | Life | End reason | Billable | Strategy | Spot | On-demand |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {_cell(r.get('deployedModelId', '-'))} | {r.get('replica')} | {r.get('life')} "
            f"| {_cell(r.get('endReason') or 'running')} | {seconds(r['billableSeconds'])} "
            f"| {_cell(r.get('strategy', '-'))} | {money(float(r.get('spotCost', 0)))} "
            f"| {money(float(r.get('onDemandCost', 0)))} |"
        )
    return lines


def render_markdown(run: RunData, summary: RunSummary, *, timeline: str | None = None) -> str:
    """The Markdown summary of a run.

    Args:
        run: the run.
        summary: its numbers (from :func:`summarize`).
        timeline: relative path of the timeline PNG to embed, if any.

    Returns:
        The Markdown text.
    """
    lines = [
        f"# kfp-spot run report: {_cell(run.job_name)}",
        "",
        "| | |",
        "| --- | --- |",
        f"| Outcome | **{_cell(run.outcome)}** |",
        f"| CustomJobs | {_cell(', '.join(run.job_names) or '-')} |",
        f"| Started | {_when(run.started)} |",
        f"| Finished | {_when(run.finished)} |",
        f"| Attempts | {summary.attempts} |",
        f"| Preemptions | {summary.preemptions} |",
        f"| Checkpoints committed | {summary.checkpoints} |",
        f"| Latest step | {'-' if summary.latest_step is None else summary.latest_step} |",
        f"| Final loss | {'-' if summary.final_loss is None else f'{summary.final_loss:.6g}'} |",
        f"| Quality gate | {_gate(run.passed)} |",
        "",
    ]
    if timeline:
        lines += [f"![timeline]({timeline})", ""]
    lines += [
        "## Cost",
        "",
        "| | |",
        "| --- | --- |",
        f"| Spot cost (billed) | {money(summary.spot_cost)} |",
        f"| On-demand cost (same time) | {money(summary.on_demand_cost)} |",
        f"| Savings | {money(summary.savings)} ({percent(summary.savings_fraction)}) |",
        f"| Billable time | {seconds(summary.billable_seconds)} |",
        f"| Queued time (not billed) | {seconds(summary.queued_seconds)} |",
        "",
        "## Goodput",
        "",
        "| | |",
        "| --- | --- |",
        f"| Goodput | {percent(summary.goodput)} |",
        f"| Training time kept by checkpoints | {seconds(summary.kept_seconds)} |",
        f"| Training time lost to preemption | {seconds(summary.lost_seconds)} |",
        "",
        "Goodput is the share of billed time whose training progress survived: a finished attempt "
        "keeps all its time, an interrupted one keeps the time up to its last committed "
        "checkpoint.",
        "",
        "## Attempts (billing ledger)",
        "",
    ]
    if run.ledger:
        lines += [
            "| Job | # | Start | End | End reason | Billable | Queued | Machine | Spot "
            "| On-demand |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in run.ledger:
            lines.append(
                f"| {_cell(row.job.rsplit('/', 1)[-1] or '-')} | {row.attempt} "
                f"| {_when(row.start)} | {_when(row.end)} | {_cell(row.end_reason)} "
                f"| {seconds(row.billable_seconds)} | {seconds(row.queued_seconds)} "
                f"| {_cell(row.machine_type or '-')} x{row.replica_count} "
                f"| {money(row.spot_cost)} | {money(row.on_demand_cost)} |"
            )
    else:
        lines.append("No ledger rows: the run never started a CustomJob attempt.")
    if run.serving:
        lines += ["", *_serving_lines(run.serving)]
    lines += ["", "## Training attempts (attempt records)", ""]
    if run.attempts:
        lines += [
            "| Attempt | Start | End | First step | Last committed step | Exit |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for a in run.attempts:
            first = "-" if a.first_step is None else a.first_step
            last = "-" if a.last_committed_step is None else a.last_committed_step
            lines.append(
                f"| {_cell(a.attempt_id)} | {_when(a.start)} | {_when(a.end)} | {first} | {last} "
                f"| {_cell(a.exit_reason)} |"
            )
    else:
        lines.append("No attempt records under the checkpoint root.")
    numeric = {
        k: v
        for k, v in run.metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    if numeric:
        lines += ["", "## Evaluation metrics", "", "| Metric | Value |", "| --- | --- |"]
        lines += [f"| {_cell(k)} | {v:.6g} |" for k, v in sorted(numeric.items())]
    return "\n".join(lines) + "\n"
