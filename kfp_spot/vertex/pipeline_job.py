"""Submit a compiled pipeline spec to Vertex AI Pipelines (the real, distributed engine).

Everything that can be checked offline is checked before a request is built: the template (a
compiled pipeline or component spec), every parameter name and value type against the template's
inputs, the project, region, pipeline root (``gs://``), service account and labels, and the
images the template's kfp-spot tasks run in (:func:`kfp_spot.image.check_template_images`).
``project`` and ``location`` are filled in as pipeline parameters only where the template declares
them. :func:`dry_run` builds the request the SDK would send, without credentials;
:func:`submit_pipeline` checks and sends it; the sending half, for a submission checked already,
is :func:`~kfp_spot.vertex.pipeline_send.send_submission` (re-exported here with
:class:`PipelineSubmission`, :class:`SubmitFailedError` and :class:`NoCredentialsError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from kfp_spot.vertex import pipeline_parameters, regions, storage, template_refs, values
from kfp_spot.vertex.pipeline_parameters import SubmissionError as SubmissionError
from kfp_spot.vertex.pipeline_parameters import check_job_id
from kfp_spot.vertex.pipeline_parameters import check_job_settings as check_job_settings
from kfp_spot.vertex.pipeline_parameters import check_parameters as check_parameters
from kfp_spot.vertex.pipeline_parameters import template_parameters as template_parameters
from kfp_spot.vertex.pipeline_send import PipelineSubmission as PipelineSubmission
from kfp_spot.vertex.pipeline_send import SubmitFailedError as SubmitFailedError
from kfp_spot.vertex.pipeline_send import endpoint, sdk_pipeline_job
from kfp_spot.vertex.pipeline_send import send_submission as send_submission
from kfp_spot.vertex.signin import NoCredentialsError as NoCredentialsError


def read_template(template_path: str | Path) -> dict[str, Any]:
    """The compiled spec (its first YAML document).

    Raises:
        SubmissionError: the file is missing or is not a compiled pipeline or component spec.
    """
    documents, _ = read_template_documents(template_path)
    return cast("dict[str, Any]", documents[0])


def missing_file_reason(path: str | Path) -> str:
    """Why ``path``, which is no regular file, cannot be read as a template (for a message)."""
    if Path(path).is_dir():
        return "is a directory"
    if Path(path).exists():  # a FIFO or a device was said not to exist
        return "is not a regular file"
    return "does not exist"


def read_template_documents(template_path: str | Path) -> tuple[list[Any], str]:
    """Every YAML document of a template, the first a checked compiled spec, and its text.

    What a loader needs that builds KFP's component from one parse (a second document is the
    platform spec).

    Raises:
        SubmissionError: the file is missing or is not a compiled pipeline or component spec.
    """
    import yaml

    from kfp_spot import yamldocs

    if not Path(template_path).is_file():
        reason = missing_file_reason(template_path)
        hint = "compile it first" if reason == "does not exist" else "give the compiled YAML file"
        raise SubmissionError(f"template {template_path} {reason} ({hint})")
    try:
        text = Path(template_path).read_text(encoding="utf-8")
        documents = yamldocs.documents(text, name=str(template_path))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        reason = " ".join(str(exc).split())  # one line: YAML's errors span several
        raise SubmissionError(f"template {template_path}: not YAML ({reason})") from None
    if not text.strip():  # what a failed compile or an interrupted copy leaves behind
        raise SubmissionError(
            f"template {template_path}: the file is empty (`kfp-spot compile` writes templates)"
        )
    spec = documents[0] if documents else None
    if not isinstance(spec, dict) or not isinstance(spec.get("root"), dict):
        raise SubmissionError(
            f"template {template_path}: not a compiled pipeline or component spec "
            "(`kfp-spot compile` writes them)"
        )
    if broken := template_refs.dangling_references(spec):  # kfp.local would fail at that task
        raise SubmissionError(
            f"template {template_path}: not a compiled pipeline KFP can run ({'; '.join(broken)}); "
            "`kfp-spot compile` writes them"
        )
    return documents, text


def validate_submission(
    template_path: str | Path, project: str, location: str, pipeline_root: str | None
) -> dict[str, Any]:
    """Check the template, project, location and pipeline root; return the template's spec.

    Raises:
        SubmissionError: naming the bad argument.
    """
    documents, _ = read_template_documents(template_path)
    if len(documents) > 1:  # the SDK reads one document: its yaml.safe_load fails on a second
        raise SubmissionError(
            f"template {template_path}: holds {len(documents)} YAML documents (after the pipeline "
            "spec, a platform spec such as kfp-kubernetes adds); Vertex AI Pipelines takes the "
            "pipeline spec alone: compile the pipeline without platform-specific settings"
        )
    spec = cast("dict[str, Any]", documents[0])
    try:
        regions.check_parent(project, location)
        regions.check_sdk_region(location)
    except values.InvalidFieldError as exc:
        raise SubmissionError(str(exc)) from None
    # Without one the SDK sends the template's own (@dsl.pipeline(pipeline_root=...)).
    root = pipeline_root if pipeline_root is not None else spec.get("defaultPipelineRoot") or None
    if root is not None:
        own = "" if pipeline_root is not None else " (the template's own, defaultPipelineRoot)"
        fix = own and "; pass --pipeline-root gs://BUCKET/PATH"
        try:  # Vertex AI Pipelines writes the run's artifacts there, under a real bucket
            storage.check_gcs_uri(str(root))
        except values.InvalidValueError as exc:
            raise SubmissionError(f"pipeline_root{own}: {exc}{fix}") from None
    return spec


def prepare_submission(
    template_path: str | Path,
    *,
    project: str,
    location: str,
    parameter_values: Mapping[str, Any] | None = None,
    pipeline_root: str | None = None,
    display_name: str | None = None,
    service_account: str | None = None,
    enable_caching: bool | None = None,
    labels: Mapping[str, str] | None = None,
    complete: bool = False,
) -> PipelineSubmission:
    """Check every argument offline (see :func:`submit_pipeline` for each).

    ``project`` and ``location`` become the pipeline parameters of the same names when the
    template declares them and ``parameter_values`` does not set them. ``complete``: the run is
    to be sent, so a required parameter left unset is refused (a warning for a dry run).

    Raises:
        SubmissionError: naming the bad argument and what would be valid.
    """
    pipeline_parameters.check_job_settings(
        parameter_values=parameter_values,
        display_name=display_name,
        enable_caching=enable_caching,
        labels=labels,
    )
    spec = validate_submission(template_path, project, location, pipeline_root)
    template = str(template_path)
    check_job_id(template_refs.pipeline_name(spec) or "", template)
    if service_account:
        try:
            values.check_service_account(service_account)
        except values.InvalidValueError as exc:
            raise SubmissionError(f"service_account: {exc}") from None
    pipeline_parameters.check_job_labels(labels or {})
    given = dict(parameter_values or {})
    declared = template_parameters(spec)
    for name, value in (("project", project), ("location", location)):
        if name in declared:  # filled first: a required `project` that --project sets is set
            given.setdefault(name, value)
    warnings = check_parameters(spec, given, template, complete)
    if not (pipeline_root or spec.get("defaultPipelineRoot")):
        warnings.append(pipeline_parameters.check_default_root(project, location))
    return PipelineSubmission(
        template_path=Path(template_path),
        project=project,
        location=location,
        parameter_values=given,
        pipeline_root=pipeline_root,
        display_name=display_name or template_refs.pipeline_name(spec) or Path(template_path).stem,
        service_account=service_account or None,
        enable_caching=enable_caching,
        labels=dict(labels or {}),
        warnings=tuple(warnings),
    )


def check_submission_images(
    submission: PipelineSubmission,
    enabled: bool = True,
    image_records: Mapping[str, Any] | None = None,
) -> None:
    """Refuse a template naming an image Vertex AI could not pull (see :func:`submit_pipeline`).

    Raises:
        kfp_spot.image.UnpublishedImageError: naming the image, with the one-line fix.
    """
    if enabled:
        from kfp_spot.image import records

        records.check_template_images(submission.template_path, image_records)


def dry_run(
    submission: PipelineSubmission,
    *,
    api_endpoint: str | None = None,
    check_images: bool = True,
    image_records: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The create request :func:`submit_pipeline` would send for ``submission``; nothing is sent.

    No credentials are looked up. The pipeline spec (``pipelineSpec``, sent inline) is shown by
    its name, SDK version and each task's caching, not in full (it is the template file).

    Returns:
        ``{"method", "url", "body"}``, ``body`` the PipelineJob as JSON (camelCase).

    Raises:
        kfp_spot.image.UnpublishedImageError: as :func:`submit_pipeline`.
    """
    from google.auth.credentials import AnonymousCredentials
    from google.protobuf import json_format

    check_submission_images(submission, check_images, image_records)
    job = sdk_pipeline_job(submission, AnonymousCredentials())
    pb = job._gca_resource._pb  # the message the SDK's submit() sends
    if submission.service_account:
        pb.service_account = submission.service_account  # as submit() sets it
    body = json_format.MessageToDict(pb)
    spec = body.get("pipelineSpec") or {}
    body["pipelineSpec"] = {
        "inline": str(submission.template_path),
        "pipelineInfo": spec.get("pipelineInfo"),
        "sdkVersion": spec.get("sdkVersion"),
        "schemaVersion": spec.get("schemaVersion"),
        "taskCaching": _task_caching(spec),
    }
    base = endpoint(submission.location, api_endpoint).base_url
    parent = f"projects/{submission.project}/locations/{submission.location}"
    return {
        "method": "POST",
        "url": f"{base}/v1/{parent}/pipelineJobs?pipelineJobId={job.job_id}",
        "body": body,
    }


def _task_caching(spec: Mapping[str, Any]) -> dict[str, bool]:
    """Each task's ``cachingOptions.enableCache`` (root DAG and sub-DAGs)."""
    dags = [spec.get("root", {}).get("dag") or {}] + [
        c.get("dag") or {} for c in (spec.get("components") or {}).values()
    ]
    return {
        name: bool((task.get("cachingOptions") or {}).get("enableCache"))
        for dag in dags
        for name, task in (dag.get("tasks") or {}).items()
        if "cachingOptions" in task
    }


def submit_pipeline(
    template_path: str | Path,
    *,
    project: str,
    location: str,
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
) -> str:
    """Submit ``template_path`` as a Vertex AI PipelineJob and return its resource name.

    Args:
        template_path: a compiled pipeline YAML (``kfp-spot compile``).
        project: the Google Cloud project that runs the pipeline (also the ``project``
            parameter when the template declares one and ``parameter_values`` does not set it).
        location: the Vertex AI region (likewise the ``location`` parameter).
        parameter_values: the pipeline's parameters, checked against the template's.
        pipeline_root: ``gs://`` root for the run's artifacts (default: the template's).
        display_name: the run's display name (default: the pipeline's name).
        service_account: the run-as service account (an email address).
        enable_caching: True/False for every task; None keeps each task's compiled setting.
        labels: the PipelineJob's labels.
        api_endpoint: another API endpoint (``http://127.0.0.1:PORT`` for a local recorder).
        credentials: google-auth credentials (default: application default credentials;
            anonymous for a plain-HTTP ``api_endpoint``).
        check_images: refuse a template whose kfp-spot tasks run in an image that was neither
            published with this release nor pushed by ``kfp-spot image push`` (Vertex AI could not
            pull it and every task would fail); False when you pushed it with other tools.
        image_records: the records of pushed images (default: this machine's,
            :func:`kfp_spot.image.load_records`).

    Returns:
        The PipelineJob resource name.

    Raises:
        SubmissionError: an argument is invalid (names it).
        kfp_spot.image.UnpublishedImageError: the template names an image Vertex AI could not
            pull, with the one-line fix. Nothing is sent.
        NoCredentialsError: no Google Cloud login was found (says how to log in).
        SubmitFailedError: the API could not be reached or refused the job (names the
            endpoint and the API's answer, in one line).
    """
    submission = prepare_submission(
        template_path,
        project=project,
        location=location,
        parameter_values=parameter_values,
        pipeline_root=pipeline_root,
        display_name=display_name,
        service_account=service_account,
        enable_caching=enable_caching,
        labels=labels,
        complete=True,
    )
    endpoint(location, api_endpoint)  # a malformed endpoint is named before images are read
    check_submission_images(submission, check_images, image_records)
    return send_submission(submission, api_endpoint=api_endpoint, credentials=credentials)
