"""Push, pull and list pipeline templates with ``kfp.registry.RegistryClient``.

One code path for Artifact Registry (``https://LOCATION-kfp.pkg.dev/PROJECT/REPO``, Google
credentials from the environment) and the local registry (``http://HOST:PORT/PROJECT/REPO``, no
credentials, reached through the config file ``kfp_spot/registry/context.json``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kfp_spot.registry.hosts import check_host, is_artifact_registry, registry_client
from kfp_spot.registry.store import (
    MAX_TEMPLATE_BYTES,
    VERSION_PREFIX,
    RegistryStoreError,
    check_id,
    check_tag,
    check_version,
)
from kfp_spot.registry.transport import RegistryError, call


@dataclass(frozen=True)
class PushResult:
    """What :func:`push` stored."""

    package: str
    version: str  # sha256:<hex>
    tags: tuple[str, ...]
    moved: tuple[tuple[str, str], ...] = ()
    """Each tag but ``latest`` that named another version before: (tag, that sha256 version)."""


@dataclass(frozen=True)
class TagInfo:
    """One tag of a package and the version it points at."""

    tag: str
    version: str  # sha256:<hex>


def push(
    template_path: str | Path,
    host: str,
    version: str | None = None,
    tags: str | Sequence[str] | None = None,
    *,
    config_file: str | None = None,
    auth: Any = None,
    progress: Callable[[str], None] | None = None,
) -> PushResult:
    """Upload a compiled pipeline template, tagged ``latest`` (and ``version`` when given).

    Args:
        template_path: the compiled pipeline YAML.
        host: the repository URL.
        version: the pipeline's own version (for example ``1.2.0``), a tag beside ``latest``;
            None sets no version tag (the upload is still named by its ``sha256:`` version).
        tags: the tags to set beside ``version`` (one text is one tag); default
            ``(version, "latest")``, or ``("latest",)`` without a version.
        config_file: see :func:`registry_client`.
        auth: see :func:`registry_client`.
        progress: told ``uploading TEMPLATE to HOST ...`` once every argument is checked.

    Returns:
        The package name (the template's pipeline name), its ``sha256:`` version and the tags.

    Raises:
        FileNotFoundError: when the template does not exist.
        ValueError: for an invalid host, version or tag, a template larger than the local
            registry takes, or a template a run could not start from (:func:`check_template`:
            the upload would move ``latest`` to it).
        RegistryError: when the registry refuses the upload or cannot be reached.
    """
    path = Path(template_path)
    if not path.exists():
        raise FileNotFoundError(f"template {path} does not exist (compile it first)")
    size = path.stat().st_size  # a directory is refused by check_template, naming it
    if path.is_file() and size > MAX_TEMPLATE_BYTES and not is_artifact_registry(check_host(host)):
        # Said before the template is read: parsing tens of MB of YAML takes minutes, then
        # the local registry refused the upload with 413.
        raise ValueError(
            f"template {path} is {size} bytes; the local registry takes templates of at most "
            f"{MAX_TEMPLATE_BYTES} bytes"
        )
    tag_list = push_tags(version, tags)
    package = check_template(path)
    client = registry_client(host, config_file=config_file, auth=auth)
    if progress is not None:
        progress(f"uploading {path} to {check_host(host)} ...")
    before = _tag_versions(host, client, package) if set(tag_list) - {"latest"} else {}
    package, digest = call(host, client.upload_pipeline, str(path), tags=list(tag_list))
    moved = tuple(
        (tag, before[tag])
        for tag in tag_list
        if tag != "latest" and before.get(tag, digest) != digest
    )
    return PushResult(package, digest, tag_list, moved)


def push_tags(
    version: str | None = None, tags: str | Sequence[str] | None = None
) -> tuple[str, ...]:
    """The tags :func:`push` sets, each checked: ``version`` and ``tags``, else ``latest``.

    ``tags`` given as one text is one tag, as ``kfp.registry.RegistryClient.upload_pipeline``
    takes it (never its letters, each a tag of its own). ``version`` is always one of the tags,
    as ``kfp-spot push --version V --tag T`` sets V, ``latest`` and T: it was dropped when
    ``tags`` came with it.

    Raises:
        ValueError: naming the first tag (or the version) a registry would refuse.
    """
    if isinstance(tags, str):
        tag_list: tuple[str, ...] = (tags,)
    elif tags is None:
        tag_list = ("latest",) if version is None else (version, "latest")
    elif isinstance(tags, Sequence):
        tag_list = tuple(tags)
    else:
        raise ValueError(f"invalid tags {tags!r}: give a list of tags, e.g. ['1.2.0', 'latest']")
    if version is not None and version not in tag_list:
        tag_list = (version, *tag_list)
    for tag in tag_list:
        _check_tag_arg(tag)
    return tag_list


def _tag_versions(host: str, client: Any, package: str) -> dict[str, str]:
    """Tag -> sha256 version of ``package`` before an upload; {} when none or not listable.

    A release's tag (``1.2.0``) moves as ``latest`` does when an upload claims it, in Artifact
    Registry as here; :func:`push` reports it, as the listing tells, and never stops for it.
    """
    try:
        rows = call(host, client.list_tags, package)
    except RegistryError:  # no such package yet (404), or a listing the caller may not make
        return {}
    return {row.tag: row.version for row in _tag_infos(rows)}


def _tag_infos(rows: Any) -> list[TagInfo]:
    """RegistryClient's tag rows (``name`` .../tags/TAG, ``version`` .../versions/sha256:...)."""
    return [
        TagInfo(
            str(row.get("name", "")).rsplit("/tags/", 1)[-1],
            str(row.get("version", "")).rsplit("/versions/", 1)[-1],
        )
        for row in rows or []
    ]


def check_template(template_path: str | Path) -> str:
    """Refuse what is not a compiled pipeline a run could start from, before it is uploaded.

    :func:`push` (and so ``kfp-spot push``) runs it first: a push moves ``latest``, and a
    template holding a reference to nothing (:mod:`kfp_spot.vertex.template_refs`), which a
    registry takes, would replace the good one everyone pulls by default; a file that is not
    YAML, not a compiled spec or without a pipeline name (the package it is filed under) is one
    line, not a traceback.

    Returns:
        The template's pipeline name, the package a registry files it under.

    Raises:
        ValueError: (``SubmissionError``) naming the template and what is wrong with it.
    """
    from kfp_spot.vertex.pipeline_job import read_template
    from kfp_spot.vertex.template_refs import pipeline_name

    name = pipeline_name(read_template(template_path))
    if not name:
        raise ValueError(
            f"template {template_path}: has no pipelineInfo.name, the package a registry files "
            "it under (`kfp-spot compile` writes it)"
        )
    return name


def _check_tag_arg(tag: str) -> None:
    try:
        check_tag(tag)
    except RegistryStoreError as exc:
        several = isinstance(tag, str) and "," in tag and all(p.strip() for p in tag.split(","))
        hint = "; give each tag on its own (`--tag a --tag b`)" if several else ""
        raise ValueError(exc.message + hint) from exc


def pull(
    host: str,
    package: str,
    *,
    tag: str | None = None,
    version: str | None = None,
    output: str | Path | None = None,
    config_file: str | None = None,
    auth: Any = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Download a template by tag (default ``latest``) or by ``sha256:`` version.

    Args:
        host: the repository URL.
        package: the package (pipeline) name.
        tag: the tag to download; ignored when ``version`` is given.
        version: the ``sha256:<hex>`` version to download.
        output: where to write it; default ``<package>_<tag or hex>.yaml`` in the current folder.
        config_file: see :func:`registry_client`.
        auth: see :func:`registry_client`.
        progress: told ``downloading PACKAGE from HOST ...`` once every argument is checked.

    Returns:
        The path written (bytes exactly as uploaded).

    Raises:
        ValueError: for an invalid host, package, tag, version or config file, or an output
            that is no path, a directory or cannot be written.
        RegistryError: when the registry has no such template or cannot be reached.
    """
    try:
        check_id("package", package)
    except RegistryStoreError as exc:
        raise ValueError(exc.message) from exc
    if version is not None:
        try:
            check_version(version)
        except RegistryStoreError as exc:
            raise ValueError(exc.message) from exc
        tag = None
    else:
        tag = tag or "latest"
        _check_tag_arg(tag)
    default_name = f"{package}_{version[len(VERSION_PREFIX) :] if version else tag}.yaml"
    if output is not None and not isinstance(output, (str, os.PathLike)):
        raise ValueError(
            f"invalid output {output!r} ({type(output).__name__}): give the file to write as a "
            f"path, e.g. {default_name!r}"
        )
    output = Path(default_name if output is None else output)
    if output.is_dir():
        raise ValueError(
            f"invalid output {str(output)!r}: it is a directory; give the file to write, "
            f"e.g. {str(output / default_name)!r}"
        )
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(
            f"invalid output {str(output)!r}: cannot create its folder ({exc.strerror}: "
            f"{exc.filename})"
        ) from exc
    client = registry_client(host, config_file=config_file, auth=auth)
    if progress is not None:
        progress(f"downloading {package} from {host} ...")
    # Download next to the file and rename it into place: a failed pull never leaves a partial
    # template. A symlink keeps pointing where it did (its target is replaced), and a stream
    # (a FIFO, /dev/stdout) is written to: renaming over it would put a file in its place.
    stream = output.exists() and not output.is_file()
    final = Path(os.path.realpath(output))
    with tempfile.TemporaryDirectory() as scratch:
        partial = (Path(scratch) if stream else final.parent) / f".{final.name}.partial"
        try:
            call(
                host,
                client.download_pipeline,
                package,
                version=version,
                tag=tag,
                file_name=str(partial),
            )
            _refuse_a_web_page(host, package, partial)
            if stream:
                with open(output, "wb") as sink:
                    sink.write(partial.read_bytes())
            else:
                partial.replace(final)
        except RegistryError as exc:
            raise _with_names(host, client, exc, package, tag) from exc
        except OSError as exc:  # not the registry's: call turns its failures into RegistryError
            raise ValueError(
                f"invalid output {str(output)!r}: cannot write it ({exc.strerror}: {exc.filename})"
            ) from exc
        finally:
            partial.unlink(missing_ok=True)
    return output


def _refuse_a_web_page(host: str, package: str, downloaded: Path) -> None:
    """Refuse a download that is a web page: a proxy's or a sign-in page in front of the host.

    KFP's client writes whatever a 200 answer holds; such a page became the "template", found
    out only when a run or submit read it. A compiled template is YAML, which never starts
    with ``<``.
    """
    with open(downloaded, "rb") as head:
        start = head.read(512).lstrip()
    if start.startswith(b"<"):
        raise RegistryError(
            f"registry {host} answered the download of {package} with a web page, not a "
            "template (a proxy or sign-in page in front of it?); nothing was written"
        )


def list_tags(
    host: str, package: str, *, config_file: str | None = None, auth: Any = None
) -> list[TagInfo]:
    """The tags of ``package``, sorted by name, with the ``sha256:`` version each points at.

    Raises:
        ValueError: for an invalid host or package name (checked before any request, as
            :func:`pull` does).
        RegistryError: when the registry has no such package or cannot be reached.
    """
    try:
        check_id("package", package)
    except RegistryStoreError as exc:
        raise ValueError(exc.message) from exc
    client = registry_client(host, config_file=config_file, auth=auth)
    try:
        rows = call(host, client.list_tags, package)
    except RegistryError as exc:
        raise _with_names(host, client, exc, package, None) from exc
    return sorted(_tag_infos(rows), key=lambda t: t.tag)


def list_untagged(
    host: str,
    package: str,
    *,
    config_file: str | None = None,
    auth: Any = None,
    tags: Sequence[TagInfo] | None = None,
) -> list[tuple[str, str]]:
    """The versions of ``package`` no tag names, oldest first: (``sha256:`` version, upload time).

    An upload pushed without a version tag is named by its digest alone once ``latest`` moves
    on; :func:`list_tags` no longer shows it, this does. ``tags``: what :func:`list_tags` just
    answered, when the caller has it (the registry is then asked once for the tags, not twice).

    Raises:
        ValueError: for an invalid host or package name.
        RegistryError: when the registry has no such package or cannot be reached.
    """
    if tags is None:
        tags = list_tags(host, package, config_file=config_file, auth=auth)
    tagged = {t.version for t in tags}
    client = registry_client(host, config_file=config_file, auth=auth)
    rows = [
        (str(row.get("name", "")).rsplit("/versions/", 1)[-1], str(row.get("createTime", "")))
        for row in call(host, client.list_versions, package) or []
    ]
    return sorted(((v, t) for v, t in rows if v not in tagged), key=lambda row: (row[1], row[0]))


def _names(rows: Any, kind: str) -> list[str]:
    return sorted(str(row.get("name", "")).rsplit(f"/{kind}/", 1)[-1] for row in rows or [])


def _with_names(
    host: str, client: Any, exc: RegistryError, package: str, tag: str | None
) -> RegistryError:
    """A registry's 404 for ``package`` or its ``tag``, with the names it does hold.

    A pipeline is filed under its compiled name (``Fraud Model`` becomes ``fraud-model``) and
    tags are matched case by case, so a near miss is the common 404; the names the repository
    holds show it at once. Anything else, or a listing that fails, keeps the error as it was.
    """
    if exc.status != 404:
        return exc
    try:
        packages = _names(call(host, client.list_packages), "packages")
        if package in packages:
            if tag is None:
                return exc
            found, held, kind = tag, _names(call(host, client.list_tags, package), "tags"), "tags"
        else:
            found, held, kind = package, packages, "packages"
    except RegistryError:
        return exc
    if found in held:
        return exc
    shown = ", ".join(held[:20]) + (f", ... ({len(held)} in all)" if len(held) > 20 else "")
    owner = f"{package}'s" if kind == "tags" else "the repository's"
    return RegistryError(f"{exc}; {owner} {kind}: {shown or 'none'}", exc.status)


def list_packages(host: str, *, config_file: str | None = None, auth: Any = None) -> list[str]:
    """The package (pipeline) names in the repository, sorted."""
    client = registry_client(host, config_file=config_file, auth=auth)
    return _names(call(host, client.list_packages), "packages")
