"""Option values of ``kfp-spot run`` and ``submit``: pairs, ``--regions``, ``--api-endpoint``.

:class:`TemplateFile`, the template they take: a registry URL in its place is told how to pull it.

``--param`` and ``--label`` pairs, ``--regions A,B`` and the API endpoint, read into what they
mean; a bad one is the option's one-line error. :class:`GivenPath`, the path options a command
writes into (``--run-dir``, ``--state-dir``, ``--output-dir``, ...), refuses empty text.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import click

from kfp_spot.vertex.values import show


class GivenPath(click.Path):
    """A path option that refuses empty or blank text instead of reading it as ``.``.

    ``--run-dir "$DIR"`` with ``DIR`` unset would otherwise write the run, the emulator's state
    or the compiled templates into the current directory. A path no file can ever be at (a
    symlink loop, a name longer than the filesystem allows, a folder that cannot be searched) is
    refused too: click.Path takes it as one that does not exist yet, and the command's first
    look at it (pathlib's ``exists``, ``resolve``) was a traceback.
    """

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """Refuse empty or blank text, then read the path as click.Path does."""
        if isinstance(value, str) and not value.strip():
            self.fail(
                f"{value!r} is empty: give a path, or leave the option out for its default",
                param,
                ctx,
            )
        converted = super().convert(value, param, ctx)
        try:
            os.stat(converted)
        except OSError as exc:
            # Missing (or under a file): each command makes it, or says why it cannot.
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                self.fail(
                    f"{show(value)} cannot be used ({exc.strerror}): give another path",
                    param,
                    ctx,
                )
        return converted


def regions_option(value: str | None) -> list[str] | None:
    """``--regions A,B`` as checked regions; a bad one is a one-line error naming the option."""
    if value is None:
        return None
    from kfp_spot.pipelines.local_regions import RegionsError, parse_regions

    try:
        return list(parse_regions(value))
    except RegionsError as exc:
        raise click.BadParameter(str(exc), param_hint="--regions") from None


def endpoint_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """``--api-endpoint`` as given, or a one-line error naming the option and the valid forms."""
    from kfp_spot.vertex.client import is_emulator_endpoint
    from kfp_spot.vertex.values import InvalidFieldError

    try:
        is_emulator_endpoint(value or "")
    except InvalidFieldError as exc:
        raise click.BadParameter(exc.reason, ctx=ctx, param=param) from None
    return value


_NAME_CHARS = 80  # a longer NAME of NAME=VALUE is shown cut short, as values are (`show`)


def parse_pairs(items: tuple[str, ...], option: str) -> dict[str, str]:
    """``NAME=VALUE`` items as a mapping; a name given twice is refused, not the last one kept."""
    pairs: dict[str, str] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{show(item)} is not NAME=VALUE", param_hint=option)
        if name in pairs:
            named = name if len(name) <= _NAME_CHARS else show(name)
            raise click.BadParameter(
                f"{named} is given twice ({show(pairs[name])} and {show(raw)}); give each name "
                "once",
                param_hint=option,
            )
        pairs[name] = raw
    return pairs


class TemplateFile(click.Path):
    """A compiled template's file; a registry URL in its place is told how to pull it first.

    The Vertex AI SDK takes a template's registry URL for a run; `kfp-spot run` and `submit`
    check a file before anything is sent, so the URL gets the `kfp-spot pull` that fetches it.
    """

    def __init__(self) -> None:
        super().__init__(exists=True, dir_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The file's path; a URL fails with the pull that fetches it."""
        if "://" in str(value):  # only a URL needs the registry's rules (and their import)
            from kfp_spot.registry import template_url_refusal

            refusal = template_url_refusal(str(value))
            if refusal is not None:
                self.fail(refusal, param, ctx)
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:  # click's "File '...' does not exist.", cut short
            name = click.utils.format_filename(value)
            self.fail(exc.message.replace(repr(name), show(name)), param, ctx)
