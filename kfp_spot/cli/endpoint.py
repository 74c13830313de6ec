"""``kfp-spot endpoint list|describe|predict``: endpoints on Vertex AI or the local emulator.

Same conventions as ``kfp-spot jobs``: the GAPIC clients (``EndpointServiceClient``,
``PredictionServiceClient``) on the regional Vertex endpoint by default, the emulator with
``--api-endpoint http://127.0.0.1:PORT``; one-line errors, exit 2 for usage errors.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from kfp_spot.cli.jobs import _ENDPOINT_HELP, _call

_NAME_HELP = "projects/PROJECT/locations/LOCATION/endpoints/ID"


def _client(kind: str, location: str, api_endpoint: str) -> Any:
    from google.auth import exceptions as auth_exceptions
    from google.cloud.aiplatform_v1 import EndpointServiceClient, PredictionServiceClient

    from kfp_spot.vertex.client import make_client, resolve_endpoint
    from kfp_spot.vertex.values import InvalidFieldError

    cls = EndpointServiceClient if kind == "endpoints" else PredictionServiceClient
    try:
        return make_client(cls, resolve_endpoint(location, api_endpoint))
    except InvalidFieldError as exc:
        raise click.BadParameter(str(exc), param_hint="--api-endpoint") from exc
    except auth_exceptions.GoogleAuthError as exc:
        raise click.ClickException(
            f"no Google credentials for Vertex AI ({exc}); run `gcloud auth "
            "application-default login`, or pass --api-endpoint for the emulator"
        ) from exc


def _location_of(name: str) -> str:
    parts = name.split("/")
    if (
        len(parts) != 6
        or parts[0] != "projects"
        or parts[2] != "locations"
        or parts[4] != ("endpoints")
    ):
        raise click.BadParameter(f"{name!r} is not {_NAME_HELP}", param_hint="NAME")
    return parts[3]


@click.group()
def endpoint() -> None:
    """List, describe and query endpoints (Vertex AI or the local emulator)."""


@endpoint.command(name="list")
@click.option("--project", required=True, help="Google Cloud project (any name locally).")
@click.option("--location", default="us-central1", show_default=True)
@click.option("--api-endpoint", default="", help=_ENDPOINT_HELP.format(where="--location"))
@click.option("--filter", "filter_", default="", help='e.g. labels.team="ml"')
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
def list_(project: str, location: str, api_endpoint: str, filter_: str, limit: int) -> None:
    """One line per endpoint: name, deployed models (Spot or standard, replicas), display name."""
    client = _client("endpoints", location, api_endpoint)
    pager = _call(
        client.list_endpoints,
        request={"parent": f"projects/{project}/locations/{location}", "filter": filter_},
    )
    for count, item in enumerate(pager, start=1):
        models = ", ".join(
            f"{d.id} ({'SPOT' if d.dedicated_resources.spot else 'STANDARD'} "
            f"{d.dedicated_resources.min_replica_count}x{d.dedicated_resources.machine_spec.machine_type}"
            f", {item.traffic_split.get(d.id, 0)}%)"
            for d in item.deployed_models
        )
        click.echo(f"{item.name}\t{models or '-'}\t{item.display_name}")
        if count >= limit:
            break


@endpoint.command()
@click.argument("name")
@click.option("--api-endpoint", default="", help=_ENDPOINT_HELP.format(where="NAME's location"))
def describe(name: str, api_endpoint: str) -> None:
    """Print one endpoint (NAME: projects/P/locations/L/endpoints/ID) as JSON."""
    from google.cloud.aiplatform_v1 import Endpoint

    client = _client("endpoints", _location_of(name), api_endpoint)
    found = _call(client.get_endpoint, name=name)
    click.echo(
        json.dumps(json.loads(Endpoint.to_json(found, use_integers_for_enums=False)), indent=2)
    )


@endpoint.command()
@click.argument("name")
@click.option(
    "--instances",
    "instances_text",
    default="-",
    show_default=True,
    help='A JSON list of instances, {"instances": [...]}, or - to read either from stdin.',
)
@click.option("--api-endpoint", default="", help=_ENDPOINT_HELP.format(where="NAME's location"))
def predict(name: str, instances_text: str, api_endpoint: str) -> None:
    """Send instances to an endpoint; print its predictions (and the deployed model) as JSON."""
    text = sys.stdin.read() if instances_text == "-" else instances_text
    if instances_text == "-" and not text.strip():
        raise click.UsageError(
            'no instances were given on stdin (pipe a JSON list or {"instances": [...]}, '
            "or pass --instances)"
        )
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--instances") from exc
    parameters = None
    if isinstance(body, dict):
        parameters = body.get("parameters")
        body = body.get("instances")
    if not isinstance(body, list) or not body:
        raise click.BadParameter(
            'expected a non-empty JSON list of instances or {"instances": [...]}',
            param_hint="--instances",
        )
    client = _client("predictions", _location_of(name), api_endpoint)
    kwargs = {"endpoint": name, "instances": body}
    if parameters is not None:
        kwargs["parameters"] = parameters
    answer = _call(client.predict, **kwargs)
    click.echo(
        json.dumps(
            {
                "predictions": list(answer.predictions),
                "deployedModelId": answer.deployed_model_id,
                "model": answer.model,
            },
            indent=2,
            default=lambda value: dict(value) if hasattr(value, "items") else list(value),
        )
    )


COMMANDS = [endpoint]
