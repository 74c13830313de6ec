"""The numbers of a run (the accounting summary plus checkpoints) and its Markdown summary."""

from __future__ import annotations

import time
from dataclasses import dataclass

from kfp_spot import accounting
from kfp_spot.accounting import EndReason, RegionSummary, ServingSummary, Summary, usd
from kfp_spot.evaluation.metric_values import as_number
from kfp_spot.reports.evaluations import gate_count
from kfp_spot.reports.run import RunData


@dataclass(frozen=True)
class RunSummary:
    """What a run cost, how much of the billed time made lasting progress, and what it saved.

    Attributes:
        accounting: the one accounting summary (:mod:`kfp_spot.accounting`); every cost, count
            and goodput figure below comes from it.
        checkpoints: committed checkpoint steps still on disk (retention may have deleted more).
        latest_step: the newest committed step (from the attempt records if it is gone).
        final_loss: the newest value of the charted metric (``RunData.metric_name``: ``loss``,
            or the trainer's own metric when it records no loss) among the steps that have one.
        serving: the serving replicas' summary, when the run deployed a model.
        regions: attempts and costs per region, failovers and the home region's baseline.
    """

    accounting: Summary
    checkpoints: int
    latest_step: int | None
    final_loss: float | None
    serving: ServingSummary | None = None
    resumed_from: tuple[int, ...] = ()  # the steps attempts resumed from, whatever retention did
    regions: RegionSummary | None = None

    @property
    def attempts(self) -> int:
        """Billed attempts."""
        return self.accounting.attempt_count

    @property
    def preemptions(self) -> int | None:
        """Preempted attempts (emulator restarts included); None when unknown."""
        return self.accounting.preemptions

    @property
    def billable_seconds(self) -> float:
        """Σ billable seconds."""
        return self.accounting.billable_seconds

    @property
    def cost(self) -> float | None:
        """What the run paid (USD); None when a price is unknown."""
        return self.accounting.costs.paid_usd if self.accounting.costs else None

    @property
    def on_demand_cost(self) -> float | None:
        """The same billable time on demand (USD)."""
        return self.accounting.costs.on_demand_usd if self.accounting.costs else None

    @property
    def savings(self) -> float | None:
        """On-demand cost minus what was paid (USD)."""
        return self.accounting.costs.savings_usd if self.accounting.costs else None

    @property
    def kept_seconds(self) -> float | None:
        """Billed time whose progress was kept."""
        return self.accounting.kept_seconds

    @property
    def lost_seconds(self) -> float | None:
        """Billed time after an attempt's last commit; None when unknown."""
        return self.accounting.lost_seconds

    @property
    def goodput(self) -> float | None:
        """Kept / billable time; None when unknown."""
        return self.accounting.goodput


def summarize(run: RunData) -> RunSummary:
    """The run's numbers: the accounting summary plus its checkpoints and final metric value."""
    losses = [s.loss for s in sorted(run.saves, key=lambda s: s.step) if s.loss is not None]
    kept = run.kept_commits
    summary = run.account()
    return RunSummary(
        accounting=summary,
        checkpoints=len(run.saves),
        latest_step=max((c.step for c in kept), default=None),
        final_loss=losses[-1] if losses else None,
        serving=run.account_serving(),
        resumed_from=tuple(c.step for c in kept if c.resumed_from),
        regions=run.account_regions(summary),
    )


NO_TRAINING = "none (the pipeline launched no CustomJob)"
"""What the report and the printed summary say of a run's training when it launched none."""


def seconds(value: float | None) -> str:
    """Seconds to one decimal, a nonzero time under 0.05 s to two digits (not 0.0), or unknown."""
    return "unknown" if value is None else f"{value:{'.2g' if 0 < abs(value) < 0.05 else '.1f'}} s"


def percent(value: float | None) -> str:
    """A fraction as a percentage with one decimal, or ``-``."""
    return "-" if value is None else f"{100 * value:.1f}%"


def preemptions_text(summary: Summary) -> str:
    """The preemption count, saying how many were emulator restarts."""
    if summary.preemptions is None:
        return "unknown (the service does not report its restarts)"
    restarts = sum(1 for a in summary.attempts if a.end_reason is EndReason.EMULATOR_RESTARTED)
    if restarts:
        return f"{summary.preemptions} ({restarts} of them emulator restarts)"
    return str(summary.preemptions)


def _newer(steps: list[int]) -> str:  # steps a newer kfp-spot wrote: not read, not counted
    named = ", ".join(map(str, steps))
    return f" (and in a newer format, not read: step {named}; upgrade kfp-spot)" if steps else ""


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch)) + f".{int(epoch % 1 * 10)}Z"


def _gate(passed: object) -> str:
    if isinstance(passed, bool):
        return "passed" if passed else "failed"
    return "-"


def _run_gate(run: RunData) -> str:
    """The run's gate; for a sweep the pipeline returns no verdict of, each evaluation's count."""
    several = run.evaluations if len(run.evaluations) > 1 else []
    if run.passed is None and several:
        return gate_count(several)
    return _gate(run.passed)


def _final(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _cost_rows(summary: Summary) -> list[str]:
    return _cost_rows_of(
        summary.costs, summary.billable_seconds, "the run", summary.cost_unknown_reason
    )


def _cost_rows_of(
    costs: accounting.Costs | None,
    billable: float,
    payer: str,
    unknown: str = accounting.UNKNOWN_PRICE,
) -> list[str]:
    if costs is None:
        return [
            f"| Cost | unknown: {unknown} |",
            f"| Billable time | {seconds(billable)} |",
        ]
    rows = [f"| Cost (what {payer} paid) | {usd(costs.paid_usd)} |"]
    if costs.spot_estimated:
        rows.append(
            f"| Cost range at 60-91% Spot discounts | {usd(costs.paid_low_usd)} to "
            f"{usd(costs.paid_high_usd)} |"
        )
    rows += [
        f"| On-demand cost (same time) | {usd(costs.on_demand_usd)} |",
        f"| Savings | {usd(costs.savings_usd)} ({percent(costs.savings_fraction)}) |",
        f"| Billable time | {seconds(billable)} |",
    ]
    return rows


def _region_lines(regions: RegionSummary, given: bool) -> list[str]:
    """The per-region table and the home region's on-demand baseline (several regions only)."""
    if regions.regions_used < 2 and not given:
        return []
    lines = [
        "## Regions",
        "",
        f"Home region (the first of the order): **{_cell(regions.home or '-')}**. "
        + (
            "Failover: " + "; ".join(_cell(f.describe()) for f in regions.failovers) + "."
            if regions.failovers
            else f"No failover: {regions.no_failover}."
        ),
        "",
        "| Region | Jobs | Attempts | Billable | Cost | On-demand cost |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in regions.regions:
        lines.append(
            f"| {_cell(r.region)} | {r.jobs} | {r.attempts} | {seconds(r.billable_seconds)} "
            f"| {usd(r.costs.paid_usd if r.costs else None)} "
            f"| {usd(r.costs.on_demand_usd if r.costs else None)} |"
        )
    lines += [
        "",
        "| | |",
        "| --- | --- |",
        f"| On demand in {_cell(regions.home or 'the home region')}, the whole run (baseline) "
        f"| {usd(regions.home_on_demand_usd)} |",
    ]
    if regions.copies:
        lines.append(f"| Checkpoint copies between regions | {usd(regions.copy_usd)} |")
    return [*lines, "", accounting.region_price_note(), ""]


def _serving_lines(serving: ServingSummary) -> list[str]:
    """The serving replicas: one line of totals, the cost table, one row per replica life."""
    costs = serving.costs
    lines = [
        "## Serving replicas (serving ledger)",
        "",
        f"{len(serving.lives)} replica lives ({serving.spot_lives} on Spot VMs) of "
        f"{_cell(', '.join(serving.endpoints) or '-')}; {serving.preemptions} preempted.",
        "",
        "| | |",
        "| --- | --- |",
        *_cost_rows_of(costs, serving.billable_seconds, "the replicas"),
        "",
        "| Deployed model | Replica | Life | Start | End | End reason | Billable | Machine "
        "| Paid | On-demand |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for life in serving.lives:
        lines.append(
            f"| {_cell(life.deployed_model_id or '-')} | {life.replica} | {life.life} "
            f"| {_when(life.start)} | {_when(life.end)} | {life.end_reason.value} "
            f"| {seconds(life.billable_seconds)} | {_cell(life.machine_type or '-')} "
            f"| {usd(life.cost.paid_usd if life.cost else None)} "
            f"| {usd(life.cost.on_demand_usd if life.cost else None)} |"
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
    if run.evaluated and not run.job_names:
        return _evaluation_only(run, summary)
    acc = summary.accounting
    lines = [
        f"# kfp-spot run report: {_cell(run.job_name)}",
        "",
        "| | |",
        "| --- | --- |",
        f"| Outcome | **{_cell(run.outcome)}** |",
        f"| CustomJobs | {_cell(', '.join(run.job_names) or '-')} |",
        f"| Started | {_when(run.started)} |",
        f"| Finished | {_when(run.finished)} |",
        f"| Attempts | {acc.attempt_count} |",
        f"| Preemptions | {preemptions_text(acc)} |",
        f"| Checkpoints on disk | {summary.checkpoints}{_newer(run.newer_steps)} |",
        f"| Resumed from | {', '.join(f'step {s}' for s in summary.resumed_from) or '-'} |",
        f"| Latest step | {'-' if summary.latest_step is None else summary.latest_step} |",
        f"| Final {_cell(run.metric_name)} | {_final(summary.final_loss)} |",
        f"| Quality gate | {_run_gate(run)} |",
        "",
    ]
    if timeline:
        lines += [f"![timeline]({timeline})", ""]
    lines += ["## Cost", "", "| | |", "| --- | --- |", *_cost_rows(acc)]
    if acc.queued_seconds is not None:
        lines.append(f"| Queued time (not billed) | {seconds(acc.queued_seconds)} |")
    lines += [""]
    if acc.costs is not None and acc.costs.spot_estimated:
        lines += [accounting.SPOT_PRICE_NOTE, ""]
    if summary.regions is not None:
        lines += _region_lines(summary.regions, bool(run.regions))
    lines += [
        "## Goodput",
        "",
        "| | |",
        "| --- | --- |",
        f"| Goodput | {percent(acc.goodput) if acc.goodput is not None else 'unknown'} |",
        f"| Billed time kept | {seconds(acc.kept_seconds)} |",
        f"| Billed time lost | {seconds(acc.lost_seconds)} |",
        "",
        "Goodput is the share of billed time whose training progress survived: a finished attempt "
        "keeps all its time, an interrupted one the time up to its last committed checkpoint. "
        "Without a checkpoint commit or an attempt record to tell, what an interrupted attempt "
        "lost is unknown, and so is goodput.",
        "",
        f"## Attempts ({acc.source.value})",
        "",
    ]
    if acc.attempts:
        lines += [
            "| Job | Region | # | Start | End | End reason | Billable | Queued | Machine | Paid "
            "| On-demand | Lost |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        where = run.job_regions
        for a in acc.attempts:
            machine = f"{a.machine_type} x{a.replica_count}" if a.machine_type else "-"
            queued = "-" if a.queued_seconds is None else seconds(a.queued_seconds)
            lines.append(
                f"| {_cell(a.job_id or '-')} "
                f"| {_cell(where.get(a.job_name) or accounting.region_of_job(a.job_name) or '-')} "
                f"| {a.number or '-'} | {_when(a.start)} "
                f"| {_when(a.end)} | {a.end_reason.described} | {seconds(a.billable_seconds)} "
                f"| {queued} | {_cell(machine)} "
                f"| {usd(a.cost.paid_usd if a.cost else None)} "
                f"| {usd(a.cost.on_demand_usd if a.cost else None)} | {seconds(a.lost_seconds)} |"
            )
    else:
        lines.append("No attempts: the run never started a CustomJob attempt.")
    if summary.serving is not None:
        lines += ["", *_serving_lines(summary.serving)]
    lines += ["", "## Training attempts (attempt records)", ""]
    if run.records:
        lines += [
            "| Attempt | Start | End | First step | Last committed step | Exit |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for r in run.records:
            first = "-" if r.first_step is None else r.first_step
            last = "-" if r.last_committed_step is None else r.last_committed_step
            lines.append(
                f"| {_cell(r.attempt_id)} | {_when(r.start_time)} | {_when(r.end_time)} | {first} "
                f"| {last} | {r.exit_reason or 'not written'} |"
            )
    else:
        lines.append("No attempt records under the checkpoint root.")
    return "\n".join(lines + _metric_lines(run)) + "\n"


def _metric_lines(run: RunData) -> list[str]:
    """The evaluation metrics' table (none without numeric metrics)."""
    # NaN and infinities are kept as text ("nan"): a NaN loss is why a gate failed, so it shows.
    values = {k: as_number(v) for k, v in run.metrics.items()}
    numeric = {k: v for k, v in values.items() if v is not None}
    if not numeric:
        return _sweep_lines(run)
    lines = ["", "## Evaluation metrics", "", "| Metric | Value |", "| --- | --- |"]
    return lines + [f"| {_cell(k)} | {v:.6g} |" for k, v in sorted(numeric.items())]


def _sweep_lines(run: RunData) -> list[str]:
    """A sweep's evaluations, a row each (its task, every metric, its gate); none for one."""
    if len(run.evaluations) < 2:
        return []
    rows = [
        (e, {k: n for k, v in e.metrics.items() if (n := as_number(v)) is not None})
        for e in run.evaluations
    ]
    names = sorted({name for _, numbers in rows for name in numbers})
    lines = ["", "## Evaluation metrics", ""]
    lines.append("| Task | " + "".join(f"{_cell(n)} | " for n in names) + "Quality gate |")
    lines.append("| --- " * (len(names) + 2) + "|")
    for evaluation, numbers in rows:
        cells = "".join(f"{numbers[n]:.6g} | " if n in numbers else "- | " for n in names)
        lines.append(f"| {_cell(evaluation.task)} | {cells}{_gate(evaluation.passed)} |")
    return lines


def _evaluation_only(run: RunData, summary: RunSummary) -> str:
    """The report of a run that launched no CustomJob: it trained nothing.

    No training figures; the checkpoint it evaluated (an earlier run's, whose attempts are not
    this run's), the quality gate and the metrics.
    """
    lines = [
        "# kfp-spot run report: evaluation only",
        "",
        "| | |",
        "| --- | --- |",
        f"| Outcome | **{_cell(run.outcome)}** |",
        f"| Started | {_when(run.started)} |",
        f"| Finished | {_when(run.finished)} |",
        f"| Training | {NO_TRAINING} |",
        f"| Evaluated | {_cell(run.evaluated)} |",
        f"| Quality gate | {_run_gate(run)} |",
    ]
    if summary.serving is not None:
        lines += ["", *_serving_lines(summary.serving)]
    return "\n".join(lines + _metric_lines(run)) + "\n"
