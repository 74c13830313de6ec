"""``kfp-spot run``: the ``spot_training`` pipeline on this machine, for a training package.

Built on :func:`kfp_spot.pipelines.local.run` (emulator, preemption drill, ``run.json``, report).
What it adds is the package's own settings: the module and the evaluation entry point come from
its pyproject.toml (``[tool.kfp-spot] python-module`` / ``evaluation-entry-point``) unless given;
only the bundled example gets the example's training arguments and accuracy gate
(:mod:`kfp_spot.pipelines.local_source`, which also finds the source's problems before the run:
they are one refusal with the evaluation entry point's, :mod:`.local_evaluation`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfp_spot.packaging.sources import requirements_file_note
from kfp_spot.pipelines.local import LocalRunError, load
from kfp_spot.pipelines.local import run as run_pipeline
from kfp_spot.pipelines.local_arguments import check_types, check_values
from kfp_spot.pipelines.local_drill import check_run_options
from kfp_spot.pipelines.local_evaluation import check_evaluation_module, check_threshold_metrics
from kfp_spot.pipelines.local_evaluation_imports import check_evaluation_imports
from kfp_spot.pipelines.local_result import (
    PIPELINE_FAILED,
    LocalRunResult,
    _gate,
    _outcome,
    summarize,
    warning_lines,
)
from kfp_spot.pipelines.local_source import (
    EXAMPLE_SOURCE,
    arguments_and_problems,
    check_outside,
    job_module_problem,
    job_python_problem,
    package_arguments,
    source_tree,
    spot_training_arguments,
    together,
)
from kfp_spot.vertex.pipeline_context import LOCAL_LOCATION, LOCAL_PROJECT
from kfp_spot.vertex.pipeline_parameters import set_parameter

if TYPE_CHECKING:
    from kfp_spot.emulator import Emulator
    from kfp_spot.packaging.jobsource import JobSource

__all__ = [
    "EXAMPLE_SOURCE",
    "LOCAL_LOCATION",
    "LOCAL_PROJECT",
    "PIPELINE_FAILED",
    "LocalRunError",
    "LocalRunResult",
    "_gate",
    "_outcome",
    "check_evaluation_imports",
    "check_evaluation_module",
    "check_threshold_metrics",
    "job_module_problem",
    "job_python_problem",
    "package_arguments",
    "pipeline_to_run",
    "run_local",
    "spot_training_arguments",
    "summarize",
    "together",
    "warning_lines",
]

NO_GATE = (
    "no quality gate: every evaluation passes (a pipeline that promotes on the gate promotes "
    f"""every model): {set_parameter("thresholds", '{"METRIC": ">=BOUND"}')} on a metric your """
    "evaluate() returns"
)
"""What a run without thresholds says before it starts."""


def _nothing_to_preempt(pipeline: Any, preemptions: int) -> str | None:
    """The note for preemptions asked of a pipeline without a launch_spot_job task, or None."""
    from google.protobuf import json_format

    from kfp_spot.jobs.template_walk import EVALUATE_CALL, LAUNCH_CALL, template_tasks

    spec = json_format.MessageToDict(pipeline.pipeline_spec)
    calls = {task.call for task in template_tasks(spec, {})}  # sub-DAGs too
    if not preemptions or LAUNCH_CALL in calls:
        return None
    why = " (its evaluation scores a checkpoint that exists)" if EVALUATE_CALL in calls else ""
    # words for kfp-spot run's --preemptions and the Python caller's preemptions= alike
    asked = f"{preemptions} preemption{'' if preemptions == 1 else 's'} of the drill"
    does = "does" if preemptions == 1 else "do"
    return f"the {asked} {does} nothing here: the pipeline launches no CustomJob{why}"


def pipeline_to_run(template: str | Path | None = None) -> Any:
    """``template``, or ``spot_training`` imported only then: a template's checks need no KFP."""
    if template is not None:
        return template
    from kfp_spot.pipelines.spot_training import spot_training

    return spot_training


def run_local(
    run_dir: str | Path,
    *,
    source: str | Path = EXAMPLE_SOURCE,
    training_args: Sequence[str] | None = None,
    preemptions: int = 1,
    grace_period: float = 10.0,
    thresholds: dict[str, Any] | None = None,
    parameters: Mapping[str, Any] | None = None,
    template: str | Path | None = None,
    progress: Callable[[str], None] | None = print,
    status: Callable[[str], None] | None = None,
    verbose: bool = False,
    disruption: Callable[[Emulator, str], contextlib.AbstractContextManager[Any]] | None = None,
    regions: Sequence[str] | None = None,
) -> LocalRunResult:
    """Run ``spot_training`` (or ``template``) on ``source`` locally against the emulator.

    Args:
        run_dir: folder for everything the run writes (kept after the run).
        source: the training package source.
        training_args: arguments for the training module (default: the package's none, the
            example's short run for the example).
        preemptions: how many times the drill preempts the job (each after a new checkpoint).
        grace_period: seconds between SIGTERM and SIGKILL at a preemption.
        thresholds: quality thresholds for the gate, for any metric the package's evaluate()
            returns (default: none, every evaluation passes; the example's
            ``accuracy >= 0.85`` for it).
        parameters: any other pipeline arguments (they win over everything above).
        template: a compiled pipeline YAML to run (for instance one pulled from a registry);
            default: ``spot_training`` as this package defines it. The source, its
            ``[tool.kfp-spot]`` settings and the example's arguments go to the parameters of
            those names it declares; one without ``source`` takes its inputs from
            ``parameters`` (the bundled example's source is then not passed).
        progress: see :func:`kfp_spot.pipelines.local.run`.
        status: see :func:`kfp_spot.pipelines.local.run`.
        verbose: see :func:`kfp_spot.pipelines.local.run`.
        disruption: see :func:`kfp_spot.pipelines.local.run`.
        regions: see :func:`kfp_spot.pipelines.local.run` (a failover drill with preemptions).

    Returns:
        The gathered result; also written to ``<run_dir>/run.json``.

    Raises:
        LocalRunError: a missing source or template, or an argument the pipeline does not take;
            the problems of the source found before the run starts (its module, its
            requirements, its evaluation entry point, a run directory inside it) are one
            refusal, one line each (:func:`together`).
    """
    pipeline = load(pipeline_to_run(template))
    arguments = _checked_arguments(
        pipeline,
        source,
        run_dir,
        training_args=training_args,
        thresholds=thresholds,
        parameters=parameters,
        declared=None if template is None else set(pipeline.component_spec.inputs),
        preemptions=preemptions,
        grace_period=grace_period,
    )
    if progress is not None and "thresholds" in arguments and not arguments["thresholds"]:
        progress(f"note: {NO_GATE}")
    if progress is not None:
        unread = requirements_file_note(Path(source), arguments.get("requirements") or [])
        for note in [n for n in (_nothing_to_preempt(pipeline, preemptions), unread) if n]:
            progress(f"note: {note}")
        from kfp_spot.packaging.jobsource import JobSource

        read = functools.cache(JobSource)  # one reading of a folder's code for both checks
        for warning in [
            *_unmet_pins(source, arguments, pipeline),
            *_raw_dirs(source, arguments, read),
            *laptop_paths(source, arguments, read),
        ]:
            progress(f"warning: {warning}")
    return run_pipeline(
        pipeline,
        arguments,
        run_dir=run_dir,
        preemptions=preemptions,
        grace_period=grace_period,
        progress=progress,
        status=status,
        verbose=verbose,
        disruption=disruption,
        regions=regions,
    )


def _checked_arguments(
    pipeline: Any,
    source: str | Path,
    run_dir: str | Path,
    *,
    training_args: Sequence[str] | None,
    thresholds: dict[str, Any] | None,
    parameters: Mapping[str, Any] | None,
    declared: set[str] | None,
    preemptions: int,
    grace_period: float,
) -> dict[str, Any]:
    """The run's arguments, once every problem found before the run is refused together.

    A source archive is checked as the folder it unpacks to, the messages naming the archive.

    Raises:
        LocalRunError: every problem, one line each (:func:`together`).
    """
    with source_tree(source) as (tree, shown):
        checked = tree or source

        def named(text: str) -> str:  # the archive, not the folder it was unpacked to
            for unpacked in {str(tree.resolve()), str(tree)} if tree is not None else ():
                text = text.replace(unpacked, shown)
            return text

        try:
            arguments, problems = arguments_and_problems(
                source,
                training_args=training_args,
                thresholds=thresholds,
                parameters=parameters,
                declared=declared,
                tree=tree,
            )
        except LocalRunError as exc:
            raise LocalRunError(named(str(exc))) from None
        for check in (
            lambda: _refuse(job_module_problem(checked, arguments)),
            lambda: _refuse(job_python_problem(checked, arguments, pipeline)),
            lambda: _refuse(_trainer_declared(source, checked, arguments)),
            lambda: _refuse(_script_module(source, arguments)),
            lambda: check_evaluation_module(checked, arguments, pipeline),
            lambda: check_evaluation_imports(checked, arguments, pipeline),
            lambda: check_threshold_metrics(checked, arguments, pipeline),
            lambda: check_outside(Path(run_dir), source),
            # local.run's own checks, which it makes again: refused with the source's problems
            lambda: check_run_options(preemptions, grace_period),
            lambda: _check_arguments(pipeline, arguments),
        ):
            try:
                check()
            except LocalRunError as exc:  # each check's own refusal, gathered with the others
                problems.append(str(exc))
        if problems:
            raise LocalRunError(named(together(problems)))
    return arguments


def _trainer_declared(source: str | Path, checked: Path, arguments: dict[str, Any]) -> str | None:
    """prepare_package's refusal of ``kfp-spot-trainer`` declared by name, before the run."""
    if "source" not in arguments:
        return None
    from kfp_spot.packaging.trainer_dist import source_problem

    return source_problem(source, checked, arguments)


def _script_module(source: str | Path, arguments: dict[str, Any]) -> str | None:
    """prepare_package's refusal of a script whose name is no module, before the run."""
    path = Path(source)
    if "source" not in arguments or path.suffix != ".py" or not path.is_file():
        return None
    from kfp_spot.packaging.sources import script_module_problem

    given = arguments.get("python_module")
    problem = script_module_problem(path, given if isinstance(given, str) else "")
    return f"python_module: {problem} ({set_parameter('python_module')})" if problem else None


def _refuse(problem: str | None) -> None:
    """Raise ``problem`` as the run's refusal, when there is one."""
    if problem:
        raise LocalRunError(problem)


def _check_arguments(pipeline: Any, arguments: Mapping[str, Any]) -> None:
    """The values' form, then their declared types: a value refused for one is not for both."""
    check_values(arguments)
    check_types(pipeline.component_spec.inputs, arguments)


def _raw_dirs(
    source: str | Path,
    arguments: Mapping[str, Any],
    read: Callable[[Path], JobSource] | None = None,
) -> list[str]:
    """What the prepare-package task will warn of: ``AIP_*_DIR`` read raw (a directory or script).

    A script is read as the module of its own name, from its folder (the module the package
    makes of it, wherever ``python_module`` places it, is the same code). ``read``: the reading
    of a folder's code to share with the other checks (default: a reading of its own).
    """
    from kfp_spot.packaging import outputdirs
    from kfp_spot.packaging.jobsource import JobSource

    read = read or JobSource
    path = Path(source)
    if "source" in arguments and path.is_file() and path.suffix == ".py":
        return outputdirs.warnings_for(read(path.parent), path.stem)
    if "source" not in arguments or not path.is_dir():
        return []
    given = arguments.get("python_module")
    module = outputdirs.job_module(path, given if isinstance(given, str) else "")
    return outputdirs.warnings_for(read(path), module) if module else []


def laptop_paths(
    source: str | Path,
    arguments: Mapping[str, Any],
    read: Callable[[Path], JobSource] | None = None,
) -> list[str]:
    """What the prepare-package task will warn of: paths of this machine the job's code names.

    Read from the job's module and the evaluation entry point's (a directory or a script), so
    the user hears of it before the local run, which finds the files here, not after it.
    ``read``: as for :func:`_raw_dirs`.
    """
    from kfp_spot.packaging import localpaths, outputdirs
    from kfp_spot.packaging.jobsource import JobSource

    read = read or JobSource
    path = Path(source)
    entry = arguments.get("evaluation_entry_point")
    evaluation = entry.partition(":")[0] if isinstance(entry, str) else ""
    if "source" in arguments and path.is_file() and path.suffix == ".py":
        return localpaths.warnings_for(read(path.parent), [path.stem], script=path)
    if "source" not in arguments or not path.is_dir():
        return []
    from kfp_spot.pipelines.local_evaluation import modules_base

    given = arguments.get("python_module")
    module = outputdirs.job_module(path, given if isinstance(given, str) else "")
    base, _ = modules_base(path)  # a bare package's modules are its parent's
    return localpaths.warnings_for(read(base), [module, evaluation])


def _unmet_pins(source: str | Path, arguments: Mapping[str, Any], pipeline: Any) -> list[str]:
    """What the prepare-package task will warn of: requirements the executor image's pins miss.

    Said before the run, as the task's console is only in its log. The requirements are the
    ``requirements`` parameter's and a project directory's static ``[project] dependencies``
    (a setup.py's or an archive's are known after the build: the task's log has them).
    """
    from kfp_spot.packaging.imagepins import declared_requirements, unmet_pin_warnings

    given = (pipeline.component_spec.inputs or {}).get("executor_image_uri")
    image = arguments.get("executor_image_uri") or (given.default if given else "")
    requirements = arguments.get("requirements")
    declared = list(requirements) if isinstance(requirements, list) else []
    if "source" in arguments and Path(source).is_dir():
        declared += declared_requirements(Path(source)) or []
    return unmet_pin_warnings(declared, str(image)) if image and declared else []
