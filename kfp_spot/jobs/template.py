"""The launch_spot_job (and evaluate_checkpoint) tasks of a compiled pipeline, checked first.

A pipeline of the user's own (GCPC's ops beside ours) bakes a launch's inputs into the template
as constants, or wires them to pipeline parameters. ``kfp-spot submit`` checks each launch task
with the launcher's own reader and job builder (:func:`kfp_spot.jobs.entry.build_request`,
:func:`kfp_spot.jobs.spec.build_custom_job`, the Vertex AI rules), so a value the launcher would
refuse inside the running pipeline is refused before the PipelineJob is created, in the same
words, prefixed by the task. What is known only at run time is not guessed at:

- a task whose inputs come from another task's outputs or a ``dsl.ParallelFor`` item is not
  checked (its other inputs could only be judged together with those);
- a ``package`` artifact another task makes stands in as a ``gs://`` package (its own form is
  checked when it is made); one the run itself would have to be given (a component's YAML
  submitted alone) is missing, as a PipelineJob's parameters cannot pass it; ``resume_from`` is
  left out (it is read at run time);
- the pipeline's project, region and persistent resource (GCPC's placeholders) are the
  submission's, as Vertex AI Pipelines fills them in.

A launch task left cacheable (KFP's default for a task) gets a warning: a rerun with the same
inputs would replay the earlier outcome without training. An evaluate_checkpoint task's
``thresholds``, ``step`` and ``entry_point`` are read with the evaluation's own parsers
(:mod:`kfp_spot.evaluation`), since it reads them only after the training was paid for.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from kfp_spot.jobs.inputs import LaunchInputError
from kfp_spot.vertex import pipeline_context
from kfp_spot.vertex.values import InvalidFieldError

# The line of the component's body that calls the launcher: what makes a task a launch.
LAUNCH_CALL = "from kfp_spot.jobs.entry import launch_spot_job"
EVALUATE_CALL = "from kfp_spot.evaluation import component_entry"
# Stand-ins for what exists only at run time (valid forms, never sent anywhere).
_RUN_TIME_ROOT = "gs://pipeline-root/run"
_PACKAGE_URI = "gs://pipeline-root/run/prepare-package/package.tar.gz"
_PACKAGE_MODULE = "trainer.task"  # the package's metadata names it at run time


class TemplateTaskError(ValueError):
    """A task of the template would be refused at run time; the message names it."""


_UNKNOWN = object()  # a value known only at run time


@dataclass(frozen=True)
class LaunchTask:
    """One launch_spot_job task: where it is, its parameter inputs, how it runs."""

    path: str  # the task's name, with the names of the sub-DAGs it is in (a/b)
    call: str  # LAUNCH_CALL or EVALUATE_CALL
    parameters: dict[str, Any]  # each input's value (_UNKNOWN: known only at run time)
    artifacts: frozenset[str]  # the artifact inputs it is given
    env: dict[str, str]  # the executor's environment (set_env_variable)
    cached: bool


def _defaults(component: Mapping[str, Any]) -> dict[str, Any]:
    definitions = (component.get("inputDefinitions") or {}).get("parameters") or {}
    return {name: spec.get("defaultValue", _UNKNOWN) for name, spec in definitions.items()}


def _value(given: Mapping[str, Any], env: Mapping[str, Any]) -> Any:
    if "runtimeValue" in given:
        return (given["runtimeValue"] or {}).get("constant", _UNKNOWN)
    if "componentInputParameter" in given and "parameterExpressionSelector" not in given:
        return env.get(given["componentInputParameter"], _UNKNOWN)
    return _UNKNOWN  # another task's output, a loop item's field, ...


def launch_tasks(spec: Mapping[str, Any], arguments: Mapping[str, Any]) -> Iterator[LaunchTask]:
    """Every launch (and evaluate) task of ``spec``, sub-DAGs (conditions, loops, ...) too.

    Args:
        spec: the compiled pipeline spec.
        arguments: the submission's parameter values (the root's defaults fill in the rest).
    """
    components = spec.get("components") or {}
    executors = (spec.get("deploymentSpec") or {}).get("executors") or {}
    root = spec.get("root") or {}
    env = {**_defaults(root), **arguments}
    # A PipelineJob's parameters cannot pass the root's artifact inputs: none is given.
    yield from _walk(root.get("dag") or {}, env, frozenset(), "", components, executors)


def _given_artifacts(inputs: Mapping[str, Any], available: frozenset[str]) -> frozenset[str]:
    """The artifact inputs a task gets: another task's output, or one its DAG was given."""
    return frozenset(
        name
        for name, source in (inputs.get("artifacts") or {}).items()
        if "taskOutputArtifact" in source or source.get("componentInputArtifact") in available
    )


def _task(
    path: str,
    component: Mapping[str, Any],
    values: dict[str, Any],
    artifacts: frozenset[str],
    cached: bool,
    executors: Mapping[str, Any],
) -> LaunchTask | None:
    container = (executors.get(component.get("executorLabel", "")) or {}).get("container")
    command = " ".join(str(part) for part in (container or {}).get("command") or [])
    call = next((c for c in (LAUNCH_CALL, EVALUATE_CALL) if c in command), None)
    if not isinstance(container, dict) or call is None:
        return None
    return LaunchTask(
        path=path,
        call=call,
        parameters=values,
        artifacts=artifacts,
        env={str(e.get("name")): str(e.get("value")) for e in container.get("env") or []},
        cached=cached,
    )


def _walk(
    dag: Mapping[str, Any],
    env: Mapping[str, Any],
    available: frozenset[str],
    prefix: str,
    components: Mapping[str, Any],
    executors: Mapping[str, Any],
) -> Iterator[LaunchTask]:
    for name, task in (dag.get("tasks") or {}).items():
        component = components.get((task.get("componentRef") or {}).get("name", "")) or {}
        inputs = task.get("inputs") or {}
        given = {k: _value(v, env) for k, v in (inputs.get("parameters") or {}).items()}
        values = {**_defaults(component), **given}
        path = f"{prefix}{name}"
        artifacts = _given_artifacts(inputs, available)
        if "dag" in component:
            yield from _walk(component["dag"], values, artifacts, f"{path}/", components, executors)
            continue
        found = _task(
            path,
            component,
            values,
            artifacts,
            bool((task.get("cachingOptions") or {}).get("enableCache")),
            executors,
        )
        if found is not None:
            yield found


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """The task's own environment (``KFP_SPOT_EXTRA_REGIONS``, ...) while it is checked."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _quiet(quiet: bool) -> Iterator[None]:
    """What the launcher's checks print (notes on the image or the machine type), held back.

    A local run shows those notes itself, once; checked for a submission they are the user's.
    """
    if not quiet:
        yield
        return
    with contextlib.redirect_stderr(io.StringIO()):
        yield


def check_launch_task(
    task: LaunchTask, *, project: str, location: str, local: bool = False
) -> None:
    """Check one launch task as the launcher would on Vertex AI (nothing is sent or read).

    Args:
        task: the task.
        project: what GCPC's project placeholder becomes.
        location: what GCPC's location placeholder becomes.
        local: check it as a local run's launch, against the local emulator (its endpoint is
            the emulator's, its rules the emulator's); else as Vertex AI Pipelines runs it.

    Raises:
        TemplateTaskError: naming the task and the input, in the launcher's words.
    """
    from kfp_spot.jobs.entry import build_request
    from kfp_spot.jobs.inputs import input_for_field
    from kfp_spot.jobs.spec import build_custom_job
    from kfp_spot.vertex import EMULATOR, VERTEX_AI, InvalidJobSpecError, validate_custom_job
    from kfp_spot.vertex.client import is_emulator_endpoint

    fills = {
        pipeline_context.PROJECT_ID_PLACEHOLDER: project,
        pipeline_context.LOCATION_PLACEHOLDER: location,
        pipeline_context.PERSISTENT_RESOURCE_ID_PLACEHOLDER: "",
    }
    inputs: dict[str, Any] = {
        name: fills.get(value, value) if isinstance(value, str) else value
        for name, value in task.parameters.items()
    }
    try:
        endpoint = str(inputs.get("api_endpoint") or "")
        try:
            emulator = is_emulator_endpoint(endpoint)
        except InvalidFieldError as exc:
            raise LaunchInputError(exc.field, exc.reason) from None
        if emulator and not local:
            raise LaunchInputError(
                "api_endpoint",
                f"{endpoint!r} is the local emulator, which a task on Vertex AI Pipelines cannot "
                "reach: leave it empty (Vertex AI in the task's location)",
            )
        if "package" in task.artifacts:
            metadata: dict[str, Any] = {"package_uris": [_PACKAGE_URI]}
            if not inputs.get("python_module"):
                metadata["python_module"] = _PACKAGE_MODULE
            inputs["package"] = SimpleNamespace(uri=_PACKAGE_URI, metadata=metadata)
        name = task.path.rsplit("/", 1)[-1]
        inputs["checkpoint"] = SimpleNamespace(uri=f"{_RUN_TIME_ROOT}/{name}/checkpoint")
        inputs["gcp_resources"] = f"{_RUN_TIME_ROOT}/{name}/gcp_resources"
        with _environment(task.env), _quiet(local):
            request = build_request(**inputs)
            request.inputs.base_output_directory = request.base_output_directory
            job = build_custom_job(request.inputs, target=EMULATOR if local else VERTEX_AI)
            if local:  # the emulator's own rules: it runs only the machine types it knows
                try:
                    validate_custom_job(job)
                except InvalidJobSpecError as exc:
                    raise LaunchInputError(
                        input_for_field(exc.field, request.inputs),
                        f"{exc.message} (CustomJob field {exc.field})",
                    ) from None
    except LaunchInputError as exc:
        raise TemplateTaskError(f"task {task.path!r}: {exc}") from None


def check_evaluate_task(task: LaunchTask) -> None:
    """What an evaluate_checkpoint task reads only after the training: each input known now.

    Raises:
        TemplateTaskError: naming the task and the input, in the evaluation's words.
    """
    import json

    from kfp_spot.evaluation.entry_point import check_entry_point
    from kfp_spot.evaluation.errors import EvaluationInputError
    from kfp_spot.evaluation.selection import parse_step
    from kfp_spot.evaluation.thresholds import parse_thresholds

    given = {k: v for k, v in task.parameters.items() if v is not _UNKNOWN}
    try:
        thresholds = given.get("thresholds")
        if isinstance(thresholds, str) and thresholds:  # a dict may arrive as its JSON text
            try:
                thresholds = json.loads(thresholds)
            except ValueError:
                raise EvaluationInputError(
                    "thresholds", f"{thresholds!r} is not a JSON object of metric -> bound"
                ) from None
        if isinstance(thresholds, Mapping):
            parse_thresholds(thresholds)
        if given.get("step"):
            parse_step(given["step"])
        if given.get("entry_point"):
            check_entry_point(given["entry_point"])
    except EvaluationInputError as exc:
        raise TemplateTaskError(f"task {task.path!r}: evaluate_checkpoint input {exc}") from None


def check_template_launches(
    spec: Mapping[str, Any],
    *,
    project: str,
    location: str,
    arguments: Mapping[str, Any],
    enable_caching: bool | None = None,
) -> list[str]:
    """Check every launch task of ``spec`` whose inputs are all known before the run.

    Args:
        spec: the compiled pipeline spec.
        project: the submission's project (what GCPC's placeholder becomes).
        location: the submission's region (likewise).
        arguments: the submission's parameter values.
        enable_caching: the submission's caching override (None: each task's own setting).

    Returns:
        Warnings: a launch task left cacheable; a launch task not checked, and why.

    Raises:
        TemplateTaskError: the first launch task the launcher would refuse.
    """
    warnings: list[str] = []
    for task in launch_tasks(spec, arguments):
        if task.call == EVALUATE_CALL:
            check_evaluate_task(task)
            continue
        if task.cached and enable_caching is None:
            warnings.append(
                f"task {task.path!r} (launch_spot_job) is cached: a rerun with the same inputs "
                "replays the earlier outcome without training; compile it with "
                ".set_caching_options(False), or submit with --disable-caching"
            )
        unknown = sorted(k for k, v in task.parameters.items() if v is _UNKNOWN)
        if unknown:
            warnings.append(
                f"task {task.path!r} (launch_spot_job) not checked before the run: "
                f"{', '.join(unknown)} known only at run time"
            )
            continue
        check_launch_task(task, project=project, location=location)
        for name, submitted in (("project", project), ("location", location)):
            given = task.parameters.get(name)
            if (
                isinstance(given, str)
                and given
                and not given.startswith("{{$.")
                and (given != submitted)
            ):
                warnings.append(
                    f"task {task.path!r} (launch_spot_job) runs its CustomJob in {name} "
                    f"{given!r}, baked into the template, not the submission's {submitted!r}; "
                    f"leave {name} unset to follow the pipeline's"
                )
    return warnings


def check_local_launches(spec: Mapping[str, Any], arguments: Mapping[str, Any]) -> None:
    """Check a local run's launch and evaluate tasks before it starts, against the emulator.

    As :func:`check_template_launches` does for a submission, with the local emulator's rules.

    A value the launcher would refuse (``replica_count=0``, a misspelt machine type, a bad gate)
    is refused before the run packages the source and trains, not when it reaches that task.

    Args:
        spec: the compiled pipeline spec.
        arguments: the run's parameter values, ``api_endpoint`` the emulator's.

    Raises:
        TemplateTaskError: the first task the run would fail at, and why.
    """
    from kfp_spot.vertex.pipeline_context import LOCAL_LOCATION, LOCAL_PROJECT

    for task in launch_tasks(spec, arguments):
        if task.call == EVALUATE_CALL:
            check_evaluate_task(task)
        elif not any(v is _UNKNOWN for v in task.parameters.values()):
            check_launch_task(task, project=LOCAL_PROJECT, location=LOCAL_LOCATION, local=True)
