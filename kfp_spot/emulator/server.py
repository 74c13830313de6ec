"""HTTP front of the emulator: the CustomJob REST surface of Vertex AI ``v1`` plus extensions.

Routes (``{name}`` is ``projects/P/locations/L/customJobs/ID``):

- ``POST /v1/projects/P/locations/L/customJobs``: create; answers the CustomJob
- ``GET /v1/projects/P/locations/L/customJobs``: list (``filter``, ``pageSize``, ``pageToken``)
- ``GET /v1/{name}``, ``POST /v1/{name}:cancel``, ``DELETE /v1/{name}``
- ``POST /emulator/v1/{name}:preempt``: preempt the running attempt of a Spot job
- ``GET /emulator/v1/{name}/attempts``: the billing ledger, ``{"attempts": [...]}``
- ``GET /emulator/v1/{name}/logs``: replica logs (``attempt``, ``replica``, ``tail``)
- ``GET /emulator/v1/customJobs``: every job of every project (name, state, displayName)
- ``GET /emulator/v1/health``: ``{"status": "ok"}``

Bodies and answers are protobuf JSON (camelCase); enums are answered as names unless the client
asks for ``$alt=json;enum-encoding=int`` as the GAPIC REST transport does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from google.cloud.aiplatform_v1.types import ListCustomJobsResponse
from google.protobuf import json_format

from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.jobs import JobService

log = logging.getLogger(__name__)

MAX_BODY = 16 * 1024 * 1024
# Answers (status, payload, headers) for the paths it serves, None for others (serving APIs).
RouteHook = Callable[[str, str, "bytes | None", Mapping[str, str]], "tuple[int, Any, dict] | None"]
_PARENT = r"projects/[^/]+/locations/[^/]+"
_JOB = _PARENT + r"/customJobs/[^/:]+"
ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("POST", re.compile(rf"^/v1(?:beta1)?/(?P<parent>{_PARENT})/customJobs$"), "create"),
    ("GET", re.compile(rf"^/v1(?:beta1)?/(?P<parent>{_PARENT})/customJobs$"), "list"),
    ("GET", re.compile(rf"^/v1(?:beta1)?/(?P<name>{_JOB})$"), "get"),
    ("POST", re.compile(rf"^/v1(?:beta1)?/(?P<name>{_JOB}):cancel$"), "cancel"),
    ("DELETE", re.compile(rf"^/v1(?:beta1)?/(?P<name>{_JOB})$"), "delete"),
    ("POST", re.compile(rf"^/emulator/v1/(?P<name>{_JOB}):preempt$"), "preempt"),
    ("GET", re.compile(rf"^/emulator/v1/(?P<name>{_JOB})/attempts$"), "attempts"),
    ("GET", re.compile(rf"^/emulator/v1/(?P<name>{_JOB})/logs$"), "logs"),
    ("GET", re.compile(r"^/emulator/v1/customJobs$"), "all"),
    ("GET", re.compile(r"^/emulator/v1/health$"), "health"),
]


def _int_param(query: dict[str, list[str]], key: str, default: int = 0) -> int:
    values = query.get(key)
    if not values:
        return default
    try:
        return int(values[-1])
    except ValueError:
        raise ApiError(
            "INVALID_ARGUMENT", f"{key} must be an integer, got {values[-1]!r}", key
        ) from None


class Handler(BaseHTTPRequestHandler):
    """Maps requests onto :class:`JobService` methods and errors onto Google JSON errors."""

    server: EmulatorHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "kfp-spot-emulator"

    def setup(self) -> None:
        """Disable Nagle: headers and body go out in two writes; delayed ACKs would add ~40 ms."""
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Send access logs to the logging module instead of stderr."""
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        """Handle GET."""
        self._dispatch("GET")

    def do_POST(self) -> None:
        """Handle POST."""
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        """Handle DELETE."""
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        """Handle PATCH (not offered)."""
        self._dispatch("PATCH")

    def do_PUT(self) -> None:
        """Handle PUT (not offered)."""
        self._dispatch("PUT")

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = (
            payload
            if isinstance(payload, bytes)
            else (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        )
        headers = {"Content-Type": "application/json; charset=UTF-8", **(headers or {})}
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _read_body(self) -> None:
        # Read the whole body before anything can fail, so a kept-alive connection stays in step.
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            self._raw = None
            return
        self._raw = self.rfile.read(length) if length else b""

    def _body(self) -> Any:
        raw = self._raw
        if raw is None:
            raise ApiError(
                "INVALID_ARGUMENT", f"request body needs a Content-Length of at most {MAX_BODY}"
            )
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as err:
            raise ApiError("INVALID_ARGUMENT", f"Invalid JSON payload received. {err}") from None

    def _dispatch(self, method: str) -> None:
        self._read_body()
        headers: dict[str, str] = {}
        try:
            hook = self.server.routes  # the serving APIs answer their paths first
            reply = hook(method, self.path, self._raw, self.headers) if hook else None
            if reply is not None:
                status, payload, headers = reply
            else:
                status, payload = self._route(method)
        except ApiError as err:
            status, payload = err.http_status, err.to_json()
        except Exception:
            log.exception("internal error on %s %s", method, self.path)
            err = ApiError("INTERNAL", "internal error in the emulator; see its log")
            status, payload = err.http_status, err.to_json()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._send(status, payload, headers)

    def _route(self, method: str) -> tuple[int, dict[str, Any] | str]:
        url = urlsplit(self.path)
        path = unquote(url.path)
        query = parse_qs(url.query, keep_blank_values=True)
        int_enums = any("enum-encoding=int" in v for v in query.get("$alt", []))
        path_matched = False
        for route_method, pattern, action in ROUTES:
            match = pattern.match(path)
            if not match:
                continue
            path_matched = True
            if route_method != method:
                continue
            return 200, self._act(action, match.groupdict(), query, int_enums)
        if path_matched:
            raise ApiError("UNIMPLEMENTED", f"{method} is not offered on {path}")
        raise ApiError(
            "NOT_FOUND",
            f"no such resource: {path} (the emulator serves "
            "/v1/projects/P/locations/L/customJobs[/ID[:cancel]] and /emulator/v1/...)",
        )

    def _message(self, pb: Any, int_enums: bool) -> str:
        return json_format.MessageToJson(pb, use_integers_for_enums=int_enums, indent=None)

    def _act(
        self, action: str, params: dict[str, str], query: dict[str, list[str]], int_enums: bool
    ) -> dict[str, Any] | str:
        service = self.server.service
        if action == "create":
            body = self._body()
            return self._message(service.create_job(params["parent"], body), int_enums)
        if action == "list":
            jobs, token = service.list_jobs(
                params["parent"],
                (query.get("filter") or [""])[-1],
                _int_param(query, "pageSize"),
                (query.get("pageToken") or [""])[-1],
            )
            response = ListCustomJobsResponse.pb()(next_page_token=token)
            response.custom_jobs.extend(jobs)
            return self._message(response, int_enums)
        if action == "get":
            return self._message(service.get_job(params["name"]), int_enums)
        if action == "cancel":
            self._body()
            service.cancel_job(params["name"])
            return {}
        if action == "delete":
            return service.delete_job(params["name"])
        if action == "preempt":
            self._body()
            return service.preempt(params["name"])
        if action == "attempts":
            return {"attempts": service.attempts(params["name"])}
        if action == "logs":
            attempt = _int_param(query, "attempt") or None
            replica = (query.get("replica") or [None])[-1]
            return {
                "logs": service.logs(
                    params["name"], attempt, replica or None, _int_param(query, "tail")
                )
            }
        if action == "all":
            return {"customJobs": service.summaries()}
        return {"status": "ok"}


class EmulatorHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that knows its :class:`JobService`."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], service: JobService, routes: RouteHook | None = None
    ) -> None:
        super().__init__(address, Handler)
        self.service = service
        self.routes = routes
