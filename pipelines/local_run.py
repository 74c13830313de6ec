"""Run the ``spot_training`` pipeline end to end on this machine: no cloud account.

Starts the local Vertex emulator on a free loopback port, runs the pipeline with
``kfp.local.SubprocessRunner``, has the emulator preempt the training job after it committed a
checkpoint (a drill), and gathers what happened into ``run.json`` in the run directory.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfp_spot import accounting, checkpoints
from kfp_spot.drill import CheckpointPreemptionDrill
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.progress import LocalRunProgress, emulator_jobs, latest_step
from kfp_spot.reports import run_from_json, write_report
from kfp_spot.reports.summary import percent, preemptions_text
from kfp_spot.reports.summary import summarize as summarize_run
from kfp_spot.vertex.pipeline_context import LOCAL_LOCATION, LOCAL_PROJECT

if TYPE_CHECKING:
    from kfp_spot.emulator import Emulator

EXAMPLE_SOURCE = Path(__file__).resolve().parents[1] / "examples" / "trainer"
PIPELINE_FAILED = "PIPELINE_FAILED"
"""The outcome ``run.json`` records when the pipeline gave none (a task failed)."""


@dataclass
class LocalRunResult:
    """What a local run did, as ``run.json`` records it.

    ``outcome`` is the launch's (None when the pipeline gave none: a task failed; ``run.json``
    says ``PIPELINE_FAILED``); ``passed`` is the quality gate's verdict (None: not evaluated).
    ``summary`` is the run's accounting summary (:mod:`kfp_spot.accounting`): the numbers
    ``report.md`` and the launcher's ``job_report`` show; ``preemptions`` is its count (emulator
    restarts included). ``serving`` holds the serving ledger rows of every endpoint the run
    deployed to (each with its ``endpoint``), ``serving_summary`` their accounting summary.
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
    artifacts: dict[str, str] = field(default_factory=dict)
    serving: list[dict[str, Any]] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    summary: accounting.Summary | None = None
    serving_summary: accounting.ServingSummary | None = None

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
        summaries = ("summary", "serving_summary")
        doc = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in summaries}
        doc["outcome"] = self.outcome_text
        if self.summary is not None:
            doc["accounting"] = self.summary.to_json()
        if self.serving_summary is not None:
            doc["serving_accounting"] = self.serving_summary.to_json()
        return doc

    def account(self) -> accounting.Summary:
        """Set the summaries and ``preemptions`` from the record as the run report computes them."""
        numbers = summarize_run(run_from_json(self.run_dir, self.to_json()))
        self.summary, self.serving_summary = numbers.accounting, numbers.serving
        self.preemptions = self.summary.preemptions
        return self.summary


def run_local(
    run_dir: str | Path,
    *,
    source: str | Path = EXAMPLE_SOURCE,
    training_args: Sequence[str] = (
        "--epochs",
        "30",
        "--checkpoint-every",
        "3",
        "--step-seconds",
        "0.2",
    ),
    preemptions: int = 1,
    grace_period: float = 10.0,
    thresholds: dict[str, Any] | None = None,
    template: str | Path | None = None,
    progress: Callable[[str], None] | None = print,
    status: Callable[[str], None] | None = None,
    verbose: bool = False,
    disruption: Callable[[Emulator, str], contextlib.AbstractContextManager[Any]] | None = None,
) -> LocalRunResult:
    """Run the example pipeline locally against the emulator.

    Args:
        run_dir: folder for everything the run writes (kept after the run).
        source: the training package source.
        training_args: arguments for the training module.
        preemptions: how many times the drill preempts the job (each after a new checkpoint).
        grace_period: seconds between SIGTERM and SIGKILL at a preemption.
        thresholds: quality thresholds for the gate (default: accuracy >= 0.85).
        template: a compiled spot_training YAML to run (for instance one pulled from a
            registry); default: the pipeline as this package defines it.
        progress: receives a line as each task starts and ends, as each attempt of the
            CustomJob starts and ends, and, when a task fails, its name, log and error (called
            with ``sys.stdout``/``sys.stderr`` leading to the terminal); None: nothing.
        status: receives a live status text (elapsed time, attempt, latest checkpoint step) a
            few times a second while tasks run, and ``""`` at the end; None: none.
        verbose: also stream the executor logs to the terminal. They always go to
            ``<run_dir>/logs/pipeline.log`` and each task's to ``<run_dir>/logs/<task>.log``.
        disruption: called with the running emulator and the checkpoint root; the context manager
            it returns is entered around the pipeline (tests use it to restart the emulator
            mid-run).

    Returns:
        The gathered result; also written to ``<run_dir>/run.json``.
    """
    from kfp import components, local

    from kfp_spot.emulator import Emulator
    from kfp_spot.pipelines.local_placeholders import gcp_placeholders_as_text
    from kfp_spot.pipelines.spot_training import spot_training

    run_dir = Path(run_dir).resolve()
    if not Path(source).exists():
        raise FileNotFoundError(f"training source {source} does not exist")
    pipeline = spot_training
    if template is not None:
        if not Path(template).is_file():
            raise FileNotFoundError(f"pipeline template {template} does not exist")
        pipeline = components.load_component_from_file(str(template))
    run_dir.mkdir(parents=True, exist_ok=True)
    job_root = run_dir / "job"
    checkpoint_root = str(job_root / "checkpoints")
    started = time.time()
    shown = LocalRunProgress(run_dir / "logs", progress=progress, status=status, verbose=verbose)
    with shown, Emulator(run_dir / "emulator", grace_period=grace_period) as emu:
        shown.event(f"emulator listening on {emu.endpoint}")
        shown.name_groups(pipeline.pipeline_spec)

        def running_attempts() -> list[tuple[str, int]]:
            running = [j["name"] for j in emu.list_jobs() if j.get("state") == "JOB_STATE_RUNNING"]
            return [(name, len(emu.attempts(name))) for name in running]

        local.init(
            local.SubprocessRunner(use_venv=False),
            pipeline_root=str(run_dir / "pipeline_root"),
            raise_on_error=False,
        )
        disrupted = disruption(emu, checkpoint_root) if disruption else contextlib.nullcontext()
        with (
            gcp_placeholders_as_text(),  # the launch's GCPC placeholders: settled by the launcher
            shown.watching(emulator_jobs(emu), latest_step(checkpoint_root)),
            CheckpointPreemptionDrill(
                checkpoint_root, running_attempts, emu.preempt, count=preemptions
            ),
            disrupted,
        ):
            task = pipeline(
                project=LOCAL_PROJECT,
                location=LOCAL_LOCATION,
                source=str(source),
                training_args=list(training_args),
                base_output_directory=str(job_root),
                staging_uri=str(run_dir / "staging"),
                api_endpoint=emu.endpoint,
                thresholds=thresholds or {"accuracy": ">=0.85"},
            )
        shown.report_failures()
        jobs = [j["name"] for j in emu.list_jobs()]
        ledger = [row | {"job": name} for name in jobs for row in emu.attempts(name)]
        serving = [
            row | {"endpoint": name}
            for name in emu.serving_endpoints()
            for row in emu.serving_ledger(name)["lives"]
        ]
    outputs = task.outputs if task is not None else {}
    metrics_artifact = outputs.get("metrics")
    metrics = dict(metrics_artifact.metadata) if metrics_artifact is not None else {}
    records = checkpoints.read_attempt_records(checkpoint_root)
    latest = checkpoints.latest(checkpoint_root)
    result = LocalRunResult(
        run_dir=str(run_dir),
        outcome=_outcome(outputs.get("outcome")),
        job_names=jobs,
        ledger=ledger,
        attempt_records=[r.to_json() for r in records],
        preemptions=None,  # set by account()
        resumed_from_steps=[r.first_step for r in records if r.first_step],
        checkpoint_uri=checkpoint_root,
        latest_step=latest.step if latest else None,
        metrics=metrics,
        passed=_gate(outputs.get("passed", metrics.get("passed"))),
        serving=serving,
        artifacts={
            "checkpoints": checkpoint_root,
            "model": str(job_root / "model"),
            "pipeline_root": str(run_dir / "pipeline_root"),
            "emulator_state": str(run_dir / "emulator"),
            "logs": str(shown.log_dir),
        },
        started=started,
        finished=time.time(),
    )
    result.account()
    (run_dir / "run.json").write_text(json.dumps(result.to_json(), indent=1, default=str))
    report = write_report(run_dir)
    result.artifacts.update({"report": str(report.markdown), "timeline": str(report.png)})
    return result


def _outcome(value: object) -> Outcome | None:
    """The pipeline's ``outcome`` output (launch_spot_job's), None when it gave none."""
    return None if value is None else Outcome(str(value))


def _gate(value: object) -> bool | None:
    """The quality gate's verdict from the pipeline's outputs; None when it was not evaluated."""
    return value if isinstance(value, bool) else None


def summarize(result: LocalRunResult) -> str:
    """A short human summary of a local run (what ``make demo`` prints).

    Attempts, preemptions, billable time, cost and goodput are the run's accounting summary: the
    same figures as ``report.md`` and the launch task's ``job_report``.
    """
    summary = result.summary if result.summary is not None else result.account()
    goodput = "unknown" if summary.goodput is None else percent(summary.goodput)
    if summary.lost_seconds:
        goodput += f" ({summary.lost_seconds:.1f} s of billed time lost)"
    lines = [
        f"outcome:            {result.outcome_text}",
        f"CustomJobs:         {', '.join(result.job_names) or '-'}",
        f"attempts:           {summary.attempt_count}",
        f"preemptions:        {preemptions_text(summary)}",
        "resumed from steps: "
        + (", ".join(map(str, result.resumed_from_steps)) or "- (never resumed)"),
        "latest checkpoint:  "
        + ("none committed" if result.latest_step is None else f"step {result.latest_step}"),
        f"billable time:      {summary.billable_seconds:.1f} s",
        f"cost:               {accounting.describe_cost(summary.costs)}",
        f"goodput:            {goodput}",
    ]
    shown = {
        k: v
        for k, v in result.metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    lines.append(
        "evaluation:         "
        + (", ".join(f"{k}={v:.4g}" for k, v in sorted(shown.items())) or "-")
    )
    gate = "not evaluated" if result.passed is None else "passed" if result.passed else "failed"
    lines.append(f"quality gate:       {gate}")
    serving = result.serving_summary
    if serving is not None:
        lines += [
            f"serving:            {len(serving.lives)} replica lives "
            f"({serving.spot_lives} on Spot), {serving.preemptions} preempted, "
            f"{serving.billable_seconds:.1f} s billed",
            f"serving cost:       {accounting.describe_cost(serving.costs)}",
        ]
    lines.append("artifacts:")
    lines += [f"  {name:<15} {path}" for name, path in result.artifacts.items()]
    return "\n".join(lines)
