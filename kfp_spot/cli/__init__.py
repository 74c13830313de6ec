"""The kfp-spot command line.

Each command group lives in its own module and is registered here by name (``_COMMANDS``); a
command's module is imported only when that command runs (or ``--help`` lists them all), so
``kfp-spot jobs list`` never loads the pipelines' KFP or the emulator. Bad arguments print one clear
line on stderr and exit with code 2 (click's usage-error convention).
"""

from __future__ import annotations

import difflib
import importlib
import sys
import warnings
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any, TextIO

import click

from kfp_spot import lightimports
from kfp_spot.version import __version__

# command name -> "module:attribute" of its click command, imported on first use.
_COMMANDS = {
    "compile": "kfp_spot.cli.pipelines:compile_",
    "emulator": "kfp_spot.cli.emulator:emulator",
    "endpoint": "kfp_spot.cli.endpoint:endpoint",
    "image": "kfp_spot.cli.image:image",
    "jobs": "kfp_spot.cli.jobs:jobs",
    "pull": "kfp_spot.cli.registry:pull",
    "push": "kfp_spot.cli.registry:push",
    "registry": "kfp_spot.cli.registry:registry_group",
    "report": "kfp_spot.cli.registry:report",
    "run": "kfp_spot.cli.pipelines:run",
    "submit": "kfp_spot.cli.pipelines:submit",
    "tags": "kfp_spot.cli.registry:tags",
}


# An option of another tool -> ours for the same thing: gcloud's --region is Vertex AI's location,
# and a registry's address is KFP RegistryClient's host.
_SYNONYMS = {
    "--region": "--location",
    "--registry": "--host",
    "--repository": "--host",
    "--repo": "--host",
}

# A command of another tool -> ours: kubectl's get, gcloud's describe; a registry's upload and
# download are KFP RegistryClient's push and pull (as ours are named).
_COMMAND_SYNONYMS = {
    "get": "describe",
    "show": "describe",
    "info": "describe",
    "upload": "push",
    "download": "pull",
}


def _did_you_mean(names: Sequence[str]) -> str:
    """The hint worded as click's guesses: one name, or several."""
    if len(names) == 1:
        return f"Did you mean {names[0]!r}?"
    return f"(Did you mean one of: {', '.join(repr(name) for name in names)}?)"


def _suggest_synonym(exc: click.NoSuchOption) -> click.UsageError:
    """``exc``, pointing an option another tool spells differently at ours where the command has it.

    It joins click's guesses by spelling (``--region`` of ``run``: ``--regions``), but for
    ``--help``, which no one misspells as another tool's option. The hint is worded as click's.
    """
    ours = _SYNONYMS.get(exc.option_name)
    if ours is None or exc.ctx is None:
        return exc
    if not any(ours in param.opts for param in exc.ctx.command.params):
        return exc
    names = sorted({ours, *(p for p in exc.possibilities or () if p not in ("--help", "-h"))})
    return click.UsageError(f"{exc.message} {_did_you_mean(names)}", exc.ctx)


def _suggest_command(exc: click.UsageError) -> click.UsageError:
    """``exc`` for an unknown command, with the group's commands it may have meant.

    click guesses by spelling among the commands a group has loaded, which for this lazy group
    are none until one runs (``kfp-spot comple``, ``kfp-spot job list`` had no hint); the
    guesses here are among all of a group's commands, with another tool's name for one of them
    (``jobs get``: ``describe``). click before 8.4 names no command in its error: unchanged.
    """
    name, ctx = getattr(exc, "command_name", None), exc.ctx
    if not isinstance(name, str) or ctx is None or not isinstance(ctx.command, click.Group):
        return exc
    commands = ctx.command.list_commands(ctx)
    names = set(difflib.get_close_matches(name, commands))
    if _COMMAND_SYNONYMS.get(name) in commands:
        names.add(_COMMAND_SYNONYMS[name])
    if not names:
        return exc
    return click.UsageError(f"{exc.message} {_did_you_mean(sorted(names))}", ctx)


_PYTHON_SUPPORT_NOTICE = ("api_core", "_python_version_support.py")
"""Where Google's client libraries warn that this Python is past their support."""


def one_python_support_notice() -> None:
    """Show Google's notice that this Python is past its libraries' support once, as one line.

    Each of Google's client libraries (google-api-core, the aiplatform SDK and each of its API
    versions, ...) warns on import with a two-line FutureWarning: on a Python they no longer
    support (3.10, as of late 2026) a command printed some twenty lines of them before its own
    output, and a one-line error became many. The first is shown; the others say the same of
    other packages. Every other warning is shown as before.
    """
    previous = warnings.showwarning
    if getattr(previous, "kfp_spot_notice", False):  # installed already (main run again)
        return
    said = False

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        nonlocal said
        if issubclass(category, FutureWarning) and (
            PurePath(filename).parts[-2:] == _PYTHON_SUPPORT_NOTICE
        ):
            if not said:
                said = True
                click.echo(
                    f"kfp-spot: note: {message} (and so for Google's other libraries)", err=True
                )
            return
        previous(message, category, filename, lineno, file, line)

    show.kfp_spot_notice = True  # type: ignore[attr-defined]
    warnings.showwarning = show


class _OneLineErrors(click.Group):
    """Usage errors as one line on stderr (exit 2); other refusals one line too (exit 1).

    Commands load lazily from ``_COMMANDS`` (click's documented lazy-group pattern).
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None or cmd_name not in _COMMANDS:
            return found
        module_name, attribute = _COMMANDS[cmd_name].split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{_COMMANDS[cmd_name]} is not a click command")
        self.add_command(command, cmd_name)
        return command

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        one_python_support_notice()
        lightimports.defer_gapic_packages()  # a command loads the GAPIC modules it uses, not all
        lightimports.kfp_without_client()  # no command uses kfp.Client (nor Kubernetes' client)
        if standalone_mode is False:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            if isinstance(exc, click.NoSuchOption):
                exc = _suggest_synonym(exc)
            else:
                exc = _suggest_command(exc)
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
