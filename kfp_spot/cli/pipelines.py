"""``kfp-spot run`` and ``kfp-spot compile``."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the run keeps its outputs (default: ./kfp-spot-runs/<timestamp>).",
)
@click.option(
    "--source",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Training package source (default: the bundled example trainer).",
)
@click.option(
    "--preemptions",
    type=click.IntRange(0, 6),
    default=1,
    show_default=True,
    help="How many times the emulator takes the Spot VM back (each after a new checkpoint).",
)
@click.option(
    "--grace-period",
    type=click.FloatRange(0.5, 120),
    default=10.0,
    show_default=True,
    help="Seconds between SIGTERM and SIGKILL at a preemption.",
)
@click.option(
    "--vertex", is_flag=True, help="Submit to Vertex AI Pipelines instead of running locally."
)
@click.option("--project", help="With --vertex: the Google Cloud project.")
@click.option("--location", default="us-central1", show_default=True, help="With --vertex: region.")
@click.option("--pipeline-root", help="With --vertex: gs:// root for the run's artifacts.")
@click.option("--service-account", help="With --vertex: the run-as service account.")
@click.option(
    "--template",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="With --vertex: compiled pipeline YAML (default: the committed spot_training).",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="With --vertex: a pipeline parameter (VALUE parsed as JSON when it is JSON).",
)
def run(
    run_dir: Path | None,
    source: Path | None,
    preemptions: int,
    grace_period: float,
    vertex: bool,
    project: str | None,
    location: str,
    pipeline_root: str | None,
    service_account: str | None,
    template: Path | None,
    params: tuple[str, ...],
) -> None:
    """Run the spot_training pipeline: locally on the emulator (default) or on Vertex AI."""
    import time

    if vertex:
        _submit_to_vertex(project, location, pipeline_root, service_account, template, params)
        return
    from kfp_spot.pipelines import local_run

    if run_dir is None:
        run_dir = Path("kfp-spot-runs") / time.strftime("%Y%m%d-%H%M%S")
    result = local_run.run_local(
        run_dir,
        source=source or local_run.EXAMPLE_SOURCE,
        preemptions=preemptions,
        grace_period=grace_period,
        progress=lambda line: click.echo(f"kfp-spot: {line}", err=True),
    )
    click.echo(local_run.summarize(result))
    if result.outcome != "SUCCEEDED":
        raise SystemExit(1)


def _parse_params(params: tuple[str, ...]) -> dict:
    import json

    values = {}
    for item in params:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--param")
        try:
            values[name] = json.loads(raw)
        except ValueError:
            values[name] = raw
    return values


def _submit_to_vertex(
    project: str | None,
    location: str,
    pipeline_root: str | None,
    service_account: str | None,
    template: Path | None,
    params: tuple[str, ...],
    api_endpoint: str | None = None,
) -> None:
    from kfp_spot import vertex
    from kfp_spot.pipelines import catalog

    if not project:
        raise click.UsageError("--vertex needs --project PROJECT_ID")
    values = _parse_params(params)
    values.setdefault("project", project)
    values.setdefault("location", location)
    template = (
        template or next(e for e in catalog.PIPELINES if e.name == "spot_training").default_path()
    )
    try:
        name = vertex.submit_pipeline(
            template,
            project=project,
            location=location,
            parameter_values=values,
            pipeline_root=pipeline_root,
            service_account=service_account,
            api_endpoint=api_endpoint,
        )
    except vertex.SubmissionError as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(name)


@click.command(name="compile")
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write YAMLs here instead of updating the committed files in place.",
)
@click.option(
    "--base-image",
    default=None,
    help="Run every task in this image (pushed to your registry); needs --output-dir.",
)
def compile_(output_dir: Path | None, base_image: str | None) -> None:
    """Compile every component and pipeline to YAML (deterministic)."""
    from kfp_spot.pipelines import catalog

    try:
        paths = catalog.compile_all(output_dir, base_image=base_image)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    for path in paths:
        click.echo(str(path))


@click.command()
@click.argument("template", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--project", required=True, help="The Google Cloud project.")
@click.option("--location", default="us-central1", show_default=True, help="Vertex AI region.")
@click.option("--pipeline-root", help="gs:// root for the run's artifacts.")
@click.option("--service-account", help="The run-as service account.")
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="A pipeline parameter (VALUE parsed as JSON when it is JSON).",
)
@click.option("--api-endpoint", default=None, help="Another Vertex AI API endpoint.")
def submit(
    template: Path,
    project: str,
    location: str,
    pipeline_root: str | None,
    service_account: str | None,
    params: tuple[str, ...],
    api_endpoint: str | None,
) -> None:
    """Submit a compiled pipeline TEMPLATE to Vertex AI Pipelines."""
    _submit_to_vertex(
        project, location, pipeline_root, service_account, template, params, api_endpoint
    )


COMMANDS = [run, compile_, submit]
