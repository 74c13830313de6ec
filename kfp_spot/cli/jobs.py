"""``kfp-spot jobs list|describe``: CustomJobs on Vertex AI or the local emulator.

Both send Vertex AI's REST API (``kfp_spot.cli.rest``): the regional Vertex endpoint by default,
the emulator with ``--api-endpoint http://127.0.0.1:PORT``.
"""

from __future__ import annotations

import json

import click

from kfp_spot.cli.rest import (
    api_for,
    dig,
    one_line,
    parent_of,
    resource_location,
    text_option,
)

ENDPOINT_HELP = "http://127.0.0.1:PORT for the local emulator (default: Vertex AI in {where})."
"""The --api-endpoint help; ``{where}`` says which location the command's default region is."""


@click.group()
def jobs() -> None:
    """List and describe CustomJobs (Vertex AI or the local emulator)."""


@jobs.command(name="list")
@click.option("--project", required=True, help="Google Cloud project ID or number.")
@click.option("--location", default="us-central1", show_default=True)
@click.option("--api-endpoint", default="", help=ENDPOINT_HELP.format(where="--location"))
@click.option(
    "--filter", "filter_", default="", callback=text_option, help='e.g. state="JOB_STATE_RUNNING"'
)
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
def list_(project: str, location: str, api_endpoint: str, filter_: str, limit: int) -> None:
    """One line per CustomJob: name, state, strategy, display name."""
    parent = parent_of(project, location)
    api = api_for(location, api_endpoint)
    for count, job in enumerate(api.pages(f"{parent}/customJobs", "customJobs", filter_), 1):
        state = dig(job, "state", default="JOB_STATE_UNSPECIFIED")
        strategy = dig(job, "jobSpec", "scheduling", "strategy", default="STRATEGY_UNSPECIFIED")
        click.echo(
            f"{job.get('name', '')}\t{state}\t{strategy}\t{one_line(job.get('displayName', ''))}"
        )
        if count >= limit:
            break


@jobs.command()
@click.argument("name")
@click.option("--location", default=None, help="Default: the location in NAME.")
@click.option(
    "--api-endpoint", default="", help=ENDPOINT_HELP.format(where="--location, else NAME's")
)
def describe(name: str, location: str | None, api_endpoint: str) -> None:
    """Print one CustomJob (``projects/P/locations/L/customJobs/ID``) as the API's JSON."""
    in_name = resource_location(name, "customJobs")
    api = api_for(
        in_name if location is None else location,
        api_endpoint,
        location_from="NAME" if location is None else "--location",
    )
    if location is not None and location != in_name:
        raise click.BadParameter(
            f"{location!r}, but the job {name!r} is in {in_name!r}: Vertex AI answers for a "
            "job only at its own region's endpoint; leave --location out, or give "
            f"--location {in_name}",
            param_hint="--location",
        )
    job = api.get(name)
    click.echo(json.dumps(job, indent=2))


COMMANDS = [jobs]
