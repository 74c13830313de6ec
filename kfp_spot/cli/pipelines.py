"""``kfp-spot run``, ``kfp-spot submit`` and ``kfp-spot compile``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kfp_spot.cli.pairs import GivenPath, TemplateFile, endpoint_option, parse_pairs, regions_option
from kfp_spot.pipelines.local_drill import GRACE_PERIOD, PREEMPTIONS


def _vertex_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options that say where and how a pipeline runs on Vertex AI Pipelines."""
    options = [
        click.option("--project", help="The Google Cloud project (Vertex AI)."),
        click.option(
            "--location",
            default=None,
            help="Vertex AI region (default: the template's `location`, else us-central1).",
        ),
        click.option("--pipeline-root", help="gs:// root for the run's artifacts (Vertex AI)."),
        click.option("--service-account", help="The run-as service account (Vertex AI)."),
        click.option(
            "--param",
            "params",
            multiple=True,
            metavar="NAME=VALUE",
            help="Set a pipeline parameter, locally as on Vertex AI (repeatable). VALUE is parsed "
            "per the parameter's declared type: text as is, numbers, true/false, JSON lists and "
            "objects; an unknown NAME is an error listing the valid ones.",
        ),
        click.option(
            "--api-endpoint", callback=endpoint_option, help="Another Vertex AI API endpoint."
        ),
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
    type=GivenPath(file_okay=False, path_type=Path),
    default=None,
    help="Where the run keeps its outputs: a new or empty directory (default: "
    "./kfp-spot-runs/<timestamp>).",
)
@click.option(
    "--source",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Your training package (a project directory, package, script or archive); its "
    "module and evaluation entry point come from its pyproject.toml's [tool.kfp-spot] "
    "python-module / evaluation-entry-point unless set with --param (default: the bundled "
    "example trainer, with the example's training arguments and accuracy gate).",
)
@click.option(
    "--preemptions",
    type=click.IntRange(*PREEMPTIONS),
    default=1,
    show_default=True,
    help="How many times the emulator takes the Spot VM back (each after a new checkpoint).",
)
@click.option(
    "--regions",
    default=None,
    metavar="A,B",
    callback=lambda ctx, param, value: regions_option(value),
    help="Regions to run Spot jobs in, in order (the pipeline's regions parameter). Locally, with "
    "--preemptions N, the emulator takes A's Spot capacity away after the N-th preemption, so "
    "the launch fails over to B from its last checkpoint.",
)
@click.option(
    "--grace-period",
    type=click.FloatRange(*GRACE_PERIOD),
    default=10.0,
    show_default=True,
    help="Seconds between SIGTERM and SIGKILL at a preemption.",
)
@click.option(
    "--template",
    type=TemplateFile(),
    default=None,
    help="A compiled pipeline YAML, e.g. pulled from a registry (default: the built-in "
    "spot_training). --source goes to its 'source' parameter; one of your own with other "
    "names takes them with --param (one that launches or deploys must declare api_endpoint and "
    "pass it to those tasks).",
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
    regions: list[str] | None,
    grace_period: float,
    template: Path | None,
    verbose: bool,
    vertex: bool,
    **vertex_options: Any,
) -> None:
    """Run the spot_training pipeline: locally on the emulator (default) or on Vertex AI.

    Locally it trains --source (your package; default: the bundled example) with the package's
    own module and evaluation entry point, and --param sets any pipeline parameter (the quality
    gate: --param thresholds='{"mse": "<=0.1"}'). The emulator preempts the Spot VM --preemptions
    times, each after the attempt committed a checkpoint; with --regions A,B it then takes A's
    Spot capacity away and the launch fails over to B. RUN_DIR gets run.json, report.md and
    report.png (`kfp-spot report RUN_DIR`).

    Locally, stderr shows a line as each task and each attempt of the Spot CustomJob starts and
    ends, plus a live status line on a terminal; stdout gets the summary at the end. The tasks'
    own logs go to RUN_DIR/logs/ (pipeline.log and one file per task); a failed task's error is
    shown. Exits 1 when the pipeline does not succeed.
    """
    if regions is not None and any(
        p.partition("=")[0] == "regions" for p in vertex_options["params"]
    ):
        # One would silently replace the other (--regions won), as a --param given twice would.
        raise click.UsageError(
            "--regions and --param regions=... both set the pipeline's regions: give one"
        )
    if vertex:  # the emulator's drill and the local run's files: silently ignored before
        ctx = click.get_current_context()
        local_only = [
            f"--{name.replace('_', '-')}"
            for name in ("source", "run_dir", "preemptions", "grace_period", "verbose")
            if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
        ]
        if local_only:
            raise click.UsageError(
                f"{', '.join(local_only)}: for a local run only, not with --vertex (the package "
                "on Vertex AI: --param source=gs://BUCKET/PATH)"
            )
        _submit_to_vertex(template, regions=regions, **vertex_options)
        return
    if vertex_options["dry_run"]:
        raise click.UsageError("--dry-run shows a Vertex AI submission: add --vertex")
    vertex_only = [
        f"--{name.replace('_', '-')}"
        for name in ("project", "location", "pipeline_root", "service_account", "api_endpoint")
        if vertex_options[name]
    ]
    vertex_only += [
        flag
        for flag, given in (
            ("--skip-image-check", vertex_options["skip_image_check"]),
            ("--label", vertex_options["labels"]),
            ("--enable-caching/--disable-caching", vertex_options["enable_caching"] is not None),
        )
        if given
    ]
    if vertex_only:
        raise click.UsageError(
            f"{', '.join(vertex_only)} only {'apply' if len(vertex_only) > 1 else 'applies'} "
            "with --vertex; a local run takes pipeline parameters with --param NAME=VALUE"
        )
    from kfp_spot.pipelines import local, local_run
    from kfp_spot.progress import Console
    from kfp_spot.validation.inputs import freeze_at_exit

    freeze_at_exit()  # kfp, the emulator's GAPIC types, matplotlib: exit without collecting them

    with local.run_dir_or_default(run_dir) as run_dir:  # a default one: this run's alone
        params = vertex_options["params"]
        console = Console()
        try:
            parameters = local.parse_arguments(  # values checked with the source's problems
                local_run.pipeline_to_run(template), parse_pairs(params, "--param"), check=False
            )
            refused = {  # source: trained with the example's settings; api_endpoint: ignored
                "source": "a local run takes the package with --source PATH (and its "
                "[tool.kfp-spot])",
                "api_endpoint": "a local run starts its own emulator and points the tasks at it",
            }
            for name in sorted(refused.keys() & parameters.keys()):
                raise click.UsageError(f"--param {name}=... is for --vertex; {refused[name]}")
            result = local_run.run_local(
                run_dir,
                source=source or local_run.EXAMPLE_SOURCE,
                parameters=parameters,
                preemptions=preemptions,
                grace_period=grace_period,
                template=template,
                progress=console.event,
                status=None if verbose else console.status,
                verbose=verbose,
                regions=regions,
            )
        except local.LocalRunError as exc:
            raise click.UsageError(str(exc)) from None
        finally:
            console.clear()
        click.echo(local_run.summarize(result))
        for line in local_run.warning_lines(result):  # shown last: the tasks' logs hold them
            click.echo(line, err=True)
    if not result.succeeded:
        raise SystemExit(1)


@click.command()
@click.argument("template", type=TemplateFile())
@_vertex_options
def submit(template: Path, **vertex_options: Any) -> None:
    """Submit a compiled pipeline TEMPLATE to Vertex AI Pipelines.

    Parameter names and types, the pipeline root, service account, labels and image are checked
    offline first; --dry-run prints the request instead of sending it (no credentials needed).
    """
    _submit_to_vertex(template, **vertex_options)


def _submit_to_vertex(
    template: Path | None,
    *,
    regions: list[str] | None = None,
    project: str | None,
    location: str | None,
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
    from kfp_spot.pipelines import catalog, local, vertex
    from kfp_spot.vertex import pipeline_job

    if not project:
        raise click.UsageError("submitting to Vertex AI needs --project PROJECT_ID")
    if location is not None and not location.strip():  # `--location "$REGION"`, REGION unset
        raise click.BadParameter(
            "is empty: give a Vertex AI region such as us-central1, or leave --location out for "
            "the template's own region",
            param_hint="--location",
        )
    template = template or catalog.pipeline_path("spot_training")
    try:
        pipeline = local.load(template)  # the template checked, the --params read by its types
        values = local.parse_arguments(pipeline, parse_pairs(params, "--param"))
    except local.LocalRunError as exc:
        raise click.UsageError(str(exc)) from None
    if regions is not None:
        values["regions"] = regions
    arguments: dict[str, Any] = {
        "project": project,
        "location": location,
        "parameter_values": values,
        "pipeline_root": pipeline_root,
        "service_account": service_account,
        "enable_caching": enable_caching,
        "labels": parse_pairs(labels, "--label"),
        "api_endpoint": api_endpoint,
        "check_images": not skip_image_check,
        "warn": lambda text: click.echo(f"kfp-spot: warning: {text}", err=True),
    }
    try:
        if dry_run:
            request = vertex.dry_run(template, **arguments)
            click.echo(json.dumps(request, indent=2, sort_keys=True))
            click.echo("kfp-spot: dry run: nothing was sent", err=True)
            return
        name = vertex.submit(template, **arguments)
    except pipeline_job.SubmissionError as exc:
        raise click.UsageError(str(exc)) from exc
    except (
        UnpublishedImageError,
        ImageRecordsError,
        pipeline_job.NoCredentialsError,
        pipeline_job.SubmitFailedError,
    ) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(name)


@click.command(name="compile")
@click.option(
    "--output-dir",
    type=GivenPath(file_okay=False, path_type=Path),
    default=None,
    help="Write YAMLs here instead of updating the committed files in place.",
)
@click.option(
    "--base-image",
    default=None,
    help="Run every task in this image (pushed to your registry); needs --output-dir.",
)
def compile_(output_dir: Path | None, base_image: str | None) -> None:
    """Compile every component and pipeline to YAML (deterministic).

    Tasks run in $KFP_SPOT_RUNTIME_IMAGE when it is set (docs/image.md), or in --base-image.
    """
    try:
        from kfp_spot.pipelines import catalog

        paths = catalog.compile_all(output_dir, base_image=base_image)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    except OSError as exc:  # e.g. --output-dir cannot be made, or a YAML cannot be written
        raise click.ClickException(
            f"cannot write the YAMLs: {exc.strerror or exc} ({exc.filename}); give --output-dir "
            "a directory that can be made and written"
        ) from exc
    for path in paths:
        click.echo(str(path))


COMMANDS = [run, compile_, submit]
