"""Send a checked submission to Vertex AI Pipelines: the endpoint, the credentials, the answer.

:mod:`kfp_spot.vertex.pipeline_job` checks a submission offline and hands over a
:class:`PipelineSubmission`; :func:`send_submission` creates its PipelineJob as it was checked,
without reading or checking the template again. The credentials are looked up and refreshed here
(:mod:`kfp_spot.vertex.signin`), so a missing Google login is one :class:`NoCredentialsError`
line with the command that fixes it, and an endpoint that cannot be reached or refuses the job is
one :class:`SubmitFailedError` line naming it and the API's answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfp_spot.vertex import values
from kfp_spot.vertex.pipeline_parameters import SubmissionError


class SubmitFailedError(RuntimeError):
    """The API did not take the PipelineJob: unreachable, or it answered with an error.

    The message names the endpoint and the API's answer (its status and reason).
    """


@dataclass(frozen=True)
class PipelineSubmission:
    """A checked submission: what a dry run shows and :func:`send_submission` sends.

    Made by :func:`kfp_spot.vertex.pipeline_job.prepare_submission`, which checked every field.
    """

    template_path: Path
    project: str
    location: str
    parameter_values: dict[str, Any]
    pipeline_root: str | None
    display_name: str
    service_account: str | None = None
    enable_caching: bool | None = None
    labels: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def endpoint(location: str, api_endpoint: str | None) -> Any:
    """The checked :class:`~kfp_spot.vertex.client.Endpoint`; a malformed one names the field.

    Raises:
        SubmissionError: naming ``api_endpoint`` and what would be valid.
    """
    from kfp_spot.vertex.client import resolve_endpoint

    try:
        return resolve_endpoint(location, api_endpoint or "")
    except values.InvalidFieldError as exc:
        raise SubmissionError(str(exc)) from None


def sdk_pipeline_job(submission: PipelineSubmission, credentials: Any) -> Any:
    """The SDK's PipelineJob for ``submission`` (its constructor loads and checks the spec)."""
    from google.cloud import aiplatform

    return aiplatform.PipelineJob(
        display_name=submission.display_name,
        template_path=str(submission.template_path),
        pipeline_root=submission.pipeline_root,
        parameter_values=submission.parameter_values,
        enable_caching=submission.enable_caching,
        labels=submission.labels or None,
        project=submission.project,
        location=submission.location,
        credentials=credentials,
    )


def send_submission(
    submission: PipelineSubmission, *, api_endpoint: str | None = None, credentials: Any = None
) -> str:
    """Create the PipelineJob of a checked ``submission`` and return its resource name.

    Args:
        submission: what :func:`~kfp_spot.vertex.pipeline_job.prepare_submission` checked (with
            ``complete=True``: a required parameter left unset is refused there).
        api_endpoint: another API endpoint (``http://127.0.0.1:PORT`` for a local recorder).
        credentials: google-auth credentials (default: application default credentials;
            anonymous for a plain-HTTP ``api_endpoint`` on this machine).

    Raises:
        SubmissionError: a malformed ``api_endpoint``. Nothing is sent.
        NoCredentialsError: no Google Cloud login was found (says how to log in).
        SubmitFailedError: the API could not be reached or refused the job (names the
            endpoint and the API's answer, in one line).
    """
    location = submission.location
    resolved = endpoint(location, api_endpoint)
    import requests
    from google.api_core import exceptions as api_exceptions
    from google.auth import exceptions as auth_exceptions
    from google.cloud import aiplatform

    from kfp_spot.vertex import signin

    init_kwargs: dict[str, Any] = {"project": submission.project, "location": location}
    if api_endpoint:
        init_kwargs |= {"api_endpoint": resolved.api_endpoint, "api_transport": "rest"}
        if credentials is None and resolved.local:
            # Plain HTTP is a local endpoint (a recorder or proxy on loopback): no Google login.
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
    where = resolved.base_url if api_endpoint else f"Vertex AI in {location}"
    try:
        # Looked up and refreshed here, not left to the SDK: its global config may still hold
        # another run's credentials, and a missing login or network is one line at once.
        init_kwargs["credentials"] = signin.ready(credentials)
        aiplatform.init(**init_kwargs)
        job = sdk_pipeline_job(submission, init_kwargs["credentials"])
        job.submit(service_account=submission.service_account)
    except signin.SignInUnreachableError as exc:
        raise SubmitFailedError(str(exc)) from None
    except auth_exceptions.GoogleAuthError as exc:  # a token that stopped refreshing mid-way
        raise signin.failed(exc) from None
    except requests.RequestException as exc:  # the REST transport's: nothing answered
        raise SubmitFailedError(
            f"cannot reach {where} to create the PipelineJob ({type(exc).__name__}): is it "
            "running, and is the network up? Nothing was created"
        ) from exc
    except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
        reason = " ".join(str(exc).split())[:800]
        if isinstance(exc, api_exceptions.ServiceUnavailable):  # no route, no DNS, or down
            raise SubmitFailedError(f"cannot reach {where}: {reason}") from exc
        raise SubmitFailedError(f"{where} refused the PipelineJob: {reason}") from exc
    return str(job.resource_name)
