"""``kfp-spot run``: the ``spot_training`` pipeline on this machine, for a training package.

Built on :func:`kfp_spot.pipelines.local.run` (emulator, preemption drill, ``run.json``, report).
What it adds is the package's own settings: the module and the evaluation entry point come from
its pyproject.toml (``[tool.kfp-spot] python-module`` / ``evaluation-entry-point``) unless given;
only the bundled example gets the example's training arguments and accuracy gate.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfp_spot.packaging.sources import (
    LOCAL_RUNS_DIR,
    bare_package_module_problem,
    requirements_file_note,
    requirements_problem,
    source_directory_problem,
)
from kfp_spot.pipelines.local import LocalRunError, load
from kfp_spot.pipelines.local import run as run_pipeline
from kfp_spot.pipelines.local_evaluation import check_evaluation_module
from kfp_spot.pipelines.local_result import (
    PIPELINE_FAILED,
    LocalRunResult,
    _gate,
    _outcome,
    summarize,
    warning_lines,
)
from kfp_spot.vertex.pipeline_context import LOCAL_LOCATION, LOCAL_PROJECT

if TYPE_CHECKING:
    from kfp_spot.emulator import Emulator

__all__ = [
    "EXAMPLE_SOURCE",
    "LOCAL_LOCATION",
    "LOCAL_PROJECT",
    "PIPELINE_FAILED",
    "LocalRunError",
    "LocalRunResult",
    "_gate",
    "_outcome",
    "check_evaluation_module",
    "package_arguments",
    "pipeline_to_run",
    "run_local",
    "spot_training_arguments",
    "summarize",
    "warning_lines",
]

EXAMPLE_SOURCE = Path(__file__).resolve().parents[1] / "examples" / "trainer"
EXAMPLE_ARGUMENTS: dict[str, Any] = {
    "training_args": ["--epochs", "20", "--checkpoint-every", "3", "--step-seconds", "0.1"],
    "thresholds": {"accuracy": ">=0.85"},
}
"""What the bundled example trainer is run with (a short run; a digits classifier's gate)."""
NO_GATE = (
    "no quality gate: every evaluation passes (a pipeline that promotes on the gate promotes "
    """every model); set one with --param thresholds='{"METRIC": ">=BOUND"}' on a metric your """
    "evaluate() returns"
)
"""What a run without thresholds says before it starts."""
TOOL_KEYS = {"python-module": "python_module", "evaluation-entry-point": "evaluation_entry_point"}
"""``[tool.kfp-spot]`` keys of a package's pyproject.toml and the parameters they set."""


def _nothing_to_preempt(pipeline: Any, preemptions: int) -> str | None:
    """The note for preemptions asked of a pipeline without a launch_spot_job task, or None."""
    from google.protobuf import json_format

    from kfp_spot.jobs.template_walk import EVALUATE_CALL, LAUNCH_CALL, template_tasks

    spec = json_format.MessageToDict(pipeline.pipeline_spec)
    calls = {task.call for task in template_tasks(spec, {})}  # sub-DAGs too
    if not preemptions or LAUNCH_CALL in calls:
        return None
    why = " (its evaluation scores a checkpoint that exists)" if EVALUATE_CALL in calls else ""
    return f"--preemptions {preemptions} does nothing here: the pipeline launches no CustomJob{why}"


def _tool_config(pyproject: str, tables: Mapping[str, Any]) -> Mapping[str, Any]:
    """``[tool.kfp-spot]``, refusing what would be ignored: a misspelt table name or key.

    An ignored key would not fail here: the run would fall back to the default module or
    evaluation entry point and fail later, the evaluation only after the whole training.
    """
    valid = ", ".join(TOOL_KEYS)
    for table in tables:
        if table != "kfp-spot" and table.replace("_", "-").lower() in ("kfp-spot", "kfpspot"):
            raise LocalRunError(
                f"{pyproject}: [tool.{table}] is not read; the table is [tool.kfp-spot] "
                f"(keys: {valid})"
            )
    config = tables.get("kfp-spot") or {}
    if not isinstance(config, Mapping):
        raise LocalRunError(f"{pyproject}: [tool.kfp-spot] must be a table (keys: {valid})")
    for key in config:
        if key not in TOOL_KEYS:
            near = str(key).replace("_", "-").lower()
            hint = f"; did you mean {near!r}?" if near in TOOL_KEYS else ""
            raise LocalRunError(
                f"{pyproject}: [tool.kfp-spot] has no key {key!r} (its keys: {valid}){hint}"
            )
    return config


def package_arguments(source: str | Path) -> dict[str, Any]:
    """The pipeline arguments a package's own pyproject.toml sets (``[tool.kfp-spot]``).

    Also the example's training arguments and gate when ``source`` is the bundled example.

    Raises:
        LocalRunError: ``source`` does not exist, is a file prepare_package does not build
            (neither a ``.py`` script nor a source archive), or ``[tool.kfp-spot]`` has a key it
            does not know, a value that is not text or an entry point that is not
            ``module:function``.
    """
    if not isinstance(source, (str, Path)):
        raise LocalRunError(
            f"source: expected a path (str or pathlib.Path), got {type(source).__name__}"
        )
    path = Path(source)
    if not path.exists():
        raise LocalRunError(f"training source {source} does not exist")
    arguments: dict[str, Any] = {}
    if path.resolve() == EXAMPLE_SOURCE:
        arguments.update(EXAMPLE_ARGUMENTS)
    from kfp_spot.packaging.sources import is_archive, source_file_problem

    if path.is_file() and (problem := source_file_problem(path, str(source))):
        raise LocalRunError(f"source: {problem}")  # before the emulator starts, not in a task
    if path.is_file() and is_archive(path.name):
        # the archive's own pyproject.toml, found as prepare_package finds it
        from kfp_spot.packaging import PackagingError
        from kfp_spot.packaging.sources import materialize

        with tempfile.TemporaryDirectory(prefix="kfp-spot-source-") as work:
            try:
                tree = materialize(str(path), Path(work))
            except PackagingError:
                return arguments  # prepare_package says what is wrong with it, first thing
            if not tree.generated:
                arguments.update(_tool_arguments(tree.path, f"{path} (its pyproject.toml)"))
    else:
        arguments.update(_tool_arguments(path, str(path / "pyproject.toml")))
    return arguments


def _tool_arguments(project: Path, label: str) -> dict[str, Any]:
    """The arguments ``project``'s ``[tool.kfp-spot]`` sets; errors name ``label``."""
    from kfp_spot.packaging.build import tool_tables

    arguments: dict[str, Any] = {}
    if (project / "pyproject.toml").is_file():
        try:
            tables = tool_tables(project)
        except ValueError as exc:  # packaging's BuildError: "source: pyproject.toml is not ..."
            reason = str(exc).removeprefix("source: ").removeprefix("pyproject.toml is ")
            raise LocalRunError(f"{label}: {reason}") from None
        config = _tool_config(label, tables)
        for key, name in TOOL_KEYS.items():
            value = config.get(key)
            if value is None:
                continue
            if not isinstance(value, str) or not value:
                raise LocalRunError(
                    f"{label}: [tool.kfp-spot] {key} must be a non-empty string, got {value!r}"
                )
            arguments[name] = value
    from kfp_spot.packaging.sources import MODULE_FORM, is_module_name

    module = arguments.get("python_module")
    if module is not None and not is_module_name(module):  # else refused once the run started
        raise LocalRunError(
            f"{label}: [tool.kfp-spot] python-module: {module!r} is not {MODULE_FORM}"
        )
    entry_point = arguments.get("evaluation_entry_point")
    if entry_point is not None:  # imported only after training: a typo would cost the run
        from kfp_spot.packaging.sources import ENTRY_POINT_FORM, is_entry_point

        if not is_entry_point(entry_point):
            raise LocalRunError(
                f"{label}: [tool.kfp-spot] evaluation-entry-point: {entry_point!r} is not "
                f"{ENTRY_POINT_FORM}"
            )
    return arguments


def pipeline_to_run(template: str | Path | None = None) -> Any:
    """``template``, or ``spot_training`` imported only then: a template's checks need no KFP."""
    if template is not None:
        return template
    from kfp_spot.pipelines.spot_training import spot_training

    return spot_training


def spot_training_arguments(
    source: str | Path,
    *,
    training_args: Sequence[str] | None = None,
    thresholds: dict[str, Any] | None = None,
    parameters: Mapping[str, Any] | None = None,
    declared: set[str] | None = None,
) -> dict[str, Any]:
    """The pipeline arguments :func:`run_local` runs ``source`` with (see its arguments).

    ``declared``: the parameters of a template of the user's own, which need not be
    spot_training's: what the run adds by itself (the source, its ``[tool.kfp-spot]`` settings,
    the example's arguments, the empty gate) goes only to the ones it declares, and to none of
    a template that declares no ``source`` (it trains none).

    Raises:
        LocalRunError: as :func:`package_arguments`; or a template that declares no ``source``
            is given a source other than the bundled example (naming its parameters); a source
            directory prepare_package would refuse (no project file, no package); or
            ``training_args`` is a text rather than a list.
    """
    arguments = {"source": str(source), **package_arguments(source)}
    # The pipeline's default gate is the example's accuracy bound; another package's evaluate()
    # returns its own metrics, so it is gated only on the thresholds it is given.
    arguments.setdefault("thresholds", {})
    if declared is not None:
        if "source" not in declared and Path(source).resolve() != EXAMPLE_SOURCE:
            raise LocalRunError(
                f"the template has no 'source' parameter to take the training source {source}; "
                f"valid: {', '.join(sorted(declared))} (set them with --param NAME=VALUE)"
            )
        # A template without `source` trains no source: nothing of the (default) example's
        # arguments, gate included, is its own; its parameters keep their defaults.
        taken = declared if "source" in declared else set()
        arguments = {k: v for k, v in arguments.items() if k in taken}
    if "source" in arguments and Path(source).is_dir():  # else refused once the run started
        problem = source_directory_problem(Path(source), str(source))
        if problem:
            raise LocalRunError(f"source: {problem}")
    if training_args is not None:
        if isinstance(training_args, (str, bytes)):  # list() would pass one per character
            raise LocalRunError(
                f"training_args: {training_args!r} is one text; give a list of arguments such "
                "as ['--steps', '40']"
            )
        arguments["training_args"] = list(training_args)
    if thresholds is not None:
        arguments["thresholds"] = thresholds
    arguments.update(parameters or {})
    if "source" in arguments and Path(source).is_dir():  # refused now, not once the run started
        unset = "" if declared is None or "python_module" in declared else "-"  # a template's own
        module = arguments.get("python_module", unset)
        if problem := bare_package_module_problem(Path(source), module):
            raise LocalRunError(f"python_module: {problem} (--param python_module=...)")
        if problem := requirements_problem(
            Path(source), str(source), arguments.get("requirements") or []
        ):
            raise LocalRunError(f"requirements: {problem}")
    return arguments


def _check_outside(run_dir: Path, source: str | Path) -> None:
    """Refuse a run directory inside (or being) the source directory, but in its runs folder.

    The run would write its emulator, checkpoints and report among the package's files, which
    the next run's package would then hold. The source's own ``kfp-spot-runs/`` (where
    ``kfp-spot run --source .`` puts its runs by default) is never packaged, so a run there is
    fine.

    Raises:
        LocalRunError: naming both.
    """
    tree, target = Path(source).resolve(), run_dir.resolve()
    if not tree.is_dir() or not (target == tree or tree in target.parents):
        return
    if (tree / LOCAL_RUNS_DIR) in target.parents:
        return
    raise LocalRunError(
        f"run_dir: {run_dir} is inside the training source {source}: the run's files would be "
        f"packaged with it; give a directory outside the source or under its {LOCAL_RUNS_DIR}/, "
        "which is never packaged (--run-dir)"
    )


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
        LocalRunError: a missing source or template, or an argument the pipeline does not take.
    """
    pipeline = load(pipeline_to_run(template))
    arguments = spot_training_arguments(
        source,
        training_args=training_args,
        thresholds=thresholds,
        parameters=parameters,
        declared=None if template is None else set(pipeline.component_spec.inputs),
    )
    check_evaluation_module(source, arguments, pipeline)
    _check_outside(Path(run_dir), source)
    if progress is not None and "thresholds" in arguments and not arguments["thresholds"]:
        progress(f"note: {NO_GATE}")
    if progress is not None:
        unread = requirements_file_note(Path(source), arguments.get("requirements") or [])
        for note in [n for n in (_nothing_to_preempt(pipeline, preemptions), unread) if n]:
            progress(f"note: {note}")
        for warning in [*_unmet_pins(source, arguments, pipeline), *_raw_dirs(source, arguments)]:
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


def _raw_dirs(source: str | Path, arguments: Mapping[str, Any]) -> list[str]:
    """What the prepare-package task will warn of: ``AIP_*_DIR`` read raw (a directory or script).

    A script is read as the module of its own name, from its folder (the module the package
    makes of it, wherever ``python_module`` places it, is the same code).
    """
    from kfp_spot.packaging import outputdirs

    path = Path(source)
    if "source" in arguments and path.is_file() and path.suffix == ".py":
        return outputdirs.warnings_for(path.parent, path.stem)
    if "source" not in arguments or not path.is_dir():
        return []
    given = arguments.get("python_module")
    module = outputdirs.job_module(path, given if isinstance(given, str) else "")
    return outputdirs.warnings_for(path, module) if module else []


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
