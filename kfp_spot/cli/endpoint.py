"""``kfp-spot endpoint list|describe|predict``: endpoints on Vertex AI or the local emulator.

Same conventions as ``kfp-spot jobs``: Vertex AI's REST API (``kfp_spot.cli.rest``) on the
regional Vertex endpoint by default, the emulator with ``--api-endpoint http://127.0.0.1:PORT``;
one-line errors, exit 2 for usage errors.
"""

from __future__ import annotations

import json
import sys
from typing import NoReturn

import click

from kfp_spot.cli.jobs import ENDPOINT_HELP
from kfp_spot.cli.rest import (
    RestApi,
    api_for,
    dig,
    one_line,
    parent_of,
    resource_location,
    text_option,
)

PREDICT_NESTING = 100
"""How deeply ``--instances`` may nest: far past any instance (an image's is 3 levels), short of
the recursion of Python's JSON parser, whose RecursionError would end the command."""


def _api(location: str, api_endpoint: str) -> RestApi:
    return api_for(location, api_endpoint)


def _api_of(name: str, api_endpoint: str) -> RestApi:
    """The API that holds the endpoint ``name`` (its location's, or ``api_endpoint``)."""
    return api_for(resource_location(name, "endpoints"), api_endpoint, location_from="NAME")


def _too_large(what: str) -> NoReturn:
    """Refuse instances the service would refuse (the request is past its payload limit)."""
    from kfp_spot.vertex.model_endpoint import PREDICT_REQUEST_BYTES

    raise click.BadParameter(
        f"{what}: a prediction request holds at most {PREDICT_REQUEST_BYTES} bytes (1.5 MB); "
        "send the instances in smaller batches",
        param_hint="--instances",
    )


@click.group()
def endpoint() -> None:
    """List, describe and query endpoints (Vertex AI or the local emulator)."""


@endpoint.command(name="list")
@click.option("--project", required=True, help="Google Cloud project ID or number.")
@click.option("--location", default="us-central1", show_default=True)
@click.option("--api-endpoint", default="", help=ENDPOINT_HELP.format(where="--location"))
@click.option("--filter", "filter_", default="", callback=text_option, help='e.g. labels.team="ml"')
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
def list_(project: str, location: str, api_endpoint: str, filter_: str, limit: int) -> None:
    """One line per endpoint: name, deployed models (Spot or standard, replicas), display name."""
    parent = parent_of(project, location)
    api = _api(location, api_endpoint)
    for count, item in enumerate(api.pages(f"{parent}/endpoints", "endpoints", filter_), 1):
        split = dig(item, "trafficSplit", default={})
        models = ", ".join(
            f"{d.get('id', '')} "
            f"({'SPOT' if dig(d, 'dedicatedResources', 'spot', default=False) else 'STANDARD'} "
            f"{dig(d, 'dedicatedResources', 'minReplicaCount', default=0)}x"
            f"{dig(d, 'dedicatedResources', 'machineSpec', 'machineType', default='')}"
            f", {split.get(d.get('id'), 0)}%)"
            for d in dig(item, "deployedModels", default=[])
        )
        click.echo(
            f"{item.get('name', '')}\t{models or '-'}\t{one_line(item.get('displayName', ''))}"
        )
        if count >= limit:
            break


@endpoint.command()
@click.argument("name")
@click.option("--api-endpoint", default="", help=ENDPOINT_HELP.format(where="NAME's location"))
def describe(name: str, api_endpoint: str) -> None:
    """Print one endpoint (NAME: projects/P/locations/L/endpoints/ID) as the API's JSON."""
    found = _api_of(name, api_endpoint).get(name)
    click.echo(json.dumps(found, indent=2))


@endpoint.command()
@click.argument("name")
@click.option(
    "--instances",
    "instances_text",
    default="-",
    show_default=True,
    help='A JSON list of instances, {"instances": [...]}, or - to read either from stdin.',
)
@click.option("--api-endpoint", default="", help=ENDPOINT_HELP.format(where="NAME's location"))
def predict(name: str, instances_text: str, api_endpoint: str) -> None:
    """Send instances to an endpoint; print its predictions (and the deployed model) as JSON."""
    if instances_text == "-" and sys.stdin.isatty():  # else a silent wait for the user
        click.echo(
            'kfp-spot: reading instances from stdin: a JSON list or {"instances": [...]}, then '
            "Ctrl-D (or pass --instances)",
            err=True,
        )
    from kfp_spot.vertex.model_endpoint import PREDICT_REQUEST_BYTES

    # Read a bounded amount (room for a pretty-printed request's whitespace): /dev/zero or a
    # runaway producer piped in was read until memory ran out.
    limit = 4 * PREDICT_REQUEST_BYTES
    text = sys.stdin.read(limit + 1) if instances_text == "-" else instances_text
    if instances_text == "-" and not text.strip():
        raise click.UsageError(
            'no instances were given on stdin (pipe a JSON list or {"instances": [...]}, '
            "or pass --instances)"
        )
    if len(text) > limit:
        _too_large(f"more than {limit} characters")
    from kfp_spot.vertex.values import check_nesting, loads_unique_keys

    try:
        check_nesting(text, PREDICT_NESTING)  # [[[[...: json's RecursionError otherwise
        body = loads_unique_keys(text)  # {"instances": [...], "instances": [...]} is refused
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--instances") from exc
    except ValueError as exc:  # too deep, or a key given twice
        raise click.BadParameter(str(exc), param_hint="--instances") from None
    parameters = None
    if isinstance(body, dict):
        unknown = sorted(set(body) - {"instances", "parameters"})
        if unknown:  # a misspelt "parameters" was dropped without a word
            raise click.BadParameter(
                f"unknown key {', '.join(map(repr, unknown))} in the request; expected "
                '{"instances": [...]}, with "parameters" if the model takes any',
                param_hint="--instances",
            )
        parameters = body.get("parameters")
        body = body.get("instances")
    if not isinstance(body, list) or not body:
        raise click.BadParameter(
            'expected a non-empty JSON list of instances or {"instances": [...]}',
            param_hint="--instances",
        )
    request: dict[str, object] = {"instances": body}
    if parameters is not None:
        request["parameters"] = parameters
    if (size := len(json.dumps(request).encode())) > PREDICT_REQUEST_BYTES:  # as rest.py sends it
        _too_large(f"{size} bytes as a request")
    answer = _api_of(name, api_endpoint).post(f"{name}:predict", request)
    click.echo(
        json.dumps(
            {
                "predictions": answer.get("predictions", []),
                "deployedModelId": answer.get("deployedModelId", ""),
                "model": answer.get("model", ""),
            },
            indent=2,
        )
    )


COMMANDS = [endpoint]
