"""``kfp-spot run``, ``kfp-spot submit`` and ``kfp-spot compile``."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


def _vertex_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options that say where and how a pipeline runs on Vertex AI Pipelines."""
    options = [
        click.option("--project", help="The Google Cloud project (Vertex AI)."),
        click.option(
            "--location", default="us-central1", show_default=True, help="Vertex AI region."
        ),
        click.option("--pipeline-root", help="gs:// root for the run's artifacts (Vertex AI)."),
        click.option("--service-account", help="The run-as service account (Vertex AI)."),
        click.option(
            "--param",
            "params",
            multiple=True,
            metavar="NAME=VALUE",
            help="A pipeline parameter on Vertex AI (VALUE parsed as JSON when it is JSON).",
        ),
        click.option("--api-endpoint", default=None, help="Another Vertex AI API endpoint."),
        click.option(
            "--label",
            "labels",
            multiple=True,
            metavar="KEY=VALUE",
            help="A label of the PipelineJob on Vertex AI.",
        ),
        click.option(
            "--enable-caching/--disable-caching",
            default=None,
            help="Turn Vertex AI's task caching on/off for every task of the run (default: each "
            "task's compiled setting; launch and deploy tasks are not cached).",
        ),
        click.option(
            "--dry-run",
            is_flag=True,
            help="Check everything offline and print the PipelineJob request instead of sending "
            "it (no credentials needed).",
        ),
        click.option(
            "--skip-image-check",
            is_flag=True,
            help="Submit even if this machine did not push the template's image (`kfp-spot image "
            "push`) and it is not a release's: for images pushed with other tools.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


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
    "--template",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A compiled spot_training YAML, e.g. pulled from a registry (default: the built-in).",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Also stream the tasks' executor logs (always kept in RUN_DIR/logs/).",
)
@click.option(
    "--vertex", is_flag=True, help="Submit to Vertex AI Pipelines instead of running locally."
)
@_vertex_options
def run(
    run_dir: Path | None,
    source: Path | None,
    preemptions: int,
    grace_period: float,
    template: Path | None,
    verbose: bool,
    vertex: bool,
    **vertex_options: Any,
) -> None:
    """Run the spot_training pipeline: locally on the emulator (default) or on Vertex AI.

    Locally, stderr shows a line as each task and each attempt of the Spot CustomJob starts and
    ends, plus a live status line on a terminal; stdout gets the summary at the end. The tasks'
    own logs go to RUN_DIR/logs/ (pipeline.log and one file per task); a failed task's error is
    shown. Exits 1 when the pipeline does not succeed.
    """
    if vertex:
        _submit_to_vertex(template, **vertex_options)
        return
    if vertex_options["dry_run"]:
        raise click.UsageError("--dry-run shows a Vertex AI submission: add --vertex")
    from kfp_spot.pipelines import local_run
    from kfp_spot.progress import Console

    if run_dir is None:
        run_dir = Path("kfp-spot-runs") / time.strftime("%Y%m%d-%H%M%S")
    console = Console()
    try:
        result = local_run.run_local(
            run_dir,
            source=source or local_run.EXAMPLE_SOURCE,
            preemptions=preemptions,
            grace_period=grace_period,
            template=template,
            progress=console.event,
            status=None if verbose else console.status,
            verbose=verbose,
        )
    finally:
        console.clear()
    click.echo(local_run.summarize(result))
    if not result.succeeded:
        raise SystemExit(1)


@click.command()
@click.argument("template", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_vertex_options
def submit(template: Path, **vertex_options: Any) -> None:
    """Submit a compiled pipeline TEMPLATE to Vertex AI Pipelines.

    Parameter names and types, the pipeline root, service account, labels and image are checked
    offline first; --dry-run prints the request instead of sending it (no credentials needed).
    """
    _submit_to_vertex(template, **vertex_options)


def _parse_pairs(items: tuple[str, ...], option: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint=option)
        pairs[name] = raw
    return pairs


def _parse_params(params: tuple[str, ...], declared: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``--param`` values: text for the template's STRING parameters, else parsed as JSON."""
    import json

    values: dict[str, Any] = {}
    for name, raw in _parse_pairs(params, "--param").items():
        if declared.get(name, {}).get("parameterType") == "STRING":
            values[name] = raw
            continue
        try:
            values[name] = json.loads(raw)
        except ValueError:
            values[name] = raw
    return values


def _submit_to_vertex(
    template: Path | None,
    *,
    project: str | None,
    location: str,
    pipeline_root: str | None,
    service_account: str | None,
    params: tuple[str, ...],
    labels: tuple[str, ...],
    enable_caching: bool | None,
    dry_run: bool,
    api_endpoint: str | None,
    skip_image_check: bool,
) -> None:
    import json

    from kfp_spot.image import ImageRecordsError, UnpublishedImageError
    from kfp_spot.pipelines import catalog
    from kfp_spot.vertex import pipeline_job

    if not project:
        raise click.UsageError("submitting to Vertex AI needs --project PROJECT_ID")
    template = template or catalog.pipeline_path("spot_training")
    arguments: dict[str, Any] = {
        "project": project,
        "location": location,
        "pipeline_root": pipeline_root,
        "service_account": service_account,
        "enable_caching": enable_caching,
        "labels": _parse_pairs(labels, "--label"),
    }
    try:
        declared = pipeline_job.template_parameters(pipeline_job.read_template(template))
        arguments["parameter_values"] = _parse_params(params, declared)
        submission = pipeline_job.prepare_submission(template, **arguments)
        pipeline_job.check_submission_images(submission, enabled=not skip_image_check)
        for warning in submission.warnings:
            click.echo(f"kfp-spot: warning: {warning}", err=True)
        if dry_run:
            request = pipeline_job.dry_run(
                submission, api_endpoint=api_endpoint, check_images=False
            )
            click.echo(json.dumps(request, indent=2, sort_keys=True))
            click.echo("kfp-spot: dry run: nothing was sent", err=True)
            return
        name = pipeline_job.submit_pipeline(
            template,
            **arguments,
            api_endpoint=api_endpoint,
            check_images=False,  # checked above
        )
    except pipeline_job.SubmissionError as exc:
        raise click.UsageError(str(exc)) from exc
    except (UnpublishedImageError, ImageRecordsError, pipeline_job.NoCredentialsError) as exc:
        raise click.ClickException(str(exc)) from exc
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


COMMANDS = [run, compile_, submit]
