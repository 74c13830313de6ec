"""Submit a pipeline to Vertex AI Pipelines from Python, checked as ``kfp-spot submit`` checks it.

:func:`submit` and :func:`dry_run` take a compiled template (its path) or a ``@dsl.pipeline``
function (compiled here with ``kfp.compiler.Compiler``, into a temporary file) and check, offline
and before anything is sent, all that ``kfp-spot submit`` checks:

- the submission's arguments and the pipeline's parameters
  (:func:`kfp_spot.vertex.pipeline_job.prepare_submission`);
- the images kfp-spot's tasks run in (one Vertex AI could not pull is refused);
- every prepare_package, launch_spot_job, evaluate_checkpoint and deploy_spot_endpoint task of the
  pipeline, a team's own pipeline with GCPC's ops beside them too, by its component's own rules
  (:func:`kfp_spot.jobs.template.check_template_launches`): a misspelt region in a launch's
  ``regions``, a bad gate, a local path as a package's source.

:mod:`kfp_spot.vertex.pipeline_job` (``prepare_submission``, ``dry_run``, ``submit_pipeline``)
checks the first two only: it sits below the components' rules. Once checked, the submission is
sent as it is (:func:`kfp_spot.vertex.pipeline_send.send_submission`), not prepared again.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from kfp_spot.vertex.pipeline_job import SubmissionError
from kfp_spot.vertex.values import show

__all__ = ["DEFAULT_LOCATION", "SubmissionError", "dry_run", "submit"]

DEFAULT_LOCATION = "us-central1"
"""The region of a submission given no ``location`` whose template names none of its own."""

Warn = Callable[[str], None]


def print_warning(text: str) -> None:
    """A warning on stderr, as ``kfp-spot submit`` shows it."""
    print(f"kfp-spot: warning: {text}", file=sys.stderr)


@contextlib.contextmanager
def _template(pipeline: Any) -> Iterator[Path]:
    """The compiled template of ``pipeline`` (a path, or a pipeline compiled for the block)."""
    if isinstance(pipeline, (str, Path)):
        from kfp_spot.registry import template_url_refusal

        refusal = template_url_refusal(str(pipeline))  # the SDK's form, checked here as a file
        if refusal is not None:
            raise SubmissionError(refusal)
        yield Path(pipeline)
        return
    if not hasattr(pipeline, "pipeline_spec"):
        raise SubmissionError(
            f"pipeline: {show(pipeline)} is neither a compiled template's path nor a @dsl.pipeline "
            "function"
        )
    from kfp import compiler

    with tempfile.TemporaryDirectory(prefix="kfp-spot-submit-") as folder:
        name = getattr(pipeline, "name", "") or "pipeline"
        path = Path(folder) / f"{name}.yaml"
        compiler.Compiler().compile(pipeline, str(path))
        yield path


def _default_gate_warning(spec: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """A warning when ``thresholds`` is left at the template's non-empty default.

    spot_training's default gate is the bundled example's (``accuracy``); another package's
    evaluate() may not return that metric, and the evaluation then fails after the training.
    """
    import json

    from kfp_spot.vertex.pipeline_job import template_parameters

    default = (template_parameters(spec).get("thresholds") or {}).get("defaultValue")
    if "thresholds" in values or not isinstance(default, dict) or not default:
        return []
    gate = json.dumps(default, sort_keys=True)
    return [
        f"thresholds: left at the template's default {gate}: an "
        f"evaluate() that returns no {', '.join(sorted(default))} fails the evaluation after "
        f'the training; set the pipeline parameter thresholds to {{"METRIC": ">=BOUND"}} on a '
        "metric yours returns ({} for no gate)"
    ]


def _checked(
    template: Path,
    *,
    project: str,
    location: str | None,
    parameter_values: Mapping[str, Any] | None,
    complete: bool,
    check_images: bool,
    image_records: Mapping[str, Any] | None,
    warn: Warn | None,
    **arguments: Any,
) -> Any:
    """The checked submission of ``template``; each warning given to ``warn``.

    Raises:
        SubmissionError: an argument, a parameter or a task the run would refuse (every task
            one line).
        kfp_spot.image.UnpublishedImageError: an image Vertex AI could not pull.
    """
    from kfp_spot.jobs.template import TemplateTaskError, check_template_launches
    from kfp_spot.vertex import pipeline_context, pipeline_job

    if not project:
        raise SubmissionError("project: give the Google Cloud project ID to run the pipeline in")
    if location is not None and not isinstance(location, str):
        raise SubmissionError(f"location: expected a Vertex AI region's name, got {show(location)}")
    if warn is not None and not callable(warn):  # it failed only once a warning came
        raise SubmissionError(
            f"warn: expected a function taking one line of text, or None, got {show(warn)}"
        )
    if not isinstance(check_images, bool):  # truthy text checked the images, falsy text not
        raise SubmissionError(f"check_images: expected True or False, got {show(check_images)}")
    if location is not None and not location.strip():  # `--location "$REGION"`, REGION unset
        raise SubmissionError(
            "location: is empty: give a Vertex AI region such as us-central1, or leave it out "
            "for the template's own region"
        )
    pipeline_job.check_job_settings(  # before the values are read: each a one-line refusal
        parameter_values=parameter_values,
        **{k: arguments.get(k) for k in ("display_name", "enable_caching", "labels")},
    )
    values = dict(parameter_values or {})
    spec = pipeline_job.read_template(template)
    if not location:  # the template's own region (its default, or the values'), else ours
        declared = pipeline_job.template_parameters(spec)
        location = pipeline_context.template_location(declared, values) or DEFAULT_LOCATION
    submission = pipeline_job.prepare_submission(
        template,
        project=project,
        location=location,
        parameter_values=values,
        complete=complete,
        **arguments,
    )
    pipeline_job.check_submission_images(submission, check_images, image_records)
    try:
        tasks = check_template_launches(
            spec,
            project=project,
            location=location,
            arguments=submission.parameter_values,
            enable_caching=arguments.get("enable_caching"),
        )
    except TemplateTaskError as exc:
        raise SubmissionError(str(exc)) from exc
    for warning in [*submission.warnings, *tasks, *_default_gate_warning(spec, values)]:
        if warn is not None:
            warn(warning)
    return submission


def dry_run(
    pipeline: Any,
    *,
    project: str,
    location: str | None = None,
    parameter_values: Mapping[str, Any] | None = None,
    pipeline_root: str | None = None,
    display_name: str | None = None,
    service_account: str | None = None,
    enable_caching: bool | None = None,
    labels: Mapping[str, str] | None = None,
    api_endpoint: str | None = None,
    check_images: bool = True,
    image_records: Mapping[str, Any] | None = None,
    warn: Warn | None = print_warning,
) -> dict[str, Any]:
    """Check ``pipeline`` as :func:`submit` does and return the request it would send.

    Nothing is sent and no credentials are looked up. A required parameter left unset is a
    warning here (a real submission refuses it). See :func:`submit` for the arguments.

    Returns:
        ``{"method", "url", "body"}``: the PipelineJob create request (the pipeline spec shown
        by its name, SDK version and each task's caching, and ``inline``: the template's path,
        or for a ``@dsl.pipeline`` function the pipeline it was compiled from).

    Raises:
        SubmissionError: as :func:`submit`.
        kfp_spot.image.UnpublishedImageError: as :func:`submit`.
    """
    from kfp_spot.vertex import pipeline_job

    with _template(pipeline) as template:
        submission = _checked(
            template,
            project=project,
            location=location,
            parameter_values=parameter_values,
            complete=False,
            check_images=check_images,
            image_records=image_records,
            warn=warn,
            pipeline_root=pipeline_root,
            display_name=display_name,
            service_account=service_account,
            enable_caching=enable_caching,
            labels=labels,
        )
        request = pipeline_job.dry_run(submission, api_endpoint=api_endpoint, check_images=False)
    if not isinstance(pipeline, (str, Path)):  # its compiled file is gone once this returns
        name = getattr(pipeline, "name", "") or "pipeline"
        request["body"]["pipelineSpec"]["inline"] = f"compiled from the @dsl.pipeline {name!r}"
    return request


def submit(
    pipeline: Any,
    *,
    project: str,
    location: str | None = None,
    parameter_values: Mapping[str, Any] | None = None,
    pipeline_root: str | None = None,
    display_name: str | None = None,
    service_account: str | None = None,
    enable_caching: bool | None = None,
    labels: Mapping[str, str] | None = None,
    api_endpoint: str | None = None,
    credentials: Any = None,
    check_images: bool = True,
    image_records: Mapping[str, Any] | None = None,
    warn: Warn | None = print_warning,
) -> str:
    """Submit ``pipeline`` to Vertex AI Pipelines, checked first as ``kfp-spot submit`` is.

    Args:
        pipeline: a compiled template's path, or a ``@dsl.pipeline`` function (compiled here).
        project: the Google Cloud project that runs the pipeline (also the ``project``
            parameter when the pipeline declares one and ``parameter_values`` does not set it).
        location: the Vertex AI region (likewise the ``location`` parameter). Default: the
            pipeline's ``location`` parameter's value or default, else us-central1.
        parameter_values: the pipeline's parameters, by their names, as Python values.
        pipeline_root: ``gs://`` root for the run's artifacts (default: the pipeline's own).
        display_name: the run's display name (default: the pipeline's name).
        service_account: the run-as service account (an email address).
        enable_caching: True/False for every task; None keeps each task's compiled setting.
        labels: the PipelineJob's labels.
        api_endpoint: another API endpoint (``http://127.0.0.1:PORT`` for a local recorder).
        credentials: google-auth credentials (default: application default credentials).
        check_images: refuse a pipeline whose kfp-spot tasks run in an image that was neither
            published with this release nor pushed by ``kfp-spot image push``.
        image_records: the records of pushed images (default: this machine's).
        warn: called with each warning's text (a task not checked before the run, a launch
            left cacheable, ...); default: printed on stderr. None: dropped.

    Returns:
        The PipelineJob's resource name.

    Raises:
        SubmissionError: an argument or parameter is invalid, or a task of the pipeline would
            be refused at run time: every such task, one line each, naming the task and its
            input (and the pipeline parameter that set it). Nothing is sent.
        kfp_spot.image.UnpublishedImageError: the pipeline names an image Vertex AI could not
            pull, with the one-line fix. Nothing is sent.
        kfp_spot.vertex.pipeline_job.NoCredentialsError: no Google Cloud login was found.
        kfp_spot.vertex.pipeline_job.SubmitFailedError: the API could not be reached or
            refused the job.
    """
    from kfp_spot.vertex import pipeline_job

    arguments: dict[str, Any] = {
        "pipeline_root": pipeline_root,
        "display_name": display_name,
        "service_account": service_account,
        "enable_caching": enable_caching,
        "labels": labels,
    }
    with _template(pipeline) as template:
        submission = _checked(
            template,
            project=project,
            location=location,
            parameter_values=parameter_values,
            complete=True,
            check_images=check_images,
            image_records=image_records,
            warn=warn,
            **arguments,
        )
        # The submission checked above, sent as it is: not read, checked or warned of again.
        return pipeline_job.send_submission(
            submission, api_endpoint=api_endpoint, credentials=credentials
        )
