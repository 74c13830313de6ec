"""The launch_spot_job, evaluate_checkpoint and deploy_spot_endpoint tasks of a pipeline, first.

A pipeline of the user's own (GCPC's ops beside ours) bakes a launch's inputs into the template
as constants, or wires them to pipeline parameters. ``kfp-spot submit`` checks each launch task
(found by :mod:`kfp_spot.jobs.template_walk`) with the launcher's own reader and job builder
(:func:`kfp_spot.jobs.entry.build_request`, :func:`kfp_spot.jobs.spec.build_custom_job`, the
Vertex AI rules), so a value the launcher would refuse inside the running pipeline is refused
before the PipelineJob is created, in the same words, prefixed by the task. What is known only at
run time is not guessed at:

- a task whose inputs come from another task's outputs or a loop item's field is not checked
  (its other inputs could only be judged together with those); one in a ``dsl.ParallelFor`` over
  items written into the template or given as a parameter is checked with each item; a launch's
  ``base_output_directory`` that is the same in every iteration of its loop is refused;
- a ``package`` artifact another task makes stands in as a ``gs://`` package (its own form is
  checked when it is made); one the run itself would have to be given (a component's YAML
  submitted alone) is missing, as a PipelineJob's parameters cannot pass it; ``resume_from`` is
  left out (it is read at run time);
- GCPC's placeholders are filled in as Vertex AI Pipelines would: the submission's project and
  region, no persistent resource, network or key, a stand-in service account; the task's
  environment holds the run's billing label, which the launch and the deploy add to their labels.

A launch task left cacheable (KFP's default for a task) gets a warning: a rerun with the same
inputs would replay the earlier outcome without training. An evaluate_checkpoint task's
``thresholds``, ``step`` and ``entry_point`` are read with the evaluation's own parsers
(:mod:`kfp_spot.evaluation`), since it reads them only after the training was paid for. A
deploy_spot_endpoint task (machine type, replica counts, traffic split, serving image, labels,
...) goes through the deployer's own reader and checks (:class:`kfp_spot.serving.deploy.Deployer`)
without listing the model directory, which the run makes: its ``model`` stands in as a directory
under the run's root, ``uploaded_model`` and ``target_endpoint`` as resource names. A
prepare_package task's ``source`` and ``staging_uri`` must be Cloud Storage (``gs://`` or
``/gcs/``): its container cannot read the submitting machine's paths; an empty ``source`` is
refused (an empty ``staging_uri`` means next to the outputs). Both are in ``template_steps``.
An artifact input given another kfp-spot task's output that is not the one it takes (a launch's
``model`` as an evaluation's ``checkpoint``) is refused too (``template_wiring``).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import Any

from kfp_spot.jobs.inputs import LaunchInputError
from kfp_spot.jobs.template_steps import TemplateTaskError as TemplateTaskError
from kfp_spot.jobs.template_steps import (
    check_each,
    check_evaluate_task,
    check_imported_checkpoint,
    check_imported_package,
    check_loop_output_directory,
    check_prepare_task,
    check_staging_input,
    input_refused,
    placement_warnings,
    prepare_task_warnings,
    task_environment,
)
from kfp_spot.jobs.template_walk import (
    DEPLOY_CALL,
    EVALUATE_CALL,
    LAUNCH_CALL,
    PREPARE_CALL,
    TemplateTask,
    template_tasks,
)
from kfp_spot.jobs.template_warnings import cached_task_warning, task_setting_warnings
from kfp_spot.jobs.template_wiring import check_artifact_sources
from kfp_spot.vertex import pipeline_context
from kfp_spot.vertex.values import InvalidFieldError

# Stand-ins for what exists only at run time (valid forms, never sent anywhere or read).
_RUN_TIME_ROOT = "gs://pipeline-root/run"
_LOCAL_RUN_ROOT = "/pipeline-root/run"  # a local run's artifacts are local paths
_RESOURCE_ID = "1234567890"  # of a model or an endpoint another task makes
_PACKAGE_URI = "gs://pipeline-root/run/prepare-package/package.tar.gz"
_RUN_SERVICE_ACCOUNT = "pipeline-runner@pipeline-project.iam.gserviceaccount.com"
_PACKAGE_MODULE = "trainer.task"  # the package's metadata names it at run time


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


@contextlib.contextmanager
def _logged_warnings() -> Iterator[list[str]]:
    """The warnings kfp-spot's checks log (a machine type off its table), for the task's line."""
    held: list[str] = []

    class _Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append(record.getMessage())

    logger = logging.getLogger("kfp_spot")
    handler = _Hold(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield held
    finally:
        logger.removeHandler(handler)


def _filled(task: TemplateTask, project: str, location: str) -> dict[str, Any]:
    """The task's inputs, GCPC's placeholders as the run fills them in."""
    fills = {
        pipeline_context.PROJECT_ID_PLACEHOLDER: project,
        pipeline_context.LOCATION_PLACEHOLDER: location,
        pipeline_context.PERSISTENT_RESOURCE_ID_PLACEHOLDER: "",
        pipeline_context.SERVICE_ACCOUNT_PLACEHOLDER: _RUN_SERVICE_ACCOUNT,
        pipeline_context.NETWORK_PLACEHOLDER: "",
        pipeline_context.ENCRYPTION_SPEC_KMS_KEY_NAME_PLACEHOLDER: "",
    }
    return {
        name: fills.get(value, value) if isinstance(value, str) else value
        for name, value in task.parameters.items()
    }


def _root(task: TemplateTask, local: bool) -> str:
    """A stand-in for where the run keeps ``task``'s artifacts (never written or read).

    gs:// on Vertex AI Pipelines, a local path in a local run, as the run's own would be.
    """
    return f"{_LOCAL_RUN_ROOT if local else _RUN_TIME_ROOT}/{task.path.rsplit('/', 1)[-1]}"


def _check_api_endpoint(inputs: Mapping[str, Any], local: bool) -> None:
    """The task's ``api_endpoint``: well formed; the local emulator in a local run, else not.

    Raises:
        InvalidFieldError: naming ``api_endpoint``.
    """
    from kfp_spot.vertex.client import is_emulator_endpoint

    endpoint = str(inputs.get("api_endpoint") or "")
    emulator = is_emulator_endpoint(endpoint)
    if emulator and not local:
        raise InvalidFieldError(
            "api_endpoint",
            f"{endpoint!r} is the local emulator, which a task on Vertex AI Pipelines cannot "
            "reach: leave it empty (Vertex AI in the task's location)",
        )
    if local and not emulator:
        given = "is empty" if not endpoint else f"is {endpoint!r}"
        raise InvalidFieldError(
            "api_endpoint",
            f"{given}, so the task would call Vertex AI, where a local run sends nothing: pass "
            "it the pipeline's api_endpoint parameter (api_endpoint=api_endpoint), which the run "
            "sets to the local emulator's",
        )


def check_launch_task(
    task: TemplateTask, *, project: str, location: str, local: bool = False
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
    from kfp_spot.jobs.template_warnings import launch_notices
    from kfp_spot.vertex import EMULATOR, VERTEX_AI, InvalidJobSpecError, validate_custom_job

    inputs = _filled(task, project, location)
    try:
        try:
            _check_api_endpoint(inputs, local)
        except InvalidFieldError as exc:
            raise LaunchInputError(exc.field, exc.reason) from None
        if "package" in task.artifacts:
            metadata: dict[str, Any] = {"package_uris": [_PACKAGE_URI]}
            if not inputs.get("python_module"):
                metadata["python_module"] = _PACKAGE_MODULE
            inputs["package"] = SimpleNamespace(uri=_PACKAGE_URI, metadata=metadata)
        root = _root(task, local)
        inputs["checkpoint"] = SimpleNamespace(uri=f"{root}/checkpoint")
        inputs["gcp_resources"] = f"{root}/gcp_resources"
        # The launcher's notices (on stderr, once per process, unnamed) held: a submission gets
        # them as the task's warnings (logged: `_logged_warnings`), a local run as its notes.
        with task_environment(task.env, on_vertex=not local), _quiet(True):
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
        for notice in [] if local else launch_notices(request.inputs, request.policy):
            logging.getLogger(__name__).warning("%s", notice)
    except LaunchInputError as exc:
        raise input_refused(task, exc.field, exc.reason) from None


def check_deploy_task(
    task: TemplateTask, *, project: str, location: str, local: bool = False
) -> None:
    """Check one deploy_spot_endpoint task as the deployer would before its first call.

    What other tasks make stands in: the ``model`` directory as a URI under the run's root (not
    listed: it is made at run time), ``uploaded_model`` and ``target_endpoint`` as resource names
    in the task's project and location. Nothing is sent or read.

    Args:
        task: the task.
        project: what GCPC's project placeholder becomes.
        location: what GCPC's location placeholder becomes.
        local: check it as a local run's deploy (an emulator endpoint is the emulator's, with its
            rules, e.g. its serving replica limit); else as Vertex AI Pipelines runs it.

    Raises:
        TemplateTaskError: naming the task and the input, in the deployer's words.
    """
    from kfp_spot.jobs.template_warnings import deploy_notices
    from kfp_spot.serving.deploy import Deployer, DeployInputError
    from kfp_spot.serving.entry import build_request

    inputs = _filled(task, project, location)
    root = _root(task, local)
    parent = f"projects/{inputs.get('project')}/locations/{inputs.get('location')}"
    if "model" in task.artifacts:
        inputs["model"] = SimpleNamespace(uri=f"{root}/model", metadata={})
    for name, kind in (("uploaded_model", "models"), ("target_endpoint", "endpoints")):
        if name in task.artifacts:
            resource = f"{parent}/{kind}/{_RESOURCE_ID}"
            inputs[name] = SimpleNamespace(uri="", metadata={"resourceName": resource})
    inputs["gcp_resources"] = f"{root}/gcp_resources"
    try:
        try:
            _check_api_endpoint(inputs, local)
        except InvalidFieldError as exc:
            raise DeployInputError(exc.field, exc.reason) from None
        with task_environment(task.env, on_vertex=not local), _quiet(local):
            Deployer(request := build_request(**inputs), check_files=False)
    except DeployInputError as exc:
        raise input_refused(task, exc.field, exc.reason) from None
    for notice in [] if local else deploy_notices(request):  # what the deploy would print
        logging.getLogger(__name__).warning("%s", notice)


def _check_task(task: TemplateTask, *, project: str, location: str, local: bool) -> None:
    """``task`` checked by its own component's rules (see the check_*_task functions)."""
    if task.call == PREPARE_CALL:
        if not local:  # a local run reads local paths
            check_prepare_task(task)
        return
    if task.call == EVALUATE_CALL:
        check_evaluate_task(task)
    elif task.call == DEPLOY_CALL:
        check_deploy_task(task, project=project, location=location, local=local)
    else:
        check_launch_task(task, project=project, location=location, local=local)


def _submission_task(task: TemplateTask, *, project: str, location: str) -> list[str]:
    """One task of :func:`check_template_launches` checked for a submission; its warnings.

    Raises:
        TemplateTaskError: the task (or an iteration of its loop) would be refused.
    """
    warnings: list[str] = []
    check_artifact_sources(task)
    if task.call in (EVALUATE_CALL, LAUNCH_CALL):
        check_imported_checkpoint(task, local=False)
        check_imported_package(task)
    if task.call in (EVALUATE_CALL, PREPARE_CALL):
        _check_task(task, project=project, location=location, local=False)
        if task.call == PREPARE_CALL:
            warnings.extend(
                f"task {task.path!r} ({task.component}): {message}"
                for message in prepare_task_warnings(task)
            )
        return warnings
    kind, place = task.component, {"project": project, "location": location}
    if task.call == LAUNCH_CALL:
        check_loop_output_directory(task)
    checked = task.iterations() if task.unknown else [task]  # in a loop: each iteration
    if task.no_items:  # a dsl.ParallelFor over an empty list (a parameter given [])
        warnings.append(
            f"task {task.path!r} ({kind}) runs in no iteration: the items of its dsl.ParallelFor "
            f"{task.loop!r} are an empty list"
        )
        return warnings
    if checked is None:
        warnings.append(
            f"task {task.path!r} ({kind}) not checked before the run: "
            f"{', '.join(task.unknown)} known only at run time"
        )
        return warnings
    with _logged_warnings() as logged:  # every iteration: a sweep's misspelt values together
        check_each(checked, lambda each: _check_task(each, **place, local=False))
    warnings.extend(f"task {task.path!r} ({kind}): {m}" for m in dict.fromkeys(logged))
    warnings.extend(placement_warnings(task, **place))
    return warnings


def check_template_launches(
    spec: Mapping[str, Any],
    *,
    project: str,
    location: str,
    arguments: Mapping[str, Any],
    enable_caching: bool | None = None,
) -> list[str]:
    """Check every launch and deploy task of ``spec`` whose inputs are all known before the run.

    Args:
        spec: the compiled pipeline spec.
        project: the submission's project (what GCPC's placeholder becomes).
        location: the submission's region (likewise).
        arguments: the submission's parameter values.
        enable_caching: the submission's caching override (None: each task's own setting).

    Returns:
        Warnings: a prepare-package, launch or deploy task left cacheable (or made cacheable by
        ``enable_caching``), a prepare-package task's ``requirements`` its executor image's
        versions do not satisfy, or a launch or deploy task with a project or location baked in
        that is not the submission's; a launch or deploy task not checked, and why (a task in a
        ``dsl.ParallelFor`` over items known now is checked with each).

    Raises:
        TemplateTaskError: every task the launcher (evaluation, deployer) would refuse, one line
            each (a task's first refused input, as its component reads them).
    """
    warnings: list[str] = []

    def check(task: TemplateTask) -> None:  # --enable-caching caches every task, --disable- none
        cached = enable_caching is not False and cached_task_warning(task, bool(enable_caching))
        warnings.extend([cached] if cached else [])
        warnings.extend(task_setting_warnings(task))  # the task's own, not the CustomJob's
        warnings.extend(_submission_task(task, project=project, location=location))

    check_each(template_tasks(spec, arguments), check)
    return warnings


def check_local_launches(spec: Mapping[str, Any], arguments: Mapping[str, Any]) -> None:
    """Check a local run's launch, evaluate and deploy tasks before it starts, as the emulator.

    As :func:`check_template_launches` does for a submission, with the local emulator's rules.

    A value the launcher or the deployer would refuse (``replica_count=0``, a misspelt machine
    type, a bad gate, ``traffic_split={"0": 50}``) is refused before the run packages the source
    and trains, not when it reaches that task.

    Args:
        spec: the compiled pipeline spec.
        arguments: the run's parameter values, ``api_endpoint`` the emulator's.

    Raises:
        TemplateTaskError: every task the run would fail at, and why, one line each.
    """
    check_each(template_tasks(spec, arguments), _local_task)


def _local_task(task: TemplateTask) -> None:
    """One task of :func:`check_local_launches`, each iteration of its loop.

    Raises:
        TemplateTaskError: every refusal of the task (of each iteration), one line each.
    """
    from kfp_spot.vertex.pipeline_context import LOCAL_LOCATION, LOCAL_PROJECT

    if task.call == PREPARE_CALL:
        check_staging_input(task)  # a local run reads local paths: no more than that
        return
    check_artifact_sources(task)
    if task.call in (EVALUATE_CALL, LAUNCH_CALL):
        check_imported_checkpoint(task, local=True)
    if task.call == LAUNCH_CALL:
        check_loop_output_directory(task)
    checked = [task] if task.call == EVALUATE_CALL or not task.unknown else task.iterations()
    place = {"project": LOCAL_PROJECT, "location": LOCAL_LOCATION}
    check_each(checked or [], lambda each: _check_task(each, **place, local=True))
