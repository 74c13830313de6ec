"""A registry call's failures as one line: what the registry said, or why it was not reached.

``kfp.registry.RegistryClient`` lets ``requests`` and ``google.auth`` errors through; their text is
urllib3's (``HTTPConnectionPool(...): Max retries exceeded ... (Caused by ...)``). :func:`call`
turns them into a :class:`RegistryError` naming the host and the cause a user can act on.
"""

from __future__ import annotations

import ssl
from typing import Any

import google.auth.exceptions
import requests

from kfp_spot.vertex.signin import AUTH_FIX


class RegistryError(Exception):
    """A registry operation failed; the message names the host and what the registry said.

    ``status`` is the registry's HTTP status, None when it was not reached.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost error under urllib3's wrappers (a refused connection, a DNS or TLS one)."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "reason", None)
        if not isinstance(inner, BaseException):
            first = exc.args[0] if exc.args else None
            inner = first if isinstance(first, BaseException) else None
        inner = inner or exc.__cause__ or exc.__context__
        if inner is None:
            break
        exc = inner
    return exc


def _unreachable(host: str, exc: requests.RequestException) -> RegistryError:
    cause = _root_cause(exc)
    reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
    hint = ""
    if isinstance(cause, ConnectionRefusedError):
        hint = " (no server listens there: is `kfp-spot registry serve` running on that port?)"
    elif isinstance(cause, ssl.SSLError) and host.startswith("https://"):
        hint = (
            " (no https server answered there; a local `kfp-spot registry serve` speaks "
            f"http: http{host[5:]})"
        )
    elif isinstance(exc, requests.Timeout):
        hint = " (the registry did not answer in time)"
    return RegistryError(f"cannot reach the registry at {host}: {reason}{hint}")


def _describe(host: str, exc: requests.RequestException) -> RegistryError:
    response = getattr(exc, "response", None)
    if response is None:
        return _unreachable(host, exc)
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        text = " ".join(response.text.split())  # one line, whatever the body holds
        if text.startswith("<"):  # an HTML error page: not a registry, or a proxy in front
            text = f"{response.reason} (an HTML page, not a registry's answer)"
        message = text[:500] or response.reason
    return RegistryError(
        f"registry {host} answered {response.status_code} to {response.request.method} "
        f"{response.url}: {message}",
        response.status_code,
    )


def call(registry_host: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; transport, HTTP and credential failures become one RegistryError."""
    try:
        return fn(*args, **kwargs)
    except requests.RequestException as exc:
        raise _describe(registry_host, exc) from exc
    except google.auth.exceptions.GoogleAuthError as exc:
        raise RegistryError(
            f"no usable Google credentials for {registry_host} ({exc}): {AUTH_FIX}"
        ) from exc
