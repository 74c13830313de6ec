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
def run(run_dir: Path | None, source: Path | None, preemptions: int, grace_period: float) -> None:
    """Run the example spot_training pipeline end to end on the local emulator."""
    import time

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


@click.command(name="compile")
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write YAMLs here instead of updating the committed files in place.",
)
def compile_(output_dir: Path | None) -> None:
    """Compile every component and pipeline to YAML (deterministic)."""
    from kfp_spot.pipelines import catalog

    for path in catalog.compile_all(output_dir):
        click.echo(str(path))


COMMANDS = [run, compile_]
