"""Which registry a host is, and the ``kfp.registry.RegistryClient`` that reaches it.

Artifact Registry (``https://LOCATION-kfp.pkg.dev/PROJECT/REPO``) gets the client's own context
and Google credentials; any other host, the local registry's URL templates
(``kfp_spot/registry/context.json``). Every host and config file is checked before a client is
made, so a mistake is one line naming it.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kfp_spot.registry.server import CONTEXT_FILE
from kfp_spot.registry.store import (
    VERSION_PREFIX,
    RegistryStoreError,
    check_id,
    check_project,
    check_repository,
    check_tag,
    check_version,
)
from kfp_spot.registry.transport import call
from kfp_spot.version import artifact_registry_format
from kfp_spot.vertex.values import check_nesting, loads_unique_keys, show

# The same pattern kfp.registry uses to recognise Artifact Registry's KFP hosts.
_AR_HOST_RE = re.compile(r"https://[a-z0-9-]+-kfp\.pkg\.dev/[^/\s]+/[^/\s]+")
_HOST_RE = re.compile(r"https?://[^/\s?#]+/[^/\s?#]+/[^/\s?#]+", re.IGNORECASE)


def is_artifact_registry(host: str) -> bool:
    """Whether ``host`` is an Artifact Registry KFP repository URL."""
    return _AR_HOST_RE.fullmatch(host.rstrip("/")) is not None


def check_host(host: str) -> str:
    """Validate a registry host (``http(s)://SERVER/PROJECT/REPO``); returns it normalised.

    The scheme and server are lowercased (they are case-insensitive; ``kfp.registry`` and
    :func:`is_artifact_registry` match Artifact Registry's hosts in lowercase) and a trailing
    slash is dropped.

    Raises:
        ValueError: naming the host and the expected form: a query or fragment (the client
            appends ``/PACKAGE/TAG`` to the URL), Artifact Registry over plain ``http``, or a
            PROJECT or REPO Artifact Registry would refuse (a project ID, a repository ID), or
            a user name or password in it (the message does not repeat them).
    """
    stripped = (host or "").rstrip("/")
    _refuse_userinfo(stripped)
    if _HOST_RE.fullmatch(stripped) is None:
        if "?" in stripped or "#" in stripped:
            raise ValueError(
                f"invalid registry host {host!r}: a repository URL has no query or fragment "
                "(the client appends /PACKAGE/TAG to it); give http(s)://SERVER/PROJECT/REPO"
            )
        raise ValueError(
            f"invalid registry host {host!r}: expected https://LOCATION-kfp.pkg.dev/PROJECT/REPO "
            "or http://127.0.0.1:PORT/PROJECT/REPO (a local `kfp-spot registry serve`)"
        )
    scheme, _, rest = stripped.partition("://")
    server, _, path = rest.partition("/")
    normalised = f"{scheme.lower()}://{server.lower()}/{path}"
    _check_server(host, normalised)
    _refuse_other_formats(host, normalised)
    if normalised.startswith("http://") and is_artifact_registry(f"https{normalised[4:]}"):
        raise ValueError(
            f"invalid registry host {host!r}: Artifact Registry takes https only (a template "
            f"and credentials are never sent in clear text); use https{normalised[4:]}"
        )
    project, _, repo = path.partition("/")
    try:
        check_project(project)
        check_repository(repo)
    except RegistryStoreError as exc:
        # Artifact Registry has no such repository, and the local registry takes none either.
        raise ValueError(f"invalid registry host {host!r}: {exc.message}") from None
    return normalised


def template_url_refusal(text: str) -> str | None:
    """What to say of a template's registry URL given where a file is taken; None: no URL.

    The Vertex AI SDK takes ``https://LOCATION-kfp.pkg.dev/PROJECT/REPO/PACKAGE/TAG`` for a run;
    ``kfp-spot run --template``, ``submit`` and their Python calls check a file before anything
    is sent, so the URL is told the ``kfp-spot pull`` that fetches it (or what a pull would
    refuse of its host).
    """
    if not text.lower().startswith(("http://", "https://")):
        return None
    scheme, _, rest = text.rstrip("/").partition("://")
    parts = rest.split("/")
    if len(parts) != 5:  # SERVER/PROJECT/REPO/PACKAGE/TAG (or sha256: version)
        return (
            f"{show(text)} is a URL, not a file: pull the template first with `kfp-spot pull "
            "PACKAGE --host REPOSITORY_URL --tag TAG`, then the file"
        )
    host = f"{scheme}://{'/'.join(parts[:3])}"
    try:  # a pull from a repository no registry can hold would fail too
        check_host(host)
    except ValueError as exc:
        return f"{show(text)} is a URL, not a file, and {exc}"
    package, ref = parts[3], parts[4]
    which = "--version" if ref.startswith(VERSION_PREFIX) else "--tag"
    try:  # the pull told would refuse a version that is no sha256 digest
        check_id("package", package)
        (check_version if which == "--version" else check_tag)(ref)
    except RegistryStoreError as exc:
        return f"{show(text)} is a URL, not a file, and not a template's: {exc.message}"
    return (
        f"{show(text)} is a URL, not a file: pull the template first with `kfp-spot pull {package} "
        f"--host {host} {which} {ref} -o {package}.yaml`, then give {package}.yaml"
    )


def _refuse_userinfo(url: str) -> None:
    """Refuse ``USER:PASSWORD@`` in a repository URL, without repeating it.

    Artifact Registry signs requests with Google credentials and the local registry takes none:
    credentials in the URL went to the server as HTTP basic auth (in clear text over ``http``),
    and into every error message and log line that named the host.
    """
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return
    shown = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    raise ValueError(
        f"invalid registry host {shown!r} with a user name or password before its server: a "
        "repository URL carries none (Artifact Registry signs in with Google credentials, "
        "`gcloud auth application-default login`; the local registry needs none); give it "
        "without 'USER@'"
    )


def _refuse_other_formats(host: str, url: str) -> None:
    """Refuse an Artifact Registry host of another repository format (Docker images, Python).

    ``us-docker.pkg.dev`` or ``us-central1-python.pkg.dev`` serve no pipeline templates: it was
    taken for a registry of some other kind, and a pull or push failed at the first request
    (not found, or a page of HTML) after the credentials were sent there.
    """
    server = urlsplit(url).hostname or ""
    kind = artifact_registry_format(server)
    if kind in (None, "kfp"):
        return
    kind = kind or server.removesuffix(".pkg.dev")  # a name of no LOCATION-FORMAT form
    raise ValueError(
        f"invalid registry host {host!r}: {server} is Artifact Registry's host of {kind} "
        "repositories, which hold no pipeline templates; a Kubeflow Pipelines repository is "
        "https://LOCATION-kfp.pkg.dev/PROJECT/REPO"
    )


def _check_server(host: str, url: str) -> None:
    """Refuse a server no request can reach: no name, or a port that is no TCP port.

    Port 99999 was "cannot reach the registry ...: Failed to parse" from the request, exit 1,
    as if the registry were down.
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # out of range, or not a number
        port = 0
    if port == 0:
        raise ValueError(
            f"invalid registry host {host!r}: its port is not a number from 1 to 65535"
        )
    if not parts.hostname:
        raise ValueError(f"invalid registry host {host!r}: it names no server")


def registry_client(
    host: str, *, config_file: str | None = None, auth: Any = None
) -> Any:  # kfp.registry.RegistryClient (kfp is imported lazily: runtime code stays kfp-free)
    """A ``kfp.registry.RegistryClient`` for ``host``.

    Args:
        host: the repository URL.
        config_file: a RegistryClient config file; default: none for Artifact Registry (the
            client's own context), ``kfp_spot/registry/context.json`` for any other host.
        auth: passed to the client; None uses Google default credentials on Artifact Registry and
            nothing elsewhere.

    Returns:
        The client.
    """
    from kfp.registry import RegistryClient

    host = check_host(host)
    if config_file is None and not is_artifact_registry(host):
        config_file = CONTEXT_FILE
    else:
        _check_config_file(config_file)
    # Artifact Registry hosts load Google default credentials here.
    return call(host, RegistryClient, host, auth=auth, config_file=config_file)


def _check_config_file(config_file: str | None) -> None:
    """Refuse a config file RegistryClient would fail on with a bare JSON error or a traceback.

    The client reads it as a JSON object of URL templates (strings it fills in with
    ``str.format_map``); anything else surfaced as ``Expecting value: line 1 column 1`` (no file
    named) or an ``AttributeError`` deep inside ``kfp.registry``.

    Raises:
        ValueError: naming the file and what is wrong with it.
    """
    if config_file is None:
        return
    try:
        mode = os.stat(config_file).st_mode
    except OSError as exc:
        raise ValueError(f"invalid config file {config_file}: cannot read it ({exc})") from exc
    if not stat.S_ISREG(mode):  # a FIFO or a device (/dev/zero): reading it hung the command
        raise ValueError(
            f"invalid config file {config_file}: not a regular file; give a JSON file of "
            f"RegistryClient URL templates such as {CONTEXT_FILE}"
        )
    try:
        text = Path(config_file).read_text(encoding="utf-8")
        check_nesting(text, limit=2)  # [[[[...: json's RecursionError otherwise
        data = loads_unique_keys(text)  # a template given twice: the last would win silently
    except OSError as exc:
        raise ValueError(f"invalid config file {config_file}: cannot read it ({exc})") from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError; too deep, a key twice
        not_json = isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError))
        raise ValueError(
            f"invalid config file {config_file}: {f'not JSON ({exc})' if not_json else exc}; "
            f"expected an object of RegistryClient URL templates such as {CONTEXT_FILE}"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(
            f"invalid config file {config_file}: expected a JSON object of RegistryClient URL "
            f"templates (as in {CONTEXT_FILE}), not a {type(data).__name__}"
        )
    for key, value in data.items():
        if not isinstance(value, str):
            raise ValueError(
                f"invalid config file {config_file}: {key!r} must be a string (a URL template "
                f"such as '{{host}}/{{package_name}}/{{tag}}'), not {json.dumps(value)}"
            )
