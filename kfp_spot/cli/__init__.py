"""The kfp-spot command line.

Each command group lives in its own module and is registered here; bad arguments print one clear
line on stderr and exit with code 2 (click's usage-error convention).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from kfp_spot.version import __version__


class _OneLineErrors(click.Group):
    """Usage errors as one line on stderr (exit 2); other refusals one line too (exit 1)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if standalone_mode is False:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
            click.echo(f"kfp-spot: error: {exc.format_message()}{hint}", err=True)
            sys.exit(2)
        except click.ClickException as exc:
            click.echo(f"kfp-spot: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("kfp-spot: aborted", err=True)
            sys.exit(1)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kfp-spot")
def main() -> None:
    """kfp-spot: train on Spot VMs with Kubeflow Pipelines and Vertex AI."""


def _register() -> None:
    from kfp_spot.cli import emulator, endpoint, image, jobs, pipelines, registry

    main.add_command(emulator.emulator)
    for command in pipelines.COMMANDS:
        main.add_command(command)
    for command in (*jobs.COMMANDS, *endpoint.COMMANDS, *registry.COMMANDS, *image.COMMANDS):
        main.add_command(command)


_register()
