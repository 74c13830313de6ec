"""A registry call's failures as one line: what the registry said, or why it was not reached.

``kfp.registry.RegistryClient`` lets ``requests`` and ``google.auth`` errors through; their text is
urllib3's (``HTTPConnectionPool(...): Max retries exceeded ... (Caused by ...)``). :func:`call`
turns them into a :class:`RegistryError` naming the host and the cause a user can act on.

The client sends through ``requests``' module-level functions with no timeout, so a server that
takes the connection and never answers (a stuck registry, another service on the port) held
``kfp-spot tags``, ``pull`` and ``push`` forever. :func:`call` gives the requests it makes a
connect and a read timeout (a context variable that a wrapper of ``requests.api.request`` reads:
other requests of the process, and other threads, are left as they were).
"""

from __future__ import annotations

import contextvars
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


CONNECT_TIMEOUT_S = 30.0
"""Seconds to connect to a registry (Artifact Registry answers in well under one)."""
READ_TIMEOUT_S = 120.0
"""Seconds a registry may go without sending a byte of its answer before a call gives up."""

_TIMEOUT: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar(
    "kfp_spot_registry_timeout", default=None
)
_BOUNDED: list[Any] = []  # the wrapper of requests.api.request, once installed


def _bound_requests() -> None:
    """Wrap ``requests.api.request`` (once) to apply :data:`_TIMEOUT` where it is set."""
    if _BOUNDED:
        return
    unbounded = requests.api.request

    def request(method: str, url: str, **kwargs: Any) -> requests.Response:
        timeout = _TIMEOUT.get()
        if timeout is not None:
            kwargs.setdefault("timeout", timeout)
        return unbounded(method, url, **kwargs)

    requests.api.request = request  # type: ignore[assignment]  # its stub: the full signature
    _BOUNDED.append(request)


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
    """Call ``fn``; transport, HTTP and credential failures become one RegistryError.

    Each request ``fn`` sends gives up after :data:`CONNECT_TIMEOUT_S` without a connection or
    :data:`READ_TIMEOUT_S` without a byte of the answer.
    """
    _bound_requests()
    token = _TIMEOUT.set((CONNECT_TIMEOUT_S, READ_TIMEOUT_S))
    try:
        return fn(*args, **kwargs)
    except requests.RequestException as exc:
        raise _describe(registry_host, exc) from exc
    except google.auth.exceptions.GoogleAuthError as exc:
        raise RegistryError(
            f"no usable Google credentials for {registry_host} ({exc}): {AUTH_FIX}"
        ) from exc
    finally:
        _TIMEOUT.reset(token)
