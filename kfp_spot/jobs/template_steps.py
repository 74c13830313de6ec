"""A pipeline's prepare_package and evaluate_checkpoint tasks, checked before the run.

Neither talks to Vertex AI's job or endpoint services, unlike the launch and deploy tasks
(:mod:`kfp_spot.jobs.template`, which calls these): a prepare_package task bound for Vertex AI
must name Cloud Storage, and an evaluate_checkpoint task's inputs are read with the evaluation's
own parsers, since it reads them only after the training was paid for.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

from kfp_spot.jobs.template_walk import DEPLOY_CALL, UNKNOWN, TemplateTask
from kfp_spot.vertex import pipeline_context
from kfp_spot.vertex.values import show

T = TypeVar("T")


@contextlib.contextmanager
def task_environment(env: Mapping[str, str], *, on_vertex: bool) -> Iterator[None]:
    """The task's own environment (``KFP_SPOT_EXTRA_REGIONS``, ...) while it is checked.

    ``on_vertex``: with what Vertex AI Pipelines adds, the run's system labels, which the launch
    and the deploy put on what they create, counted against Google Cloud's 64 labels.
    """
    env = pipeline_context.run_environment(env) if on_vertex else env
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


class TemplateTaskError(ValueError):
    """A task of the template would be refused at run time; the message names it."""


@contextlib.contextmanager
def refused(refusals: list[str]) -> Iterator[None]:
    """A task's refusal kept in ``refusals``, so the check goes on to the next task.

    Every problem found before the run is reported at once, not one per attempt.
    """
    try:
        yield
    except TemplateTaskError as exc:
        refusals.extend(line for line in str(exc).splitlines() if line not in refusals)


def raise_refusals(refusals: list[str]) -> None:
    """Raise every refusal kept by :func:`refused` as one error, one line each.

    Raises:
        TemplateTaskError: when there is one or more.
    """
    if refusals:
        raise TemplateTaskError("\n".join(refusals))


def check_each(items: Iterable[T], check: Callable[[T], None]) -> None:
    """``check`` on every item, each refusal kept, then all of them raised together.

    Raises:
        TemplateTaskError: every item's refusal, one line each.
    """
    refusals: list[str] = []
    for item in items:
        with refused(refusals):
            check(item)
    raise_refusals(refusals)


def placement_warnings(task: TemplateTask, *, project: str, location: str) -> list[str]:
    """A launch or deploy task whose project or region is not the submission's, and the fix.

    One baked into the template, or the default of a pipeline parameter (which the submission's
    parameter values change): the task runs there, which may be what the team meant, so it is a
    warning. Its fix names the pipeline parameter and the submission's own ``project`` or
    ``location``, which ``kfp-spot submit`` (``--param``, ``--location``) and the Python
    submission (``parameter_values``, ``location=``) both take.
    """
    warnings: list[str] = []
    kind = task.component
    where = "deploys its model" if task.call == DEPLOY_CALL else "runs its CustomJob"
    for name, submitted in (("project", project), ("location", location)):
        given = task.parameters.get(name)
        if (
            isinstance(given, str)
            and given
            and not given.startswith("{{$.")
            and (given != submitted)
        ):
            parameter = task.from_pipeline.get(name)
            if parameter is not None:  # the default of one of the pipeline's parameters
                warnings.append(
                    f"task {task.path!r} ({kind}) {where} in {name} {show(given)}, from the "
                    f"pipeline parameter {parameter!r}, not the submission's {submitted!r}; "
                    f"set the pipeline parameter {parameter} to {submitted!r} to run it there, "
                    f"or submit the pipeline with {name} {show(given)} where it runs"
                )
                continue
            warnings.append(
                f"task {task.path!r} ({kind}) {where} in {name} "
                f"{show(given)}, baked into the template, not the submission's {submitted!r}; "
                f"leave the submission's {name} unset to follow the pipeline's, or submit the "
                f"pipeline with {name} {show(given)} where it runs"
            )
    return warnings


def input_refused(task: TemplateTask, field: str, reason: str) -> TemplateTaskError:
    """The refusal of ``task``'s input ``field``, and the pipeline parameter that set it.

    A team's pipeline passes its own parameters on (``project=gcp_project``): the component's
    input is named as its component reads it, and the pipeline parameter that set it, when it
    has another name, in words true for ``kfp-spot submit``'s ``--param`` and for the Python
    submission's and a local run's ``parameter_values``/``arguments`` alike.
    """
    return TemplateTaskError(
        f"task {task.path!r}: {task.component} input {field!r}{_given_by(task, field)}: {reason}"
    )


def _given_by(task: TemplateTask, field: str) -> str:
    """`` (from the pipeline parameter NAME)`` when one of another name set ``field``, else ""."""
    name = field.split("[", 1)[0]  # thresholds['accuracy']: thresholds
    parameter = task.from_pipeline.get(name)
    return f" (from the pipeline parameter {parameter})" if parameter and parameter != name else ""


def check_evaluate_task(task: TemplateTask) -> None:
    """What an evaluate_checkpoint task reads only after the training: each input known now.

    Raises:
        TemplateTaskError: naming the task and the input, in the evaluation's words.
    """
    import json

    from kfp_spot.evaluation.entry_point import check_entry_point
    from kfp_spot.evaluation.errors import EvaluationInputError
    from kfp_spot.evaluation.selection import parse_step
    from kfp_spot.evaluation.thresholds import parse_thresholds

    given = {k: v for k, v in task.parameters.items() if v is not UNKNOWN}
    try:
        thresholds = given.get("thresholds")
        if isinstance(thresholds, str) and thresholds:  # a dict may arrive as its JSON text
            try:
                thresholds = json.loads(thresholds)
            except ValueError:
                raise EvaluationInputError(
                    "thresholds", f"{show(thresholds)} is not a JSON object of metric -> bound"
                ) from None
        if isinstance(thresholds, Mapping):
            parse_thresholds(thresholds)
        if given.get("step"):
            parse_step(given["step"])
        if given.get("entry_point"):
            check_entry_point(given["entry_point"])
    except EvaluationInputError as exc:  # "field: reason", the field as the evaluation names it
        # one line per task: several bad bounds (a line each) joined
        reason = "; ".join(str(exc).removeprefix(f"{exc.field}: ").splitlines())
        raise TemplateTaskError(
            f"task {task.path!r}: evaluate_checkpoint input {exc.field}"
            f"{_given_by(task, exc.field)}: {reason}"
        ) from None


def check_staging_input(task: TemplateTask) -> None:
    """A prepare_package task's ``staging_uri``, where known: a form the task would refuse.

    Raises:
        TemplateTaskError: naming the task and the input.
    """
    value = task.parameters.get("staging_uri")
    if not isinstance(value, str) or not value.strip():  # empty: next to the outputs
        return
    from kfp_spot.packaging.core import staging_root
    from kfp_spot.packaging.errors import PackagingError

    try:
        staging_root(value)
    except PackagingError as exc:
        raise TemplateTaskError(f"task {task.path!r}: prepare_package input {exc}") from None


def check_prepare_task(task: TemplateTask) -> None:
    """A prepare_package task bound for Vertex AI: its inputs, where known before the run.

    On Vertex AI Pipelines the task runs in a container: a path on the submitting machine (the
    user's project directory) does not exist there for its ``source`` or ``staging_uri``, and
    each of its ``requirements`` must be PEP 508 (the task checks them first): either way the run
    would fail at its first task.

    Raises:
        TemplateTaskError: naming the task and the input.
    """
    check_staging_input(task)
    requirements = task.parameters.get("requirements")
    if isinstance(requirements, list):  # else known only at run time, or not given
        from kfp_spot.packaging.errors import PackagingError
        from kfp_spot.packaging.sources import check_requirements

        try:
            check_requirements(requirements)
        except PackagingError as exc:  # "requirements: '...' is not a PEP 508 requirement"
            raise TemplateTaskError(
                f"task {task.path!r}: prepare_package input {exc}; the task would fail at the "
                "start of the run"
            ) from None
    for name in ("source", "staging_uri"):
        value = task.parameters.get(name)
        if name == "source" and isinstance(value, str) and not value.strip():
            raise input_refused(  # an empty staging_uri is valid: next to the outputs
                task,
                "source",
                f"{value!r} is empty: there is no package to build; pass its Cloud Storage "
                "location, gs://BUCKET/PATH (or /gcs/BUCKET/PATH)",
            )
        if not isinstance(value, str) or not value.strip():
            continue
        if value.strip().startswith(("gs://", "/gcs/")):
            continue
        raise input_refused(
            task,
            name,
            f"{show(value)} is a path on this machine, which the task's container on Vertex AI "
            "Pipelines cannot read: upload it and pass gs://BUCKET/PATH (or /gcs/BUCKET/PATH)",
        )


def prepare_task_warnings(task: TemplateTask) -> list[str]:
    """What a prepare_package task will warn of, where its inputs say it before the run.

    Its ``requirements`` (a script's or a bare package's; a project's own are in its source,
    which a submission does not read) against the versions its ``executor_image_uri`` holds
    (:func:`kfp_spot.packaging.imagepins.unmet_pins`).
    """
    requirements, image = (task.parameters.get(k) for k in ("requirements", "executor_image_uri"))
    if not isinstance(requirements, list) or not isinstance(image, str) or not image:
        return []
    from kfp_spot.packaging.imagepins import unmet_pin_warnings

    return unmet_pin_warnings([r for r in requirements if isinstance(r, str)], image)


def check_loop_output_directory(task: TemplateTask) -> None:
    """A launch in a ``dsl.ParallelFor`` given one ``base_output_directory`` for every iteration.

    Its iterations would share one checkpoint directory: each would resume from another's
    newest step (one after the other) or be refused while another runs (side by side). A value
    built from the loop item is known only at run time and left alone.

    Raises:
        TemplateTaskError: naming the task, the input and what to do.
    """
    value = task.parameters.get("base_output_directory")
    if not task.loop or value is UNKNOWN or not isinstance(value, str) or not value:
        return
    raise TemplateTaskError(
        f"task {task.path!r}: launch_spot_job input 'base_output_directory': {show(value)} is the "
        f"same in every iteration of the dsl.ParallelFor {task.loop!r}, so they would share "
        "one checkpoint directory (each resuming from another's newest step, or refused while "
        "another runs): leave it empty (each iteration then writes next to its own outputs) or "
        "build one per iteration from the loop item"
    )


def _imported_from(parameter: str) -> str:
    """`` (the dsl.importer's URI, from the pipeline parameter NAME)``, or "" for a constant."""
    return (
        f" (the dsl.importer's URI, from the pipeline parameter {parameter})" if parameter else ""
    )


_IMPORTED_CHECKPOINT = {  # the checkpoint a task reads when a dsl.importer gives it
    "evaluate_checkpoint": "checkpoint",
    "launch_spot_job": "resume_from",
}


def check_imported_checkpoint(task: TemplateTask, *, local: bool) -> None:
    """A checkpoint directory a ``dsl.importer`` gives the task, where its URI is known now.

    The evaluate_checkpoint and continue_training pipelines import an earlier run's checkpoint
    directory by its URI: an empty one, or a local path sent to Vertex AI (whose tasks cannot
    read this machine's files), failed only in the task, after the package was built.

    Args:
        task: an evaluate_checkpoint or launch_spot_job task.
        local: a local run (it reads local paths, which must exist); else a submission.

    Raises:
        TemplateTaskError: naming the task, the input and the pipeline parameter it comes from.
    """
    import os

    from kfp_spot.vertex.storage import (
        CHECKPOINT_URI_FORM,
        CLOUD_CHECKPOINT_URI_FORM,
        check_checkpoint_uri,
    )
    from kfp_spot.vertex.values import InvalidValueError

    name = _IMPORTED_CHECKPOINT.get(task.component, "")
    made = task.imports.get(name)
    if made is None or made.uri is UNKNOWN:
        return
    uri = made.uri
    given = _imported_from(made.parameter)
    where = f"task {task.path!r}: {task.component} input '{name}'{given}"
    form = CLOUD_CHECKPOINT_URI_FORM if not local else CHECKPOINT_URI_FORM
    if not isinstance(uri, str) or not uri.strip():
        raise TemplateTaskError(
            f"{where}: {show(uri)} is empty; give the checkpoint directory of an earlier run "
            f"(.../checkpoints: {form})"
        )
    try:
        check_checkpoint_uri(uri.strip(), local_paths=local)
    except InvalidValueError as exc:
        raise TemplateTaskError(f"{where}: {exc}") from None
    # A file:// URL names a path as a plain one does: the task's container on Vertex AI has
    # only what Cloud Storage's FUSE mount (/gcs/) shows of this machine's files: nothing.
    path = uri[len("file://") :] if uri.startswith("file://") else uri
    plain = not path.startswith(("gs://", "/gcs/"))
    if plain and not local:
        raise TemplateTaskError(
            f"{where}: {show(uri)} is a path on this machine, which a task on Vertex AI Pipelines "
            f"cannot read; give {form}"
        )
    if plain and not os.path.isdir(path):
        raise TemplateTaskError(
            f"{where}: {show(uri)} is not a directory here; give the checkpoint directory of an "
            "earlier run (.../checkpoints)"
        )


def check_imported_package(task: TemplateTask) -> None:
    """A package a ``dsl.importer`` gives a launch or evaluation bound for Vertex AI, by its URI.

    The task installs the artifact's URI (unless its metadata lists ``package_uris``), which on
    Vertex AI must be in Cloud Storage: a path of this machine failed only in the task.

    Raises:
        TemplateTaskError: naming the task, the input and the pipeline parameter it comes from.
    """
    from kfp_spot.vertex.storage import check_package_uri, service_uri
    from kfp_spot.vertex.values import InvalidValueError

    made = task.imports.get("package")
    if made is None or not isinstance(made.uri, str) or "package_uris" in made.metadata_keys:
        return
    given = _imported_from(made.parameter)
    try:
        check_package_uri(service_uri(made.uri.strip()), local_paths=False)
    except InvalidValueError as exc:
        raise TemplateTaskError(
            f"task {task.path!r}: {task.component} input 'package'{given}: {exc}"
        ) from None
