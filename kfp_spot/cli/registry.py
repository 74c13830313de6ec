"""``kfp-spot push|pull|tags``, ``registry serve`` and ``report``."""

from __future__ import annotations

import signal
import socket
import threading
from pathlib import Path
from typing import Any

import click

from kfp_spot.cli.pairs import GivenPath

HOST_ENV = "KFP_SPOT_REGISTRY"

_host_option = click.option(
    "--host",
    "host",
    envvar=HOST_ENV,
    required=True,
    metavar="URL",
    help=(
        "Repository URL: https://LOCATION-kfp.pkg.dev/PROJECT/REPO (Artifact Registry) or "
        f"http://127.0.0.1:PORT/PROJECT/REPO (`kfp-spot registry serve`). Env: {HOST_ENV}."
    ),
)
_config_option = click.option(
    "--config-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="RegistryClient config file (default: built in for Artifact Registry, "
    "kfp-spot's local-registry context otherwise).",
)


def _checked_host(host: str) -> str:
    from kfp_spot.registry import check_host

    try:
        return check_host(host)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--host'") from exc


def _registry_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a registry helper; user mistakes exit 2, registry failures exit 1, one line each."""
    from kfp_spot.registry import RegistryError

    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    except RegistryError as exc:
        raise click.ClickException(str(exc)) from exc


@click.command()
@click.argument("template", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_host_option
@click.option(
    "--version",
    "version",
    default=None,
    metavar="VERSION",
    help="Your pipeline's version (e.g. 1.2.0), set as a tag beside 'latest' (default: only "
    "'latest'; the registry names every upload by its sha256 either way).",
)
@click.option(
    "--tag",
    "extra_tags",
    multiple=True,
    help="Another tag to set (repeatable).",
)
@_config_option
def push(
    template: Path,
    host: str,
    version: str | None,
    extra_tags: tuple[str, ...],
    config_file: str | None,
) -> None:
    """Upload a compiled pipeline TEMPLATE to a registry, tagged latest (and VERSION if given)."""
    from kfp_spot import registry

    host = _checked_host(host)
    tags = tuple(dict.fromkeys((*(() if version is None else (version,)), "latest", *extra_tags)))
    _registry_call(registry.push_tags, version, tags)  # before any warning of the template
    _registry_call(registry.check_template, template)  # before its images are read
    _warn_of_unpullable_images(template)
    _warn_of_cached_tasks(template)
    _warn_of_platform_spec(template)
    result = _registry_call(
        registry.push,
        template,
        host,
        version,
        tags,
        config_file=config_file,
        progress=lambda message: click.echo(f"kfp-spot: {message}", err=True),
    )
    click.echo(f"{result.package} {result.version} tags: {', '.join(result.tags)}")
    for tag, before in result.moved:
        click.echo(
            f"kfp-spot: warning: tag {tag!r} of {result.package} moved to this upload from "
            f"{before}, another template (`kfp-spot pull {result.package} --version {before}` "
            "still gets that one); give each change of a pipeline its own --version",
            err=True,
        )
    if version is None and not extra_tags:
        click.echo(
            f"kfp-spot: tagged 'latest' only: pull this upload by {result.version}, or push it "
            "again with --version VERSION (e.g. 1.2.0) to tag it with your pipeline's version",
            err=True,
        )


def _warn_of_unpullable_images(template: Path) -> None:
    """Say so when the template's kfp-spot tasks run in an image Vertex AI could not pull.

    A template in a registry is run without `kfp-spot submit` and its image check (a run made
    from it in the Vertex AI console), so the push is the last point where kfp-spot sees it.
    """
    from kfp_spot.image import ImageRecordsError, UnpublishedImageError, check_template_images

    try:
        check_template_images(template)
    except (UnpublishedImageError, ImageRecordsError) as exc:
        click.echo(
            f"kfp-spot: warning: {exc} (a run made from this template on Vertex AI, e.g. in its "
            "console, would fail pulling the image)",
            err=True,
        )


def _warn_of_platform_spec(template: Path) -> None:
    """Say so when the template holds a platform spec after its pipeline spec.

    `kfp-spot submit` refuses such a template (Vertex AI Pipelines takes the pipeline spec
    alone; the SDK's loader reads one document), and a run made from a registry goes through no
    submit; a local run (`kfp-spot run --template`) still takes it, so the upload goes on.
    """
    from kfp_spot.vertex.pipeline_job import SubmissionError, read_template_documents

    try:
        documents, _ = read_template_documents(template)
    except SubmissionError:
        return
    if len(documents) > 1:
        click.echo(
            f"kfp-spot: warning: {template}: holds {len(documents)} YAML documents (after the "
            "pipeline spec, a platform spec such as kfp-kubernetes adds); Vertex AI Pipelines "
            "takes the pipeline spec alone: `kfp-spot submit` refuses this template and the "
            "Vertex AI SDK cannot load it (a local run takes it); compile the pipeline without "
            "platform-specific settings for Vertex AI",
            err=True,
        )


def _warn_of_cached_tasks(template: Path) -> None:
    """Name each task a run from the template would cache or give a machine it does not use.

    A run made from a template in a registry (the Vertex AI console) goes through no
    `kfp-spot submit` and its warnings: there a cached launch replays its outcome without
    training. A file that is no compiled spec is left to the registry to refuse.
    """
    from kfp_spot.jobs.template_warnings import run_warnings
    from kfp_spot.vertex.pipeline_job import SubmissionError, read_template

    try:
        spec = read_template(template)
    except SubmissionError:
        return
    for warning in run_warnings(spec):
        click.echo(f"kfp-spot: warning: {template}: {warning}", err=True)


@click.command()
@click.argument("package")
@_host_option
@click.option("--tag", default=None, help="Tag to download (default: latest).")
@click.option(
    "--version",
    "version",
    default=None,
    metavar="sha256:HEX",
    help="Exact version to download (instead of a tag).",
)
@click.option(
    "-o",
    "--output",
    type=GivenPath(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the template (default: ./PACKAGE_TAG.yaml).",
)
@_config_option
def pull(
    package: str,
    host: str,
    tag: str | None,
    version: str | None,
    output: Path | None,
    config_file: str | None,
) -> None:
    """Download the template PACKAGE (a pipeline name) from a registry."""
    from kfp_spot import registry

    if tag and version:
        raise click.UsageError("give either --tag or --version, not both")
    host = _checked_host(host)
    path = _registry_call(
        registry.pull,
        host,
        package,
        tag=tag,
        version=version,
        output=output,
        config_file=config_file,
        progress=lambda message: click.echo(f"kfp-spot: {message}", err=True),
    )
    if path.is_file():  # not after the template itself, on a stream such as /dev/stdout
        click.echo(str(path))


@click.command()
@click.argument("package", required=False)
@_host_option
@_config_option
def tags(package: str | None, host: str, config_file: str | None) -> None:
    """List the tags of PACKAGE and its untagged versions (without PACKAGE: the packages)."""
    from kfp_spot import registry

    host = _checked_host(host)
    if package is None:
        for name in _registry_call(registry.list_packages, host, config_file=config_file):
            click.echo(name)
        return
    rows = _registry_call(registry.list_tags, host, package, config_file=config_file)
    untagged = _registry_call(
        registry.list_untagged, host, package, config_file=config_file, tags=rows
    )
    width = max((len(r.tag) for r in rows), default=1)
    for row in rows:
        click.echo(f"{row.tag:<{width}}  {row.version}")
    for version, uploaded in untagged:  # pushed without a version tag, and latest moved on
        click.echo(f"{'-':<{width}}  {version}  untagged, uploaded {uploaded}")


@click.group(name="registry")
def registry_group() -> None:
    """Run a local pipeline-template registry (Artifact Registry's KFP protocol)."""


def machine_name() -> str:
    """This machine's name as other machines reach it: its FQDN, unless that is a loopback name.

    ``socket.getfqdn()`` answers with the first name of the address the host name resolves to,
    which is ``localhost`` where /etc/hosts maps the host name to 127.0.0.1 (many VMs and
    containers): no other machine reaches this one by that name, so the host name is used then.
    """
    for name in (socket.getfqdn(), socket.gethostname()):
        if name and not _is_loopback_name(name):
            return name
    return socket.gethostname() or "localhost"


def _is_loopback_name(name: str) -> bool:
    lowered = name.lower()
    return lowered.split(".", 1)[0] in ("localhost", "ip6-localhost", "ip6-loopback")


def _project_repo(value: str) -> tuple[str, str]:
    """``PROJECT/REPO`` of ``--repository``, each part checked as the registry checks it."""
    from kfp_spot.registry.store import RegistryStoreError, check_project, check_repository

    project, slash, repo = value.partition("/")
    try:
        if not slash or "/" in repo:
            raise click.BadParameter(f"{value!r} is not PROJECT/REPO", param_hint="--repository")
        return check_project(project), check_repository(repo)
    except RegistryStoreError as exc:
        raise click.BadParameter(exc.message, param_hint="--repository") from exc


@registry_group.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8787,
    show_default=True,
    help="Port to listen on (0 picks a free one).",
)
@click.option(
    "--root",
    type=GivenPath(file_okay=False, path_type=Path),
    default=Path("kfp-spot-registry"),
    show_default=True,
    help="Folder that holds the registry's templates, versions and tags.",
)
@click.option(
    "--repository",
    "repositories",
    multiple=True,
    default=("local-project/templates",),
    show_default=True,
    metavar="PROJECT/REPO",
    help="A repository to create if it is not there yet (repeat for more). As on Artifact "
    "Registry, a push to a repository never created is refused.",
)
def serve(host: str, port: int, root: Path, repositories: tuple[str, ...]) -> None:
    """Serve templates from ROOT until interrupted (Ctrl-C or SIGTERM)."""
    import logging

    from kfp_spot.registry import CONTEXT_FILE, RegistryServer, RegistryServerError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    named = [_project_repo(r) for r in repositories]
    try:
        server = RegistryServer(root, host=host, port=port)
    except RegistryServerError as exc:
        raise click.ClickException(str(exc)) from exc
    urls = [server.repository_url(project, repo) for project, repo in named]
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with server:
        # The first stdout line is the base URL (scripts read it to learn a port chosen with 0).
        click.echo(f"kfp-spot registry listening on {server.url}")
        if host in ("0.0.0.0", ""):  # every interface: no address another machine can use
            click.echo(
                f"  other machines:  http://{machine_name()}:{server.port}/"
                f"{named[0][0]}/{named[0][1]} "
                "(this machine's name; 0.0.0.0 is no address to connect to)",
                err=True,
            )
        click.echo(
            "".join(f"  repository URL:  {url}\n" for url in urls)
            + f"  state:           {server.root}\n"
            + "".join(f"  not served:      {line}\n" for line in server.store.unserved_folders())
            + f"  RegistryClient:  RegistryClient(host='{urls[0]}', "
            f"config_file='{CONTEXT_FILE}')\n"
            "  Ctrl-C stops it.",
            err=True,
        )
        while not stop.wait(0.5):
            pass
    click.echo("kfp-spot registry stopped", err=True)


@click.command()
@click.argument(
    "run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="RUN_DIR"
)
def report(run_dir: Path) -> None:
    """Write report.png (timeline) and report.md (cost, savings, goodput) into RUN_DIR."""
    from kfp_spot.reports import ReportError, write_report

    click.echo(f"kfp-spot: reading {run_dir} ...", err=True)
    try:
        written = write_report(run_dir)
    except ReportError as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(str(written.png))
    click.echo(str(written.markdown))


COMMANDS: list[click.Command] = [push, pull, tags, registry_group, report]
