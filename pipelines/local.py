"""Run any pipeline on this machine: kfp.local, the Vertex emulator, a preemption drill, a report.

``kfp-spot run`` is built on :func:`run`; your own pipeline gets the same::

    from kfp_spot.pipelines import local

    result = local.run(my_pipeline, {"source": "./my_package"}, preemptions=2, run_dir="runs/1")
    print(local.summarize(result))

``pipeline`` is a ``@dsl.pipeline`` function or a compiled YAML file. :func:`run` starts the local
Vertex emulator on a free loopback port, points the pipeline's ``api_endpoint`` parameter at it
(a pipeline with a ``launch_spot_job`` or ``deploy_spot_endpoint`` task declares one and passes
it to them: without it, the run is refused before it starts; one with neither needs none),
fills ``project``, ``location``, ``base_output_directory`` and ``staging_uri`` when the pipeline
declares them and they are not given, runs it with ``kfp.local.SubprocessRunner(use_venv=False)``,
preempts each CustomJob's attempts ``preemptions`` times, each only after the attempt committed a
checkpoint of its own (:mod:`kfp_spot.drill`); with ``regions=[A, B]`` it passes them to the
pipeline's ``regions`` and, after the last preemption, takes A's Spot capacity away for good, so
the launch fails over to B (:mod:`kfp_spot.pipelines.local_regions`); and it writes
``run.json``, ``report.md`` and ``report.png`` into ``run_dir`` (``kfp-spot report RUN_DIR``
reads them again). The pipeline's outputs named ``outcome`` (launch_spot_job's), ``passed`` (the
quality gate's) and ``metrics`` (evaluate_checkpoint's; else its one Metrics output), when it has
them, are what the record and the summary show.

Why here and not in ``kfp_spot/``: it drives kfp.local and loads pipelines, which is interface
code (the house rule keeps ``kfp.dsl`` out of the runtime modules); it imports as
``kfp_spot.pipelines.local``.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfp_spot import checkpoints, envcache, executors, fs
from kfp_spot.accounting import region_of_job
from kfp_spot.drill import CheckpointPreemptionDrill
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.pipelines.local_arguments import (
    ENDPOINT_PARAMETER,
    ENDPOINT_STAND_IN,
    LocalRunError,
    check_tasks,
    given_arguments,
    load,
    parameters,
    parse_arguments,
    run_arguments,
    vertex_callers,
)
from kfp_spot.pipelines.local_drill import check_run_options, saved_anything, short_drill
from kfp_spot.pipelines.local_regions import RegionsError, check_regions, failover_drill
from kfp_spot.pipelines.local_result import (
    PIPELINE_FAILED,
    LocalRunResult,
    _gate,
    _outcome,
    evaluated_checkpoint,
    evaluated_metrics,
    evaluations_in,
    gate_thresholds,
    launches_in,
    metrics_output,
    summarize,
    warning_lines,
)
from kfp_spot.pipelines.local_rundir import (
    RUN_DIR_ENTRIES,
    RUN_DIR_WRITES,
    check_unused,
    claim_default_run_dir,
    default_run_dir,
    given_run_dir,
    run_dir_or_default,
)
from kfp_spot.pipelines.local_runnable import check_runs_locally
from kfp_spot.progress import LocalRunProgress, emulator_jobs, replica_output
from kfp_spot.reports import preload_timeline, write_report

if TYPE_CHECKING:
    from kfp_spot.emulator import Emulator

__all__ = [
    "ENDPOINT_PARAMETER",
    "PIPELINE_FAILED",
    "RUN_DIR_ENTRIES",
    "RUN_DIR_WRITES",
    "LocalRunError",
    "LocalRunResult",
    "claim_default_run_dir",
    "default_run_dir",
    "load",
    "parameters",
    "parse_arguments",
    "run",
    "run_dir_or_default",
    "summarize",
    "warning_lines",
]


def _region_names(value: Any) -> list[str]:
    """The run's ``regions`` argument for its record: a list of names, or none.

    A value that is not a list of names was refused by the launch, which said why; the record
    must still be one the report can read.
    """
    if isinstance(value, list) and all(isinstance(r, str) for r in value):
        return list(value)
    return []


def _checkpoint_roots(emu: Emulator) -> Callable[[str], str | None]:
    """A job's checkpoint directory (``<baseOutputDirectory>/checkpoints``) by resource name.

    None while the emulator cannot answer (stopped or restarting): ask again later.
    """
    from kfp_spot.emulator import ApiError, EmulatorError

    roots: dict[str, str] = {}

    def root(job_name: str) -> str | None:
        if job_name not in roots:
            try:
                job = emu.job(job_name)
            except (ApiError, EmulatorError, sqlite3.Error):
                return None
            base = job.job_spec.base_output_directory.output_uri_prefix
            roots[job_name] = fs.join(base, "checkpoints") if base else ""
        return roots[job_name]

    return root


def run(
    pipeline: Any,
    arguments: Mapping[str, Any] | None = None,
    *,
    run_dir: str | Path | None = None,
    preemptions: int = 1,
    grace_period: float = 10.0,
    progress: Callable[[str], None] | None = print,
    status: Callable[[str], None] | None = None,
    verbose: bool = False,
    disruption: Callable[[Emulator, str], contextlib.AbstractContextManager[Any]] | None = None,
    regions: Sequence[str] | None = None,
) -> LocalRunResult:
    """Run ``pipeline`` locally against the emulator with a preemption drill; see the module doc.

    Args:
        pipeline: a ``@dsl.pipeline`` function or a compiled pipeline YAML path.
        arguments: the pipeline's arguments, a mapping of parameter name to value
            (``api_endpoint`` is always the emulator's).
        run_dir: folder for everything the run writes, kept after the run (default:
            ``kfp-spot-runs/<timestamp>``); new or empty: one an earlier run wrote into is
            refused, and so is empty text (it is no directory: None is the default).
        preemptions: how many times the drill preempts a running attempt (each after it
            committed a new checkpoint): 0 to 6 (``local_drill.PREEMPTIONS``).
        grace_period: seconds between SIGTERM and SIGKILL at a preemption: 0.5 to 120
            (``local_drill.GRACE_PERIOD``).
        progress: receives a line as each task starts and ends, as each attempt of a CustomJob
            starts and ends, and, when a task fails, its name, log and error; None: nothing.
        status: receives a live status text a few times a second while tasks run, and ``""``
            at the end; None: none.
        verbose: also stream the executor logs to the terminal. They always go to
            ``<run_dir>/logs/pipeline.log`` and each task's to ``<run_dir>/logs/<task>.log``.
        disruption: called with the running emulator and the default checkpoint root; the
            context manager it returns is entered around the pipeline (tests restart the
            emulator mid-run with it).
        regions: the launch's regions, in order (the pipeline's ``regions`` parameter; its
            ``location`` is the first unless given). With two or more and ``preemptions`` >= 1,
            the first region's Spot capacity goes away after the last preemption, and the
            launch fails over. None: the pipeline's own.

    Returns:
        The gathered result; also written to ``<run_dir>/run.json``. Its ``warnings`` are the
        ``kfp-spot: warning:`` lines the tasks printed into their logs (``warning_lines``).

    Raises:
        LocalRunError: the pipeline or an argument cannot be run locally (before anything ran).
    """
    from kfp import local

    from kfp_spot.emulator import ApiError, Emulator, EmulatorError
    from kfp_spot.emulator.statedir import job_log_dir
    from kfp_spot.pipelines.local_notes import vertex_notes
    from kfp_spot.pipelines.local_placeholders import gcp_placeholders_as_text
    from kfp_spot.pipelines.local_tasks import tasks_end_with_the_run

    check_run_options(preemptions, grace_period)
    given_dir = given_run_dir(run_dir)
    arguments = given_arguments(arguments)
    pipeline = check_runs_locally(load(pipeline))
    if regions is not None:
        if "regions" not in pipeline.component_spec.inputs:
            raise LocalRunError("regions: the pipeline has no 'regions' parameter to pass them to")
        try:
            arguments["regions"] = regions = check_regions(regions)
        except RegionsError as exc:
            raise LocalRunError(f"regions: {exc}") from None
        if "location" in pipeline.component_spec.inputs:
            arguments.setdefault("location", arguments["regions"][0])
    with run_dir_or_default(given_dir) as chosen:
        run_dir = chosen.resolve()  # a default one, claimed: removed again when refused here
        # Refuse bad arguments, and what a launch, evaluate or deploy task would, before starting.
        check_tasks(pipeline, run_arguments(pipeline, arguments, run_dir, ENDPOINT_STAND_IN))
        check_unused(run_dir)
        try:  # every task and the emulator's jobs build their environments there
            envcache.writable_cache_dir()
        except ValueError as exc:
            raise LocalRunError(str(exc)) from None
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LocalRunError(
            f"run_dir: cannot create {run_dir} ({exc.strerror}); give a writable directory"
        ) from None
    default_root = str(run_dir / "job" / "checkpoints")
    started = time.time()
    shown = LocalRunProgress(run_dir / "logs", progress=progress, status=status, verbose=verbose)
    with shown, Emulator(run_dir / "emulator", grace_period=grace_period) as emu:
        replicas = job_log_dir(emu.state_dir, "<job id>") / "attempt-<n>"
        shown.event(f"emulator listening on {emu.endpoint}; the training's output: {replicas}/")
        preload_timeline()  # the report's imports, while the tasks run
        shown.name_groups(pipeline.pipeline_spec)
        args = run_arguments(pipeline, arguments, run_dir, emu.endpoint)
        root_of = _checkpoint_roots(emu)
        # The tasks print it on their stderr, which a local run keeps in the logs: say it here,
        # as a note (the run itself is healthy; a real Vertex AI run is where it matters).
        image_input = (pipeline.component_spec.inputs or {}).get("executor_image_uri")
        image = args.get("executor_image_uri") or (image_input.default if image_input else "")
        notice = executors.executor_image_notice(str(image)) if image else None
        if notice:
            shown.note(notice)
        for note in vertex_notes(pipeline):  # what only a run on Vertex AI would show
            shown.note(note)

        def running_attempts() -> list[tuple[str, int]]:
            try:
                jobs = emu.list_jobs()
                running = [j["name"] for j in jobs if j.get("state") == "JOB_STATE_RUNNING"]
                return [(name, len(emu.attempts(name))) for name in running]
            except (ApiError, EmulatorError, sqlite3.Error):  # restarting: look again later
                return []

        def newest_step(job_name: str) -> int | None:
            # The job's own directory: launches in a ParallelFor each have theirs.
            try:
                root = root_of(job_name)
                latest = checkpoints.latest(root, check_hashes=False) if root else None
            except (ApiError, EmulatorError, sqlite3.Error, OSError):  # restarting; being written
                return None
            except checkpoints.CheckpointFormatError as exc:  # committed by a newer kfp-spot
                return exc.step
            return None if latest is None else latest.step

        local.init(
            local.SubprocessRunner(use_venv=False),
            pipeline_root=str(run_dir / "pipeline_root"),
            raise_on_error=False,
        )
        disrupted = disruption(emu, default_root) if disruption else contextlib.nullcontext()
        drill = CheckpointPreemptionDrill(
            root_of,
            running_attempts,
            emu.preempt,
            count=preemptions,
            after_last=failover_drill(emu, regions, preemptions, shown.event),
        )
        task, interrupted = None, False
        try:
            with (
                gcp_placeholders_as_text(),  # GCPC placeholders left in a task: the launcher's
                tasks_end_with_the_run(),  # an interrupt sent to this process alone stops the task
                shown.watching(emulator_jobs(emu), newest_step, replica_output(emu.state_dir)),
                drill,
                disrupted,
            ):
                task = pipeline(**args)
        except KeyboardInterrupt:
            # What ran is still recorded (run.json) before the interrupt goes on.
            interrupted = True
            shown.event(f"interrupted; run.json records what ran, the logs are in {shown.log_dir}")
        failed = shown.report_failures()
        listed = emu.list_jobs()  # newest first
        jobs = [j["name"] for j in reversed(listed)]
        states = [str(j.get("state", "")) for j in listed]
        if listed and len(drill.preempted_at_steps) < preemptions:
            failed_job = states[0] == "JOB_STATE_FAILED"  # the newest: the training failed
            saved = saved_anything(root_of(listed[0]["name"]) or default_root)
            why = short_drill(drill.preempted_at_steps, preemptions, interrupted, failed_job, saved)
            shown.note(why)
        roots = [root_of(name) or "" for name in jobs]
        ledger = [row | {"job": name} for name in jobs for row in emu.attempts(name)]
        serving = [
            row | {"endpoint": name}
            for name in emu.serving_endpoints()
            for row in emu.serving_ledger(name)["lives"]
        ]
    warnings = [{"text": text, "tasks": list(tasks)} for text, tasks in shown.monitor.warnings()]
    outputs = task.outputs if task is not None else {}
    metrics_artifact = metrics_output(outputs)
    metrics = dict(metrics_artifact.metadata) if metrics_artifact is not None else {}
    if not metrics:  # a task after the evaluation failed: the pipeline gave no outputs
        metrics = evaluated_metrics(run_dir / "pipeline_root")
    # A run that launched no CustomJob trained nothing: it has no checkpoint root of its own
    # (one it evaluated is an earlier run's, whose attempts are not this run's).
    checkpoint_root = next((r for r in reversed(roots) if r), default_root) if jobs else ""
    records = checkpoints.read_attempt_records(checkpoint_root) if checkpoint_root else []
    try:
        latest = checkpoints.latest(checkpoint_root) if checkpoint_root else None
        latest_step = latest.step if latest else None
    except checkpoints.CheckpointFormatError as exc:  # committed, by a newer kfp-spot
        latest_step = exc.step
    outcome = Outcome.CANCELLED if interrupted else _outcome(outputs.get("outcome"))
    if outcome is None and task is not None and not failed:
        # No `outcome` output: a pipeline that ran through on a succeeded job (or none) succeeded.
        outcome = Outcome.SUCCEEDED if states[:1] in ([], ["JOB_STATE_SUCCEEDED"]) else None
    # What a run without a CustomJob evaluated; when the evaluation failed, what it was asked to
    # (one that would have trained from its checkpoint_uri, and stopped first, evaluated none).
    evaluated = None
    if not jobs:
        asked = None if vertex_callers(pipeline) else args.get("checkpoint_uri")
        evaluated = evaluated_checkpoint(metrics, asked)
    result = LocalRunResult(
        run_dir=str(run_dir),
        outcome=outcome,
        job_names=jobs,
        regions=_region_names(arguments.get("regions")),
        job_regions={name: region_of_job(name) for name in jobs if region_of_job(name)},
        job_launches=launches_in(run_dir / "pipeline_root"),
        ledger=ledger,
        attempt_records=[r.to_json() for r in records],
        preemptions=None,  # set by account()
        resumed_from_steps=[r.first_step for r in records if r.first_step],
        checkpoint_uri=checkpoint_root,
        latest_step=latest_step,
        metrics=metrics,
        passed=_gate(outputs.get("passed", metrics.get("passed"))),
        thresholds=gate_thresholds(pipeline, args),
        serving=serving,
        evaluated_checkpoint=evaluated,
        warnings=warnings,
        evaluations=evaluations_in(run_dir / "pipeline_root"),
        artifacts={
            **_training_dirs(checkpoint_root),
            "pipeline_root": str(run_dir / "pipeline_root"),
            "emulator_state": str(run_dir / "emulator"),
            **_training_logs(run_dir / "emulator", jobs),
            "logs": str(shown.log_dir),
        },
        started=started,
        finished=time.time(),
    )
    result.account()
    (run_dir / "run.json").write_text(json.dumps(result.to_json(), indent=1, default=str))
    if interrupted:  # `kfp-spot report RUN_DIR` draws it when wanted
        raise KeyboardInterrupt
    report = write_report(run_dir)
    result.artifacts.update({"report": str(report.markdown), "timeline": str(report.png)})
    return result


def _training_dirs(checkpoint_root: str) -> dict[str, str]:
    """The training's checkpoint and model (``<base>/model``) directories; none without one."""
    if not checkpoint_root:
        return {}
    base = checkpoint_root.rstrip("/").rsplit("/", 1)[0]
    return {"checkpoints": checkpoint_root, "model": fs.join(base, "model")}


def _training_logs(state_dir: Path, jobs: list[str]) -> dict[str, str]:
    """Where the newest CustomJob's replicas' output is (``attempt-<n>/<replica>.log``).

    What the training printed goes there, not into the tasks' logs: the run names the folder.
    """
    from kfp_spot.emulator.statedir import job_log_dir

    return (
        {"training_logs": str(job_log_dir(state_dir, jobs[-1].rsplit("/", 1)[-1]))} if jobs else {}
    )
