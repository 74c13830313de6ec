"""The REST client of ``kfp-spot jobs`` and ``kfp-spot endpoint``: Vertex AI's ``/v1`` JSON API.

Why not the GAPIC clients: importing any ``google.cloud.aiplatform_v1`` service loads the package's
``__init__``, which imports every service and type (seconds of CPU), while a list or a describe is
one GET. The emulator and Vertex AI speak the same REST API, so these commands send it directly:
anonymous ``requests`` for the emulator's ``http://`` endpoint, google-auth's
``AuthorizedSession`` with application default credentials for Vertex AI. Errors keep the form the
GAPIC clients give them, without the request URL: the status and the service's message, which
names the resource (else the resource is named), one line each.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    import requests

    from kfp_spot.vertex.client import Endpoint

RESOURCE = re.compile(
    r"projects/[a-z0-9][a-z0-9.:-]*/locations/([a-z0-9][a-z0-9-]*)/([A-Za-z]+)/[A-Za-z0-9_-]+"
)
"""A resource's name; Vertex AI's project IDs and numbers, regions and ids fit its parts."""
TIMEOUT_SECONDS = 60.0
FOR_THE_EMULATOR = "; for the emulator, pass --api-endpoint"


def status_name(code: int | None) -> str:
    """``NOT_FOUND`` for 404; the number for a status HTTP does not name."""
    if code is None:
        return "ERROR"
    try:
        return HTTPStatus(code).name
    except ValueError:
        return str(code)


def _error_message(response: requests.Response) -> str:
    """The ``error.message`` of Google's JSON error body, else the body's text on one line."""
    try:
        payload = response.json()
    except ValueError:
        payload = None
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    text = " ".join(response.text.split())
    if text.startswith("<"):  # an HTML error page: not the API, or a proxy in front of it
        return (
            f"{response.reason or 'error'} (an HTML page, not the API's JSON error: is "
            "--api-endpoint a Vertex AI API endpoint or the emulator?)"
        )
    return text[:500] or response.reason


class RestApi:
    """GET/POST on ``{base_url}/v1/...``; every failure a one-line ``click.ClickException``."""

    def __init__(self, endpoint: Endpoint) -> None:
        import requests

        self._base = f"{endpoint.base_url}/v1/"
        session: requests.Session
        if endpoint.local:
            session = requests.Session()
        else:
            from google.auth.transport.requests import AuthorizedSession

            from kfp_spot.vertex import signin

            try:  # refreshed now: offline, one line instead of "no credentials" on the request
                credentials = signin.ready()
            except signin.NoCredentialsError as exc:
                raise click.ClickException(f"{exc}{FOR_THE_EMULATOR}") from None
            except signin.SignInUnreachableError as exc:
                raise click.ClickException(str(exc)) from None
            session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
        from kfp_spot.vertex.client import USER_AGENT

        session.headers["User-Agent"] = USER_AGENT
        self._session = session

    def _send(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        import requests
        from google.auth import exceptions as auth_exceptions

        url = self._base + path
        try:
            response = self._session.request(method, url, timeout=TIMEOUT_SECONDS, **kwargs)
        except requests.exceptions.ConnectionError:
            raise click.ClickException(
                f"cannot reach the API endpoint ({self._base[: -len('/v1/')]}): is it running?"
            ) from None
        except requests.exceptions.Timeout:
            raise click.ClickException(
                f"{path.split('?', 1)[0]}: no answer in {TIMEOUT_SECONDS:.0f} s"
            ) from None
        except auth_exceptions.GoogleAuthError as exc:  # a token that stopped refreshing
            from kfp_spot.vertex import signin

            raise click.ClickException(
                str(signin.failed(exc, f"{signin.AUTH_FIX}{FOR_THE_EMULATOR}"))
            ) from None
        if response.status_code >= 400:
            error = _error_message(response)
            # The resource the error is about, not the request URL with its query string;
            # "endpoints/42:predict": an error that already names endpoints/42 says enough.
            resource = path.split("?", 1)[0]
            if resource.split(":", 1)[0] not in error:
                error = f"{resource}: {error}"
            raise click.ClickException(f"{status_name(response.status_code)}: {error}")
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise click.ClickException(f"{path.split('?', 1)[0]}: the answer is not a JSON object")
        return answer

    def get(self, name: str) -> dict[str, Any]:
        """The resource ``name`` (``projects/P/locations/L/...``) as the API's JSON."""
        return self._send("GET", name)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``path`` (e.g. ``NAME:predict``)."""
        return self._send(
            "POST", path, data=json.dumps(body), headers={"Content-Type": "application/json"}
        )

    def pages(self, collection: str, key: str, filter_: str) -> Iterator[dict[str, Any]]:
        """Every item of a list (``collection`` = ``PARENT/customJobs``), page after page."""
        params: dict[str, str] = {}  # the service's own page size, as the GAPIC client asks
        if filter_:
            params["filter"] = filter_
        while True:
            page = self._send("GET", collection, params=params)
            items = page.get(key, [])
            yield from (item for item in items if isinstance(item, dict))
            token = page.get("nextPageToken")
            if not token:
                return
            params["pageToken"] = str(token)


def text_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``value`` when it is valid Unicode text, else the option's usage error.

    A shell passes an undecodable byte as a lone surrogate, which the HTTP client failed to
    encode with a traceback.
    """
    from kfp_spot.vertex.values import InvalidValueError, check_text

    try:
        check_text(value)
    except InvalidValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def parent_of(project: str, location: str) -> str:
    """``projects/PROJECT/locations/LOCATION``, checked as ``kfp-spot submit`` checks them.

    A bad value exits 2 naming its option, before any request: an empty --project was sent as
    ``projects//locations/...``.
    """
    from kfp_spot.vertex.regions import check_parent
    from kfp_spot.vertex.values import InvalidFieldError

    try:
        return check_parent(project, location)
    except InvalidFieldError as exc:
        raise click.BadParameter(exc.reason, param_hint=f"--{exc.field}") from None


def api_for(location: str, api_endpoint: str, *, location_from: str = "--location") -> RestApi:
    """The REST API at ``api_endpoint`` (default: Vertex AI in ``location``); bad values exit 2.

    ``location`` is checked with an ``api_endpoint`` too (the emulator refuses what Vertex AI
    does). ``location_from`` names where ``location`` came from (``NAME`` when read from a
    resource name).
    """
    from kfp_spot.vertex.client import resolve_endpoint
    from kfp_spot.vertex.regions import check_region
    from kfp_spot.vertex.values import InvalidFieldError, InvalidValueError

    try:
        check_region(location)
    except InvalidValueError as exc:
        raise click.BadParameter(f"location: {exc}", param_hint=location_from) from None
    try:
        return RestApi(resolve_endpoint(location, api_endpoint))
    except InvalidFieldError as exc:
        if exc.field == "location":
            raise click.BadParameter(str(exc), param_hint=location_from) from exc
        raise click.BadParameter(exc.reason, param_hint=f"--{exc.field.replace('_', '-')}") from exc


def resource_location(name: str, collection: str) -> str:
    """The location of ``name``, ``projects/P/locations/L/{collection}/ID``; else a usage error.

    Every part is checked, not only the shape: a ``?`` or ``#`` in the ID would reach the service
    as a query string or be dropped as a URL fragment, and describe another resource.
    """
    match = RESOURCE.fullmatch(name)
    if match is None or match.group(2) != collection:
        raise click.BadParameter(
            f"{name!r} is not projects/PROJECT/locations/LOCATION/{collection}/ID (PROJECT: a "
            "project ID or number; LOCATION: a region such as us-central1; ID: letters, digits, "
            "'-' or '_')",
            param_hint="NAME",
        )
    return match.group(1)


def one_line(text: Any) -> str:
    """``text`` for one field of a line: control characters (a newline, a tab) escaped.

    A display name may hold any text; written raw, one with a newline or a tab broke the
    one-line-per-resource output scripts read.
    """
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(text)
    )


def dig(value: Any, *path: str, default: Any = None) -> Any:
    """``value[path[0]][path[1]]...``, or ``default`` where a field is absent.

    Proto3 JSON omits a field at its default value, so absent means the default.
    """
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return default
        value = value[key]
    return value
