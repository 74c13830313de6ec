"""What a local run did: :class:`LocalRunResult` (``run.json``) and its printed summary.

Filled in by :func:`kfp_spot.pipelines.local.run`; ``kfp-spot run`` prints :func:`summarize`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kfp_spot import accounting
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.reports import run_from_json
from kfp_spot.reports.evaluations import Evaluation, evaluated_text, gate_count
from kfp_spot.reports.summary import NO_TRAINING, percent, preemptions_text, seconds
from kfp_spot.reports.summary import summarize as summarize_run

PIPELINE_FAILED = "PIPELINE_FAILED"
"""The outcome ``run.json`` records when the pipeline gave none (a task failed)."""

NO_THRESHOLDS = "no thresholds: every evaluation passes"  # the gate line's words for a gate of none


@dataclass
class LocalRunResult:
    """What a local run did, as ``run.json`` records it.

    ``outcome`` is the launch's (None when the pipeline gave none: a task failed; ``run.json``
    says ``PIPELINE_FAILED``); ``passed`` is the quality gate's verdict (None: not evaluated).
    ``summary`` is the run's accounting summary (:mod:`kfp_spot.accounting`): the numbers
    ``report.md`` and the launcher's ``job_report`` show; ``preemptions`` is its count (emulator
    restarts included). ``serving`` holds the serving ledger rows of every endpoint the run
    deployed to (each with its ``endpoint``), ``serving_summary`` their accounting summary.
    ``thresholds`` are the quality gate's (the pipeline's ``thresholds`` argument or default;
    empty: it had none; None: not known, as where a task's output gives them).
    ``regions`` is the order of regions the run was given (empty: none), ``job_regions`` each
    CustomJob's region, ``job_launches`` the launch task that submitted it (:func:`launches_in`),
    ``region_summary`` attempts and costs per region and each launch's failovers.
    A run that launched no CustomJob trained nothing: ``checkpoint_uri`` is empty (no checkpoint
    root, attempt records or model of its own), ``preemptions`` None, and
    ``evaluated_checkpoint`` names the checkpoint it evaluated (``uri``, ``step``; None when it
    evaluated none), which ``run.json`` holds only then. ``warnings`` are the ``kfp-spot:
    warning:`` lines the tasks printed into their logs (``text``, and ``tasks``, the tasks that
    printed it), each once: :func:`warning_lines` shows them. ``evaluations`` are the metrics
    outputs of every task that wrote one (``task``, ``metrics``), which ``run.json`` holds when
    there are several (a sweep's evaluations).
    """

    run_dir: str
    outcome: Outcome | None
    job_names: list[str]
    ledger: list[dict[str, Any]]
    attempt_records: list[dict[str, Any]]
    preemptions: int | None
    resumed_from_steps: list[int]
    checkpoint_uri: str
    latest_step: int | None
    metrics: dict[str, Any]
    passed: bool | None
    thresholds: dict[str, Any] | None = None
    artifacts: dict[str, str] = field(default_factory=dict)
    serving: list[dict[str, Any]] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    regions: list[str] = field(default_factory=list)
    job_regions: dict[str, str] = field(default_factory=dict)
    job_launches: dict[str, str] = field(default_factory=dict)
    evaluated_checkpoint: dict[str, Any] | None = None
    warnings: list[dict[str, Any]] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    summary: accounting.Summary | None = None
    serving_summary: accounting.ServingSummary | None = None
    region_summary: accounting.RegionSummary | None = None

    @property
    def succeeded(self) -> bool:
        """Whether the pipeline ran through and the launch succeeded."""
        return self.outcome is Outcome.SUCCEEDED

    @property
    def outcome_text(self) -> str:
        """The outcome as ``run.json`` and the summary print it."""
        return self.outcome.value if self.outcome is not None else PIPELINE_FAILED

    def to_json(self) -> dict[str, Any]:
        """The run record (schema in docs/reports.md), with its accounting summaries."""
        summaries = ("summary", "serving_summary", "region_summary")
        doc = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in summaries}
        doc["outcome"] = self.outcome_text
        if self.evaluated_checkpoint is None:  # a training run's record: the metrics say it
            del doc["evaluated_checkpoint"]
        if len(self.evaluations) < 2:  # one evaluation: its figures are the metrics
            del doc["evaluations"]
        if self.summary is not None:
            doc["accounting"] = self.summary.to_json()
        if self.serving_summary is not None:
            doc["serving_accounting"] = self.serving_summary.to_json()
        if self.region_summary is not None:
            doc["region_accounting"] = self.region_summary.to_json()
        return doc

    def account(self) -> accounting.Summary:
        """Set the summaries and ``preemptions`` from the record as the run report computes them."""
        numbers = summarize_run(run_from_json(self.run_dir, self.to_json()))
        self.summary, self.serving_summary = numbers.accounting, numbers.serving
        self.region_summary = numbers.regions
        self.preemptions = self.summary.preemptions if self.job_names else None
        return self.summary


def _outcome(value: object) -> Outcome | None:
    """The pipeline's ``outcome`` output (launch_spot_job's), None when it gave none.

    An ``outcome`` of the pipeline's own that is no launch outcome (``"shipped"``, a list of
    them) is not the launch's: None, as when the pipeline has none.
    """
    known = isinstance(value, str) and value in {outcome.value for outcome in Outcome}
    return Outcome(value) if known else None


def _gate(value: object) -> bool | None:
    """The quality gate's verdict from the pipeline's outputs; None when it was not evaluated."""
    return value if isinstance(value, bool) else None


def launches_in(pipeline_root: Path) -> dict[str, str]:
    """Each CustomJob the run's launch tasks submitted -> the task (its path under the root).

    Read from every task's ``gcp_resources`` output that lists CustomJobs (a deploy's lists
    other resources): a pipeline's launches side by side (a ``dsl.ParallelFor`` over regions)
    are told apart from one launch's failover.
    """
    from kfp_spot.jobs.gcp_resources import GcpResourcesError, read_job_names

    found: dict[str, str] = {}
    for path in sorted(pipeline_root.glob("**/gcp_resources")):
        try:
            names = read_job_names(str(path))
        except (GcpResourcesError, OSError):
            continue
        task = str(path.parent.relative_to(pipeline_root))
        found.update({name: task for name in names})
    return found


def evaluations_in(pipeline_root: Path) -> list[dict[str, Any]]:
    """Each ``metrics`` output the run's tasks wrote: ``task`` (its path) and ``metrics``.

    In the order of the tasks' paths under the run's root. Several for a sweep (an evaluation
    in a ``dsl.ParallelFor``): ``run.json`` keeps them all as ``evaluations`` and the summary
    shows each, where the pipeline returns none of them.
    """
    found: list[dict[str, Any]] = []
    for path in sorted(pipeline_root.rglob("executor_output.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):  # a task killed while writing it
            continue
        outputs = doc.get("artifacts") if isinstance(doc, dict) else None
        metrics = outputs.get("metrics") if isinstance(outputs, dict) else None
        listed = metrics.get("artifacts") if isinstance(metrics, dict) else None
        task = "/".join(path.parent.relative_to(pipeline_root).parts[1:])  # under the run's root
        for artifact in listed if isinstance(listed, list) else []:
            if isinstance(artifact, dict) and isinstance(artifact.get("metadata"), dict):
                found.append({"task": task, "metrics": dict(artifact["metadata"])})
    return found


def evaluated_metrics(pipeline_root: Path) -> dict[str, Any]:
    """The ``metrics`` output a task of the run wrote, when exactly one task wrote one.

    What the summary shows when a later task failed (the promotion, say): the evaluation ran
    and its figures are in its executor output, though the pipeline returned nothing.
    """
    found = evaluations_in(pipeline_root)
    return dict(found[0]["metrics"]) if len(found) == 1 else {}


def evaluated_checkpoint(metrics: Mapping[str, Any], asked: object = None) -> dict[str, Any] | None:
    """The checkpoint the evaluation scored (``uri``, ``step``), from its metrics; None: none.

    evaluate_checkpoint's Metrics output names the checkpoint root it was given and the step
    it scored (None for a directory without kfp-spot steps, scored as a whole: its metrics say
    step -1). Without metrics (the evaluation failed), the checkpoint the run was asked to
    evaluate (``asked``, its ``checkpoint_uri`` argument), at an unknown step (None).
    """
    uri = metrics.get("checkpoint_uri")
    if not isinstance(uri, str) or not uri:
        return {"uri": asked, "step": None} if isinstance(asked, str) and asked else None
    step = metrics.get("checkpoint_step")
    if isinstance(step, float) and step.is_integer():  # artifact metadata may give it as a float
        step = int(step)
    whole = not isinstance(step, int) or isinstance(step, bool) or step < 0
    return {"uri": uri, "step": None if whole else step}


def gate_thresholds(pipeline: Any, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``thresholds`` the run's quality gate applied, as the summary names its bounds.

    Its one evaluate_checkpoint task's, as the run gives them (a team's pipeline may write them
    into the task, ``thresholds={"f1": ">=0.8"}``, or pass a parameter of its own); else, with
    none or several such tasks, the pipeline's ``thresholds`` parameter, given or its default.
    Empty only where that one task is given none (every evaluation passes); None where they are
    not known here: another task's output gives them, they are not a JSON object, or the
    pipeline's parameter is empty (its tasks may hold bounds of their own).
    """
    from google.protobuf import json_format

    from kfp_spot.jobs.template_walk import EVALUATE_CALL, template_tasks

    spec = json_format.MessageToDict(pipeline.pipeline_spec)
    gates = [t for t in template_tasks(spec, arguments) if t.call == EVALUATE_CALL]
    value = gates[0].parameters.get("thresholds") if len(gates) == 1 else None
    of_the_task = isinstance(value, (Mapping, str))
    if not of_the_task:
        declared = (pipeline.component_spec.inputs or {}).get("thresholds")  # None: it has none
        value = arguments.get("thresholds", declared.default if declared is not None else None)
    if isinstance(value, str):  # a dict may arrive as its JSON text
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping) or not (value or of_the_task):
        return None
    return dict(value)


def metrics_output(outputs: Mapping[str, Any]) -> Any:
    """The artifact whose metadata the run shows as the evaluation's metrics, or None.

    The pipeline's output named ``metrics`` when it is an artifact (evaluate_checkpoint's), else
    its one Metrics output when it has exactly one: an output of that name of another type (a
    line of text) is the pipeline's own, not metrics.
    """
    named = outputs.get("metrics")
    if isinstance(getattr(named, "metadata", None), dict):
        return named
    found = [v for v in outputs.values() if getattr(v, "schema_title", "") == "system.Metrics"]
    return found[0] if len(found) == 1 else None


def _region_lines(result: LocalRunResult) -> list[str]:
    """Where the run ran and each failover (when it was given regions or used several)."""
    regions = result.region_summary
    if regions is None or (not result.regions and regions.regions_used < 2):
        return []
    used = [r.region + (" (home)" if r.region == regions.home else "") for r in regions.regions]
    lines = [f"regions:            {', '.join(used) or '-'}"]
    lines += [f"failover:           {f.describe()}" for f in regions.failovers]
    if not regions.failovers:
        lines.append(f"failover:           none ({regions.no_failover})")
    baseline = accounting.usd(regions.home_on_demand_usd)
    lines.append(f"home on demand:     {baseline} (the whole run on demand in {regions.home})")
    return lines


def _training_lines(result: LocalRunResult, summary: accounting.Summary) -> list[str]:
    """The training's figures: its CustomJobs, attempts, preemptions, checkpoints and costs."""
    goodput = "unknown" if summary.goodput is None else percent(summary.goodput)
    if summary.lost_seconds:
        goodput += f" ({seconds(summary.lost_seconds)} of billed time lost)"
    return [
        f"CustomJobs:         {', '.join(result.job_names) or '-'}",
        f"attempts:           {summary.attempt_count}",
        f"preemptions:        {preemptions_text(summary)}",
        f"resumed from steps: {_resumed_text(result, summary)}",
        "latest checkpoint:  "
        + ("none committed" if result.latest_step is None else f"step {result.latest_step}"),
        f"billable time:      {seconds(summary.billable_seconds)}",
        f"cost:               "
        f"{accounting.describe_cost(summary.costs, summary.cost_unknown_reason)}",
        f"goodput:            {goodput}",
    ]


def _resumed_text(result: LocalRunResult, summary: accounting.Summary) -> str:
    """The steps attempts resumed from; "unknown" where several committed steps but no record."""
    if result.resumed_from_steps:
        return ", ".join(map(str, result.resumed_from_steps))
    if summary.attempt_count > 1 and not result.attempt_records and result.latest_step is not None:
        return (
            "unknown (no attempt records under the checkpoint root: a CheckpointManager that "
            "saves without `with` or start() writes none)"
        )
    return "- (never resumed)"


def summarize(result: LocalRunResult) -> str:
    """A short human summary of a local run (what ``kfp-spot run`` prints).

    Attempts, preemptions, billable time, cost and goodput are the run's accounting summary: the
    same figures as ``report.md`` and the launch task's ``job_report``; a run that launched no
    CustomJob says it trained nothing instead, and names the checkpoint it evaluated. The
    evaluation line shows every number the package's ``evaluate()`` returned (with the
    checkpoint's), the quality gate its verdict on the thresholds.
    """
    summary = result.summary if result.summary is not None else result.account()
    lines = [f"outcome:            {result.outcome_text}"]
    if result.job_names:
        lines += _training_lines(result, summary)
    else:
        lines.append(f"training:           {NO_TRAINING}")
    evaluated = evaluated_text(result.to_json())  # as report.md says it
    if evaluated:
        lines.append(f"evaluated:          {evaluated}")
    lines += _region_lines(result)
    # NaN and infinities arrive as text (artifact metadata cannot hold them as numbers)
    shown = _numbers(result.metrics)
    several = result.evaluations if not shown and len(result.evaluations) > 1 else []
    lines.append(
        "evaluation:         "
        + (", ".join(f"{k}={v:.4g}" for k, v in sorted(shown.items())) or "-")
        + (f" ({len(several)} evaluations, run.json's evaluations)" if several else "")
    )
    lines += [f"  {e['task']}: {_metrics_text(e['metrics'])}" for e in several]
    lines.append(
        f"quality gate:       {gate_count([Evaluation(e['task'], e['metrics']) for e in several])}"
        if several and result.passed is None
        else f"quality gate:       {_gate_text(result, shown)}"
    )
    serving = result.serving_summary
    if serving is not None:
        lines += [
            f"serving:            {len(serving.lives)} replica lives "
            f"({serving.spot_lives} on Spot), {serving.preemptions} preempted, "
            f"{seconds(serving.billable_seconds)} billed",
            f"serving cost:       {accounting.describe_cost(serving.costs)}",
        ]
    lines.append("artifacts:")
    lines += [f"  {name:<15} {path}" for name, path in result.artifacts.items()]
    return "\n".join(lines)


def _numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    """An evaluation's metrics that are numbers, as the evaluation keeps them (NaN as text)."""
    from kfp_spot.evaluation.metric_values import as_number

    values = {k: as_number(v) for k, v in metrics.items()}
    return {k: v for k, v in values.items() if v is not None}


def _metrics_text(metrics: Mapping[str, Any]) -> str:
    """One evaluation's numbers as the summary shows them, its gate's verdict last."""
    numbers = _numbers(metrics)
    shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(numbers.items())) or "-"
    passed = metrics.get("passed")
    return shown if not isinstance(passed, bool) else f"{shown}; {'passed' if passed else 'failed'}"


def _gate_text(result: LocalRunResult, values: Mapping[str, float]) -> str:
    """The gate's verdict, its bounds, and for a failed gate the bounds the metrics missed.

    ``failed: val/loss=4.31 is not <=0.001 (held: accuracy@5 >=0.9)``: with several bounds, a
    person should not have to work out from the evaluation line which one failed.
    """
    if result.passed is None:
        return "not evaluated"
    verdict = "passed" if result.passed else "failed"
    if result.thresholds is not None and not result.thresholds and result.passed:
        return f"{verdict} ({NO_THRESHOLDS})"
    if not result.thresholds:
        return verdict
    listed = ", ".join(f"{k} {v}" for k, v in sorted(result.thresholds.items()))
    if result.passed:
        return f"{verdict} ({listed})"
    from kfp_spot.evaluation.errors import EvaluationInputError
    from kfp_spot.evaluation.thresholds import parse_thresholds

    try:
        bounds = parse_thresholds(result.thresholds)
    except EvaluationInputError:  # the evaluation refused them: it said why
        return f"{verdict} ({listed})"
    missed = [t for t in bounds if t.metric in values and not t.check(values[t.metric])]
    if not missed:  # a metric the evaluation did not return: its error says so
        return f"{verdict} ({listed})"
    held = [f"{t.metric} {t.op}{t.bound:g}" for t in bounds if t not in missed]
    text = "; ".join(
        f"{t.metric}={values[t.metric]:.4g} is not {t.op}{t.bound:g}"
        for t in sorted(missed, key=str)
    )
    return f"{verdict}: {text}" + (f" (held: {', '.join(sorted(held))})" if held else "")


def warning_lines(result: LocalRunResult) -> list[str]:
    """The warnings the run's tasks printed, a line each naming the tasks (``kfp-spot run``'s end).

    A task prints them into its log, among hundreds of kfp.local's lines that a person reads only
    when something failed: a package over 64 MiB, an executor image past its end of availability
    or a requirement its version does not meet would otherwise go unseen.
    """
    return [
        f"kfp-spot: warning: {', '.join(w['tasks'])}: {w['text']}"
        for w in result.warnings
        if isinstance(w, dict) and w.get("text")
    ]
