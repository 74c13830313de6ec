"""``kfp-spot image build|push|lock|list``: the runtime image the components run in.

See docs/image.md.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kfp_spot.version import RUNTIME_IMAGE, __version__

if TYPE_CHECKING:
    from kfp_spot.image import Engine


def _engine(name: str | None) -> Engine:
    from kfp_spot import image

    try:
        return image.detect_engine(name)
    except image.ImageBuildError as exc:
        raise click.ClickException(str(exc)) from exc


# An image reference as podman and docker take it: [HOST[:PORT]/]PATH[:TAG][@sha256:DIGEST], the
# path in lowercase (an empty --tag was built as an image with no name; `UP:1` failed only inside
# the engine's build).
_LOCAL_REFERENCE = re.compile(
    r"(?:[a-z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)


def _reference(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``value`` when it is an image reference (None: the option was left out)."""
    if value is None or _LOCAL_REFERENCE.fullmatch(value):
        return value
    raise click.BadParameter(
        f"{value!r} is not an image reference [HOST/]PATH[:TAG] (lowercase path), such as "
        f"{RUNTIME_IMAGE!r}" + ("; leave the option out for its default" if not value else "")
    )


_engine_option = click.option(
    "--engine",
    type=click.Choice(["podman", "docker"]),
    default=None,
    help="Container engine (default: $KFP_SPOT_CONTAINER_ENGINE, else podman, else docker).",
)


@click.group()
def image() -> None:
    """Build and push the runtime image every kfp-spot component runs in."""


@image.command()
@click.option(
    "--source",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=Path("."),
    show_default=True,
    help="The kfp-spot source checkout to build from.",
)
@click.option(
    "--tag",
    default=RUNTIME_IMAGE,
    show_default=True,
    callback=_reference,
    help="The image's reference.",
)
@click.option(
    "--base-image",
    default=None,
    callback=_reference,
    help="A Python 3.11 image to build on (default: podman a debootstrap'd Debian bookworm, "
    "docker python:3.11-slim).",
)
@click.option(
    "--examples", is_flag=True, help="Also build the image with the example trainer's deps."
)
@_engine_option
def build(
    source: Path, tag: str, base_image: str | None, examples: bool, engine: str | None
) -> None:
    """Build the runtime image from a source checkout (what `make image` runs)."""
    from kfp_spot import image as image_mod

    started = time.monotonic()
    try:
        result = image_mod.build_image(
            source,
            engine=_engine(engine),
            tag=tag,
            base_image=base_image,
            examples=examples,
            progress=lambda line: click.echo(f"kfp-spot: {line}", err=True),
        )
    except image_mod.ImageBuildError as exc:
        raise click.ClickException(str(exc)) from exc
    for reference, image_id in result.images.items():
        click.echo(f"{reference} {image_id[:12]}")
    click.echo(f"kfp-spot: done in {time.monotonic() - started:.0f} s", err=True)


def _destination(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from kfp_spot.image import ImageBuildError
    from kfp_spot.image.build import check_push_destination

    try:  # a mistyped reference: the argument's error (exit 2), before any engine is asked
        return check_push_destination(value)
    except ImageBuildError as exc:
        raise click.BadParameter(str(exc)) from None


@image.command()
@click.argument("destination", callback=_destination)
@click.option(
    "--source",
    default=RUNTIME_IMAGE,
    show_default=True,
    callback=_reference,
    help="The local image to push.",
)
@click.option(
    "--tls-verify/--no-tls-verify",
    default=True,
    help="Verify the registry's TLS certificate (podman; off only for a local registry).",
)
@_engine_option
def push(destination: str, source: str, tls_verify: bool, engine: str | None) -> None:
    """Push the built runtime image to DESTINATION (HOST/PATH:TAG) and record the push.

    Then compile templates that run in it:
    `kfp-spot compile --base-image DESTINATION --output-dir build/templates`.
    """
    from kfp_spot import image as image_mod

    try:
        record = image_mod.push_image(
            destination, engine=_engine(engine), source=source, tls_verify=tls_verify
        )
    except image_mod.ImageBuildError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{record.reference}@{record.digest}" if record.digest else record.reference)
    click.echo(
        f"kfp-spot: next: kfp-spot compile --base-image {destination} --output-dir build/templates",
        err=True,
    )


@image.command()
@click.option(
    "--source",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=Path("."),
    show_default=True,
    help="The kfp-spot source checkout whose lock file to write.",
)
def lock(source: Path) -> None:
    """Resolve the image's packages again into requirements-image.lock (needs uv).

    Every runtime dependency of pyproject.toml and their dependencies, at one exact version each,
    for CPython 3.11 on linux/amd64 (whatever this machine is), with kfp at the version that
    compiled the committed YAMLs. Commit the result: `kfp-spot image build` installs exactly it.
    """
    from kfp_spot import image as image_mod

    try:
        path = image_mod.write_lock(source)
        pins = image_mod.check_lock(source)
    except image_mod.LockError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{path}: {len(pins)} packages pinned")


@image.command(name="list")
def list_() -> None:
    """The images this machine built and pushed (what `submit` accepts besides releases)."""
    from kfp_spot import image as image_mod

    try:
        records = image_mod.load_records()
    except image_mod.ImageRecordsError as exc:
        raise click.ClickException(str(exc)) from exc
    if not records:
        click.echo(f"no images recorded in {image_mod.records_path()}", err=True)
    for ref, record in records.items():
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.time))
        flag = "" if record.version == __version__ else f" (not {__version__})"
        where = f" {record.platform}" if record.platform else ""
        click.echo(f"{record.kind.value:<6} {ref} kfp-spot {record.version}{flag}{where} {when}")


COMMANDS = [image]
