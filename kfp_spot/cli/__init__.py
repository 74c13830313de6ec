"""The kfp-spot command line.

Each command group lives in its own module and is registered here; bad arguments print one clear
line on stderr and exit with code 2 (click's usage-error convention).
"""

from __future__ import annotations

import click

from kfp_spot.version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kfp-spot")
def main() -> None:
    """kfp-spot: train on Spot VMs with Kubeflow Pipelines and Vertex AI."""


def _register() -> None:
    from kfp_spot.cli import emulator, jobs, pipelines, registry

    main.add_command(emulator.emulator)
    for command in pipelines.COMMANDS:
        main.add_command(command)
    for command in (*jobs.COMMANDS, *registry.COMMANDS):
        main.add_command(command)


_register()
