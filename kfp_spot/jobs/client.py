"""The one client the launcher talks to the service with.

``google.cloud.aiplatform_v1.JobServiceClient`` on Vertex AI (the regional endpoint
``LOCATION-aiplatform.googleapis.com``, application default credentials) and on the local emulator
(an ``api_endpoint`` written as ``http://127.0.0.1:PORT``: REST transport, anonymous credentials).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from google.api_core import client_options as client_options_lib
from google.api_core import gapic_v1
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1 import JobServiceClient

from kfp_spot.jobs.spec import LaunchInputError
from kfp_spot.version import __version__

USER_AGENT = f"kfp-spot/{__version__}"
ClientT = TypeVar("ClientT", bound=Any)


@dataclass(frozen=True)
class Endpoint:
    """Where the JobService is and how to reach it."""

    api_endpoint: str  # what ClientOptions takes: "host" or "http://host:port"
    base_url: str  # scheme://host[:port] for REST URLs and gcp_resources
    local: bool  # the emulator (plain HTTP, anonymous) rather than Vertex AI

    def resource_uri(self, name: str) -> str:
        """The URI of resource ``name`` as GCPC writes it in gcp_resources."""
        return f"{self.base_url}/v1/{name}"


def resolve_endpoint(location: str, api_endpoint: str = "") -> Endpoint:
    """The service endpoint for ``location``, or the one ``api_endpoint`` names.

    Args:
        location: the Vertex AI region, e.g. ``us-central1``.
        api_endpoint: empty for Vertex AI's regional endpoint; ``http://127.0.0.1:PORT`` for the
            local emulator; a bare host (``europe-west4-aiplatform.googleapis.com``) or
            ``https://host`` for another Vertex endpoint.

    Raises:
        LaunchInputError: when ``api_endpoint`` is not one of those forms.
    """
    if not api_endpoint:
        host = f"{location}-aiplatform.googleapis.com"
        return Endpoint(host, f"https://{host}", local=False)
    text = api_endpoint.strip().rstrip("/")
    if "://" not in text:
        if not text or "/" in text:
            raise LaunchInputError(
                "api_endpoint", f"expected a host or http(s)://host:port, got {api_endpoint!r}"
            )
        return Endpoint(text, f"https://{text}", local=False)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path:
        raise LaunchInputError(
            "api_endpoint",
            f"expected http://HOST:PORT (the emulator) or https://HOST, got {api_endpoint!r}",
        )
    return Endpoint(text, f"{parts.scheme}://{parts.netloc}", local=parts.scheme == "http")


def make_client(client_class: type[ClientT], endpoint: Endpoint) -> ClientT:
    """A GAPIC client of ``client_class`` for ``endpoint`` (REST + anonymous for plain HTTP)."""
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
    return make_client(JobServiceClient, endpoint)
