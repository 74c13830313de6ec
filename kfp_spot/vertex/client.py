"""The GAPIC clients kfp-spot talks to the service with (:func:`make_client`).

``google.cloud.aiplatform_v1.JobServiceClient`` for the launcher (and the Model, Endpoint and
Prediction clients for ``deploy_spot_endpoint``) on Vertex AI (the regional endpoint
``LOCATION-aiplatform.googleapis.com``, application default credentials) and on the local emulator
(an ``api_endpoint`` written as ``http://127.0.0.1:PORT``: REST transport, anonymous credentials).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

from kfp_spot.version import __version__
from kfp_spot.vertex import custom_job, regions, values

USER_AGENT = f"kfp-spot/{__version__}"
ENDPOINT_FORM = (
    "http://HOST:PORT for the local emulator, or HOST[:PORT] / https://HOST[:PORT] for a "
    "Vertex AI endpoint (e.g. europe-west4-aiplatform.googleapis.com)"
)
# A DNS name: dot-separated labels of letters, digits and inner hyphens, 1-63 characters each.
_HOSTNAME = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)(?:\.(?!-)[a-z0-9-]{1,63}(?<!-))*")
ClientT = TypeVar("ClientT")

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient


@dataclass(frozen=True)
class Endpoint:
    """Where the JobService is and how to reach it."""

    api_endpoint: str  # what ClientOptions takes: "host[:port]" or "http://host:port"
    base_url: str  # scheme://host[:port] for REST URLs and gcp_resources
    local: bool  # the emulator (plain HTTP, anonymous) rather than Vertex AI

    @property
    def target(self) -> custom_job.Target:
        """Whose rules a job sent here must pass (the rules module's view of this endpoint)."""
        return custom_job.EMULATOR if self.local else custom_job.VERTEX_AI

    def resource_uri(self, name: str) -> str:
        """The URI of resource ``name`` as GCPC writes it in gcp_resources."""
        return f"{self.base_url}/v1/{name}"


def _bad(api_endpoint: str, why: str) -> values.InvalidFieldError:
    return values.InvalidFieldError(
        "api_endpoint", f"{values.show(api_endpoint)} {why}; expected {ENDPOINT_FORM}"
    )


def _host_and_port(api_endpoint: str, netloc: str) -> str:
    """``netloc`` checked (host name or IP address, optional port 1-65535) and normalised."""
    try:
        parts = urlsplit(f"//{netloc}")
    except ValueError:  # an unbalanced '[' of an IPv6 address
        raise _bad(api_endpoint, "has a malformed [IPv6] host") from None
    if parts.username is not None or parts.password is not None:
        raise _bad(api_endpoint, "carries credentials (user@); give the host alone")
    host = parts.hostname or ""
    if not host:
        raise _bad(api_endpoint, "has no host")
    try:
        port = parts.port
    except ValueError:
        raise _bad(api_endpoint, "has a port that is not a number from 1 to 65535") from None
    if netloc.endswith(":") or port == 0:
        raise _bad(api_endpoint, "has an empty or zero port (give 1 to 65535)")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if len(host) > 253 or _HOSTNAME.fullmatch(host) is None:
            raise _bad(api_endpoint, f"has {values.show(host)}, which is not a host name") from None
        shown = host
    else:
        shown = f"[{address}]" if address.version == 6 else str(address)
    return shown if port is None else f"{shown}:{port}"


def _qualified(host: str) -> bool:
    """Whether a bare ``host[:port]`` names a server: a dotted domain, an IP address or a port."""
    if host.startswith("["):  # an IPv6 address
        return True
    name, _, port = host.partition(":")
    return "." in name or bool(port)


def resolve_endpoint(location: str, api_endpoint: str = "") -> Endpoint:
    """The service endpoint for ``location``, or the one ``api_endpoint`` names.

    Args:
        location: the Vertex AI region, e.g. ``us-central1``.
        api_endpoint: empty for Vertex AI's regional endpoint; ``http://127.0.0.1:PORT`` for the
            local emulator; a bare ``host[:port]`` (``europe-west4-aiplatform.googleapis.com``) or
            ``https://host[:port]`` for another Vertex endpoint. Scheme, host and port are checked;
            a path, query, credentials or whitespace are refused.

    Raises:
        InvalidFieldError: naming ``location`` or ``api_endpoint`` and the valid form.
    """
    if not api_endpoint:
        try:
            regions.check_region(location)
        except values.InvalidValueError as exc:
            raise values.InvalidFieldError("location", str(exc)) from None
        host = f"{location}-aiplatform.googleapis.com"
        return Endpoint(host, f"https://{host}", local=False)
    if not isinstance(api_endpoint, str) or any(c.isspace() for c in api_endpoint):
        raise _bad(api_endpoint, "contains whitespace or is not text")
    scheme, sep, rest = api_endpoint.partition("://")
    if not sep:
        scheme, rest = "", api_endpoint
    rest = rest[:-1] if rest.endswith("/") else rest  # one trailing slash is harmless
    if not sep:
        if "/" in rest or "?" in rest or "#" in rest:
            raise _bad(api_endpoint, "has a path; give the host alone")
        host = _host_and_port(api_endpoint, rest)
        if not _qualified(host):  # `notaurl`: a typo or a word, sent as https://notaurl
            raise _bad(api_endpoint, "is neither a URL nor a domain name or IP address")
        return Endpoint(host, f"https://{host}", local=False)
    if scheme not in ("http", "https"):
        raise _bad(api_endpoint, f"has scheme {values.show(scheme)}; use http or https")
    if "/" in rest or "?" in rest or "#" in rest:
        raise _bad(api_endpoint, "has a path, query or fragment; give scheme://HOST:PORT only")
    host = _host_and_port(api_endpoint, rest)
    if scheme == "http":
        return Endpoint(f"http://{host}", f"http://{host}", local=True)
    return Endpoint(host, f"https://{host}", local=False)


def is_emulator_endpoint(api_endpoint: str) -> bool:
    """Whether ``api_endpoint`` is the local emulator's (no location needed to tell).

    Raises:
        InvalidFieldError: naming ``api_endpoint`` when it is malformed.
    """
    return bool(api_endpoint) and resolve_endpoint("", api_endpoint).local


VERTEX_MIN_POLL_SECONDS = 5.0
"""The shortest fixed poll interval a component takes against Vertex AI: the Vertex AI SDK's own
first wait on a job. Every poll is a read counted against the project's quota of resource
management requests (600 a minute per region by default), which every pipeline there shares: at
5 s one wait makes 12 a minute."""


def check_poll_interval(seconds: float, api_endpoint: str) -> float:
    """``seconds``, checked as a component's ``poll_interval_seconds`` for ``api_endpoint``.

    0 means the component's own schedule; against the local emulator any interval goes, against
    Vertex AI at least :data:`VERTEX_MIN_POLL_SECONDS`.

    Raises:
        InvalidFieldError: naming ``poll_interval_seconds`` for a shorter one against Vertex AI
            (or naming ``api_endpoint`` when it is malformed).
    """
    if 0 < seconds < VERTEX_MIN_POLL_SECONDS and not is_emulator_endpoint(api_endpoint):
        raise values.InvalidFieldError(
            "poll_interval_seconds",
            f"{seconds:g} s is too often against Vertex AI: give 0 (a gentle schedule of its own) "
            f"or at least {VERTEX_MIN_POLL_SECONDS:g} s; every poll is a read counted against the "
            "project's quota of 600 resource management requests a minute in the region",
        )
    return seconds


def make_client(client_class: Callable[..., ClientT], endpoint: Endpoint) -> ClientT:
    """A GAPIC client of ``client_class`` for ``endpoint`` (REST + anonymous for plain HTTP).

    ``client_class`` is any ``google.cloud.aiplatform_v1`` service client, e.g.
    ``JobServiceClient`` or ``EndpointServiceClient``. google.api_core's client machinery loads
    here, when a client is made, not when this module is imported.
    """
    from google.api_core import client_options as client_options_lib
    from google.api_core import gapic_v1
    from google.auth.credentials import AnonymousCredentials

    options = client_options_lib.ClientOptions(api_endpoint=endpoint.api_endpoint)
    info = gapic_v1.client_info.ClientInfo(user_agent=USER_AGENT)
    if endpoint.local:
        return client_class(
            client_options=options,
            client_info=info,
            transport="rest",
            credentials=AnonymousCredentials(),
        )
    return client_class(client_options=options, client_info=info)


def make_job_client(endpoint: Endpoint) -> JobServiceClient:
    """A JobServiceClient for ``endpoint`` (REST + anonymous credentials for plain HTTP)."""
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient

    return make_client(JobServiceClient, endpoint)
