"""``kfp-spot jobs list|describe``: CustomJobs on Vertex AI or the local emulator.

Both talk through the launcher's client (``google.cloud.aiplatform_v1.JobServiceClient``): the
regional Vertex endpoint by default, the emulator with ``--api-endpoint http://127.0.0.1:PORT``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import click

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import JobServiceClient

_P = ParamSpec("_P")
_T = TypeVar("_T")

_ENDPOINT_HELP = "http://127.0.0.1:PORT for the local emulator (default: Vertex AI in {where})."
"""The --api-endpoint help; ``{where}`` says which location the command's default region is."""

# api_core's message for an HTTP error: "GET https://host/v1/<resource>?<query>: <the error>".
_REQUEST_MESSAGE = re.compile(
    r"(?:GET|POST|PUT|PATCH|DELETE) (?P<url>[^\s?]+)\S*: (?P<error>.*)", re.S
)


def _api_error(message: str) -> str:
    """An API error naming the resource (or endpoint) asked for, not the request URL."""
    match = _REQUEST_MESSAGE.fullmatch(message)
    if match is None:
        return message
    url = match["url"]
    resource = url.split("/v1/", 1)[1] if "/v1/" in url else url
    error = match["error"]
    # "endpoints/42:predict": the error that already names endpoints/42 says enough.
    return error if resource.split(":", 1)[0] in error else f"{resource}: {error}"


def _client(location: str, api_endpoint: str) -> JobServiceClient:
    from google.auth import exceptions as auth_exceptions

    from kfp_spot.vertex.client import make_job_client, resolve_endpoint
    from kfp_spot.vertex.values import InvalidFieldError

    try:
        return make_job_client(resolve_endpoint(location, api_endpoint))
    except InvalidFieldError as exc:
        hint = f"--{exc.field.replace('_', '-')}"  # --location or --api-endpoint
        raise click.BadParameter(str(exc), param_hint=hint) from exc
    except auth_exceptions.GoogleAuthError as exc:
        raise click.ClickException(
            f"no Google credentials for Vertex AI ({exc}); run `gcloud auth "
            "application-default login`, or pass --api-endpoint for the emulator"
        ) from exc


def _status_name(code: int | None) -> str:
    """``NOT_FOUND`` for 404; the number for a status HTTP does not name (api_core keeps an int)."""
    if code is None:
        return "ERROR"
    try:
        return HTTPStatus(code).name
    except ValueError:
        return str(code)


def _call(fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    import requests
    from google.api_core import exceptions

    try:
        return fn(*args, **kwargs)
    except exceptions.GoogleAPICallError as exc:
        raise click.ClickException(f"{_status_name(exc.code)}: {_api_error(exc.message)}") from exc
    except requests.exceptions.ConnectionError as exc:
        url = exc.request.url if exc.request is not None else None
        raise click.ClickException(
            f"cannot reach the API endpoint ({url.split('/v1/')[0]}): is it running?"
            if url
            else f"cannot reach the API endpoint: {exc}"
        ) from exc


@click.group()
def jobs() -> None:
    """List and describe CustomJobs (Vertex AI or the local emulator)."""


@jobs.command(name="list")
@click.option("--project", required=True, help="Google Cloud project (any name locally).")
@click.option("--location", default="us-central1", show_default=True)
@click.option("--api-endpoint", default="", help=_ENDPOINT_HELP.format(where="--location"))
@click.option("--filter", "filter_", default="", help='e.g. state="JOB_STATE_RUNNING"')
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
def list_(project: str, location: str, api_endpoint: str, filter_: str, limit: int) -> None:
    """One line per CustomJob: name, state, strategy, display name."""
    client = _client(location, api_endpoint)
    pager = _call(
        client.list_custom_jobs,
        request={"parent": f"projects/{project}/locations/{location}", "filter": filter_},
    )
    for count, job in enumerate(pager, start=1):
        strategy = job.job_spec.scheduling.strategy.name
        click.echo(f"{job.name}\t{job.state.name}\t{strategy}\t{job.display_name}")
        if count >= limit:
            break


@jobs.command()
@click.argument("name")
@click.option("--location", default=None, help="Default: the location in NAME.")
@click.option(
    "--api-endpoint", default="", help=_ENDPOINT_HELP.format(where="--location, else NAME's")
)
def describe(name: str, location: str | None, api_endpoint: str) -> None:
    """Print one CustomJob (``projects/P/locations/L/customJobs/ID``) as JSON."""
    from google.cloud.aiplatform_v1 import CustomJob

    parts = name.split("/")
    if len(parts) != 6 or parts[0] != "projects" or parts[4] != "customJobs":
        raise click.BadParameter(
            f"{name!r} is not projects/PROJECT/locations/LOCATION/customJobs/ID",
            param_hint="NAME",
        )
    client = _client(location or parts[3], api_endpoint)
    job = _call(client.get_custom_job, name=name)
    click.echo(
        json.dumps(json.loads(CustomJob.to_json(job, use_integers_for_enums=False)), indent=2)
    )


COMMANDS = [jobs]
