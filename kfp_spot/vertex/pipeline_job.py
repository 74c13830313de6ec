"""Submit a compiled pipeline spec to Vertex AI Pipelines (the real, distributed engine)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kfp_spot.vertex import regions, values


class SubmissionError(ValueError):
    """A submission argument is invalid; the message names it and what would be valid."""


def validate_submission(
    template_path: str | Path, project: str, location: str, pipeline_root: str | None
) -> None:
    """Check the arguments of :func:`submit_pipeline` before anything is sent.

    Raises:
        SubmissionError: naming the bad argument.
    """
    if not Path(template_path).is_file():
        raise SubmissionError(f"template {template_path}: no such file (compile it first)")
    for name, check, value in (
        ("project", values.check_project_id, project),
        ("location", regions.check_region, location),
    ):
        try:
            check(value)
        except values.InvalidValueError as exc:
            raise SubmissionError(f"{name}: {exc}") from None
    if pipeline_root and not pipeline_root.startswith("gs://"):
        raise SubmissionError(
            f"pipeline_root {pipeline_root!r} must be a gs:// URI on Vertex AI Pipelines"
        )


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
    api_endpoint: str | None = None,
    credentials: Any = None,
    check_images: bool = True,
    image_records: Mapping[str, Any] | None = None,
) -> str:
    """Submit ``template_path`` as a Vertex AI PipelineJob and return its resource name.

    Args:
        template_path: a compiled pipeline YAML (``kfp-spot compile``).
        project: the Google Cloud project that runs the pipeline.
        location: the Vertex AI region.
        parameter_values: the pipeline's parameters.
        pipeline_root: ``gs://`` root for the run's artifacts (default: the template's).
        display_name: the run's display name (default: the pipeline's name).
        service_account: the run-as service account.
        enable_caching: override the template's caching.
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
    """
    validate_submission(template_path, project, location, pipeline_root)
    if check_images:
        from kfp_spot.image import records

        records.check_template_images(template_path, image_records)
    from google.cloud import aiplatform

    init_kwargs: dict[str, Any] = {"project": project, "location": location}
    if api_endpoint:
        init_kwargs |= {"api_endpoint": api_endpoint, "api_transport": "rest"}
        if credentials is None and api_endpoint.startswith("http://"):
            # Plain HTTP is a local endpoint (a recorder or proxy on loopback): no Google login.
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
    if credentials is not None:
        init_kwargs["credentials"] = credentials
    aiplatform.init(**init_kwargs)
    job = aiplatform.PipelineJob(
        display_name=display_name or Path(template_path).stem,
        template_path=str(template_path),
        pipeline_root=pipeline_root,
        parameter_values=dict(parameter_values or {}),
        enable_caching=enable_caching,
        project=project,
        location=location,
        credentials=credentials,
    )
    job.submit(service_account=service_account)
    return job.resource_name
