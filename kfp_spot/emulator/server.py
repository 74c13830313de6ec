"""HTTP front of the emulator: the CustomJob REST surface of Vertex AI ``v1`` plus extensions.

Routes (``{name}`` is ``projects/P/locations/L/customJobs/ID``, P a project ID or number;
``{operation}`` is ``projects/P/locations/L/operations/ID``):

- ``POST /v1/projects/P/locations/L/customJobs``: create; answers the CustomJob
- ``GET /v1/projects/P/locations/L/customJobs``: list (``filter``, ``pageSize``, ``pageToken``,
  ``readMask``)
- ``GET /v1/{name}``, ``POST /v1/{name}:cancel``, ``DELETE /v1/{name}`` (a long-running operation)
- ``GET /v1/{operation}`` (also ``/ui/...``, where the GAPIC client looks), ``DELETE``,
  ``POST {operation}:cancel``, ``POST {operation}:wait``
- ``POST /emulator/v1/{name}:preempt``: preempt the running attempt of a Spot job, or one
  replica's VM (body ``{"replica": "workerpool1-0"}``)
- ``GET /emulator/v1/{name}/attempts``: the billing ledger, ``{"attempts": [...]}``
- ``GET /emulator/v1/{name}/logs``: replica logs (``attempt``, ``replica``, ``tail``)
- ``GET /emulator/v1/customJobs``: every job of every project (name, state, displayName)
- ``GET /emulator/v1/health``: ``{"status": "ok"}``

More routes plug in as :class:`RouteSet` s (the Model, Endpoint and Prediction APIs of
:mod:`kfp_spot.emulator.serving.routes`): their requests get everything below too, and their
actions answer a JSON document or a :class:`Reply` (any status, body and headers).

Bodies and answers are protobuf JSON (camelCase); enums are answered as names unless the client
asks for ``$alt=json;enum-encoding=int`` as the GAPIC REST transport does.

Every malformed request gets a Google JSON error with a 4xx status, never the standard
library's HTML pages: an unknown query parameter, a method a path does not offer, a body over
``MAX_BODY`` (answered from its Content-Length, before it is read), a chunked body, a request
line or headers that cannot be parsed. Each request must arrive whole within ``read_timeout``
seconds (request line, headers and body together); a client that sends less than it announced
gets a 408 and its connection is closed, while every other connection is served by its own
thread.

Why one module: the HTTP front is one request handler (parsing, limits, timeouts, routing, the JSON
error mapping) and its small request types; the APIs behind it are in jobs.py and serving/.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from google.cloud.aiplatform_v1.types import ListCustomJobsResponse
from google.protobuf import json_format

from kfp_spot.emulator.errors import ApiError, decode_json
from kfp_spot.emulator.jobs import INT32_MAX, JobService, message_json, preempt_replica

log = logging.getLogger(__name__)

MAX_BODY = 16 * 1024 * 1024
READ_TIMEOUT = 30.0
MAX_QUERY_FIELDS = 64
DRAIN_SECONDS = 10.0  # at most this long reading (and dropping) a refused body before closing

_PARENT = r"projects/[^/]+/locations/[^/]+"
_JOB = _PARENT + r"/customJobs/[^/:]+"
_OPERATION = _PARENT + r"/operations/[^/:]+"
_V1 = r"/v1(?:beta1)?"
_OPS = r"/(?:v1(?:beta1)?|ui)"
# Query parameters every Google API takes (system parameters); accepted and ignored here.
SYSTEM_PARAMETERS = frozenset(
    {
        "$alt",
        "alt",
        "$fields",
        "fields",
        "key",
        "$prettyPrint",
        "prettyPrint",
        "quotaUser",
        "$quotaUser",
        "access_token",
        "oauth_token",
        "callback",
        "$callback",
        "$.xgafv",
        "upload_protocol",
        "uploadType",
        "userProject",
        "$userProject",
    }
)


@dataclass(frozen=True)
class Route:
    """A method and path, the query parameters it binds and the action it runs."""

    method: str
    pattern: re.Pattern[str]
    action: str
    params: tuple[str, ...] = ()


ROUTES: list[Route] = [
    Route("POST", re.compile(rf"{_V1}/(?P<parent>{_PARENT})/customJobs"), "create"),
    Route(
        "GET",
        re.compile(rf"{_V1}/(?P<parent>{_PARENT})/customJobs"),
        "list",
        ("filter", "page_size", "page_token", "read_mask"),
    ),
    Route("GET", re.compile(rf"{_V1}/(?P<name>{_JOB})"), "get"),
    Route("POST", re.compile(rf"{_V1}/(?P<name>{_JOB}):cancel"), "cancel"),
    Route("DELETE", re.compile(rf"{_V1}/(?P<name>{_JOB})"), "delete"),
    Route("GET", re.compile(rf"{_OPS}/(?P<name>{_OPERATION})"), "get_operation"),
    Route("DELETE", re.compile(rf"{_OPS}/(?P<name>{_OPERATION})"), "delete_operation"),
    Route("POST", re.compile(rf"{_OPS}/(?P<name>{_OPERATION}):cancel"), "cancel_operation"),
    Route(
        "POST", re.compile(rf"{_OPS}/(?P<name>{_OPERATION}):wait"), "wait_operation", ("timeout",)
    ),
    Route("POST", re.compile(rf"/emulator/v1/(?P<name>{_JOB}):preempt"), "preempt"),
    Route("GET", re.compile(rf"/emulator/v1/(?P<name>{_JOB})/attempts"), "attempts"),
    Route(
        "GET",
        re.compile(rf"/emulator/v1/(?P<name>{_JOB})/logs"),
        "logs",
        ("attempt", "replica", "tail"),
    ),
    Route("GET", re.compile(r"/emulator/v1/customJobs"), "all"),
    Route("GET", re.compile(r"/emulator/v1/health"), "health"),
]
_SERVED = (
    "/v1/projects/P/locations/L/customJobs[/ID[:cancel]], "
    "/v1/projects/P/locations/L/operations/ID and /emulator/v1/..."
)
# Fields a request body may set besides the path's own (``body: "*"`` requests).
_BODY_FIELDS = {"cancel": ("name",), "cancel_operation": ("name",), "preempt": ("name", "replica")}
_BODY_FIELDS["wait_operation"] = ("name", "timeout")


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


class Query:
    """The query parameters of one request, checked against what its route binds."""

    def __init__(self, text: str, route: Route) -> None:
        try:
            raw = parse_qs(text, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS)
        except ValueError:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"the query string has more than {MAX_QUERY_FIELDS} parameters",
            ) from None
        self.int_enums = any("enum-encoding=int" in v for v in raw.get("$alt", []))
        self.values: dict[str, str] = {}
        for key, values in raw.items():
            if key in SYSTEM_PARAMETERS:
                continue
            field = _snake(key)
            if field not in route.params:
                raise ApiError(
                    "INVALID_ARGUMENT",
                    f"Invalid JSON payload received. Unknown name {json.dumps(key)}: Cannot bind "
                    f"query parameter. Field '{key}' could not be found in request message."
                    + (f" (accepted: {', '.join(route.params)})" if route.params else ""),
                    key,
                )
            if len(values) > 1 or field in self.values:
                raise ApiError(
                    "INVALID_ARGUMENT",
                    f"Invalid JSON payload received. Multiple values for non-repeated field "
                    f"{json.dumps(key)}.",
                    key,
                )
            self.values[field] = values[0]

    def text(self, field: str) -> str:
        """A string parameter ("" when absent)."""
        return self.values.get(field, "")

    def int32(self, field: str) -> int:
        """An int32 parameter (0 when absent)."""
        value = self.values.get(field, "")
        if not value:
            return 0
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or not -(2**31) <= number <= INT32_MAX:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"Invalid value at '{field}' (TYPE_INT32), {json.dumps(value)}",
                field,
            )
        return number


@dataclass(frozen=True)
class Request:
    """One request as a :class:`RouteSet`'s action sees it (read whole, within the limits).

    Attributes:
        params: the route pattern's named groups (e.g. ``name``, ``parent``).
        query: the query parameters, checked against what the route binds.
        body: the request body (``b""`` when there is none).
        content_type: the request's Content-Type header ("" when absent).
    """

    params: Mapping[str, str]
    query: Query
    body: bytes
    content_type: str = ""


@dataclass(frozen=True)
class Reply:
    """An answer that is not a 200 JSON document, e.g. a model server's own ``:rawPredict`` body.

    Attributes:
        status: the HTTP status.
        body: the body, sent as is.
        headers: headers to send (``Content-Type`` among them; JSON when absent).
    """

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


class RouteSet(Protocol):
    """More routes for the server (one API surface), answered like the built-in ones.

    Its requests get the server's guarantees: bounded reads and bodies, JSON 4xx errors for
    everything (an :class:`~kfp_spot.emulator.errors.ApiError` raised by ``act`` is answered as
    a Google JSON error), unknown query parameters refused, 500s logged.
    """

    @property
    def routes(self) -> Sequence[Route]:
        """The routes, matched after the built-in ones, in order."""
        ...

    @property
    def served(self) -> str:
        """What the routes serve, for the 404 of an unknown path (e.g. ``/v1/.../endpoints``)."""
        ...

    def act(self, route: Route, request: Request) -> dict[str, Any] | str | Reply:
        """Answer ``request`` on ``route``: a JSON document (object or text) or a :class:`Reply`.

        Raises:
            ApiError: the request is refused (answered as a Google JSON error).
        """
        ...


def object_body(raw: bytes, fields: Collection[str]) -> dict[str, Any]:
    """The JSON object body of a ``body: "*"`` request whose only fields are ``fields``.

    ``{}`` for no body. Field names may be camelCase or snake_case (``fields`` are snake_case).

    Raises:
        ApiError: the body is not a JSON object, or names a field not in ``fields``.
    """
    if not raw.strip():
        return {}
    doc = decode_json(raw, "*")
    if not isinstance(doc, dict):
        raise ApiError("INVALID_ARGUMENT", "Invalid JSON payload received: expected an object")
    for key in doc:
        if _snake(key) not in fields:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"Invalid JSON payload received. Unknown name {json.dumps(key)}: Cannot find "
                "field.",
                key,
            )
    return doc


class _DeadlineReader(io.RawIOBase):
    """Reads a socket, each read bounded by what is left of the current request's deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.deadline is not None:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the request did not arrive within the read timeout")
            self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


class Handler(BaseHTTPRequestHandler):
    """Maps requests onto :class:`JobService` methods and errors onto Google JSON errors."""

    server: EmulatorHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "kfp-spot-emulator"

    def setup(self) -> None:
        """Bound every read by the request deadline; disable Nagle.

        Headers and body go out in two writes; delayed ACKs would add ~40 ms without TCP_NODELAY.
        """
        super().setup()
        self.connection.settimeout(self.server.read_timeout)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile.close()  # the buffered file over the socket is replaced by a bounded one
        self._reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader, 65536)
        self._drain_bytes = 0

    def log_message(self, format: str, *args: Any) -> None:
        """Send access logs to the logging module instead of stderr."""
        log.debug("%s " + format, self.address_string(), *args)

    # the request loop -------------------------------------------------------------------------

    def handle_one_request(self) -> None:
        """Read one request (bounded in time and size) and answer it; never an HTML page."""
        self.raw_requestline = b""
        self._reader.deadline = time.monotonic() + self.server.read_timeout
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.requestline = self.command = ""
                self.request_version = "HTTP/1.1"
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():
                return  # answered by send_error
            self._handle()
        except TimeoutError:
            if self.raw_requestline:  # a request began but did not arrive in time
                self._answer_quietly(
                    ApiError(
                        "DEADLINE_EXCEEDED",
                        f"the request did not arrive in full within {self.server.read_timeout:g} "
                        "s (fewer body bytes than its Content-Length?); the connection is closed",
                        code=408,
                    )
                )
            self.close_connection = True
        except (ConnectionError, OSError):
            self.close_connection = True
        finally:
            self._reader.deadline = None

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's protocol errors (bad request line, headers) as JSON 4xx."""
        status = code if 400 <= code < 500 else HTTPStatus.BAD_REQUEST
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = ""
        text = message or phrase or "bad request"
        self.close_connection = True
        self._answer_quietly(ApiError("INVALID_ARGUMENT", f"{text} ({code} {phrase})", code=status))

    def handle_expect_100(self) -> bool:
        """Refuse an announced body over the limit before the client sends it."""
        error = self._framing_error()
        if error is not None:
            self.close_connection = True
            self._answer_quietly(error)
            return False
        return super().handle_expect_100()

    # one request ------------------------------------------------------------------------------

    def _handle(self) -> None:
        head = self.command == "HEAD"
        try:
            raw = self._read_body()  # a timeout here propagates: handle_one_request answers 408
        except ApiError as err:
            self._send(err.http_status, err.to_json(), head=head)
            if self._drain_bytes:
                self._drain()
            return
        try:
            status, payload = 200, self._route("GET" if head else self.command, raw)
        except ApiError as err:
            status, payload = err.http_status, err.to_json()
        except Exception:  # a bug: logged, answered as Google does, the emulator keeps serving
            log.exception("internal error on %s %s", self.command, self.path)
            internal = ApiError("INTERNAL", "internal error in the emulator; see its log")
            status, payload = internal.http_status, internal.to_json()
        self._send(status, payload, head=head)

    def _framing_error(self) -> ApiError | None:
        """A refusal of the body from its headers alone (None: the body can be read)."""
        limit = self.server.max_body
        if self.headers.get("Transfer-Encoding", "identity").lower() != "identity":
            return ApiError(
                "INVALID_ARGUMENT",
                "Transfer-Encoding is not accepted by the emulator; send the body with a "
                "Content-Length",
                "custom_job",
                code=411,
            )
        text = self.headers.get("Content-Length")
        if text is None:
            return None
        if not text.strip().isdigit():
            return ApiError("INVALID_ARGUMENT", f"Content-Length {text!r} is not a number of bytes")
        if int(text) > limit:
            return ApiError(
                "INVALID_ARGUMENT",
                f"the request body is {int(text)} bytes; the emulator accepts at most {limit} "
                "bytes (a CustomJob is a few KB: packages go in packageUris, not in the body)",
                "custom_job",
            )
        return None

    def _read_body(self) -> bytes:
        """The whole body, read before anything can fail so a kept-alive connection stays in step.

        A body whose headers are wrong is refused unread and the connection closed.
        """
        error = self._framing_error()
        if error is not None:
            self.close_connection = True
            announced = self.headers.get("Content-Length", "")
            self._drain_bytes = int(announced) if announced.strip().isdigit() else 0
            raise error
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length) if length else b""
        if len(data) < length:  # the client closed the connection early
            self.close_connection = True
            raise ApiError("INVALID_ARGUMENT", "the request body ended before its Content-Length")
        return data

    def _drain(self) -> None:
        """Read and drop a refused body for a while, so the client sees the answer, not a reset."""
        self._reader.deadline = time.monotonic() + min(DRAIN_SECONDS, self.server.read_timeout)
        left = self._drain_bytes
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_WR)
            while left > 0:
                chunk = self.rfile.read1(min(left, 1 << 20))
                if not chunk:
                    break
                left -= len(chunk)
        self._drain_bytes = 0

    def _answer_quietly(self, error: ApiError) -> None:
        with contextlib.suppress(OSError):
            self._send(error.http_status, error.to_json())

    def _send(
        self, status: int, payload: dict[str, Any] | str | Reply, *, head: bool = False
    ) -> None:
        headers: Mapping[str, str] = {}
        if isinstance(payload, Reply):
            status, body, headers = payload.status, payload.body, payload.headers
        else:
            body = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        self.connection.settimeout(self.server.read_timeout)  # writes: the full timeout again
        if self.request_version in ("", "HTTP/0.9"):
            self.request_version = "HTTP/1.1"  # always a status line and headers
        self.send_response(status)
        if not any(k.lower() == "content-type" for k in headers):
            self.send_header("Content-Type", "application/json; charset=UTF-8")
        for key, value in headers.items():
            if key.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not head:
            self.wfile.write(body)
        self.wfile.flush()

    def _route(self, method: str, raw: bytes) -> dict[str, Any] | str | Reply:
        url = urlsplit(self.path)
        path = unquote(url.path)
        offered = []
        for owner, route in self.server.routes:
            match = route.pattern.fullmatch(path)
            if not match:
                continue
            if route.method != method:
                offered.append(route.method)
                continue
            query = Query(url.query, route)
            if owner is None:
                answer: dict[str, Any] | str = self._act(route, match.groupdict(), query, raw)
                return answer
            content_type = self.headers.get("Content-Type", "")
            return owner.act(route, Request(match.groupdict(), query, raw, content_type))
        if offered:
            raise ApiError(
                "NOT_FOUND",
                f"{method} is not offered on {path}; it takes {', '.join(sorted(set(offered)))}",
            )
        served = ", ".join([_SERVED, *(r.served for r in self.server.route_sets)])
        raise ApiError("NOT_FOUND", f"no such resource: {path} (the emulator serves {served})")

    def _empty_body(self, raw: bytes, action: str) -> dict[str, Any]:
        return object_body(raw, _BODY_FIELDS.get(action, ()))

    def _act(self, route: Route, params: dict[str, str], query: Query, raw: bytes) -> Any:
        service = self.server.service
        action = route.action
        ints = query.int_enums
        if action == "create":
            doc = decode_json(raw, "custom_job") if raw.strip() else {}
            return message_json(service.create_job(params["parent"], doc), ints)
        if action in _BODY_FIELDS:
            self._empty_body(raw, action)
        if action == "list":
            jobs, token = service.list_jobs(
                params["parent"],
                query.text("filter"),
                query.int32("page_size"),
                query.text("page_token"),
                query.text("read_mask"),
            )
            response = ListCustomJobsResponse.pb()(next_page_token=token)
            response.custom_jobs.extend(jobs)
            return message_json(response, ints)
        if action == "get":
            return message_json(service.get_job(params["name"]), ints)
        if action == "cancel":
            service.cancel_job(params["name"])
            return {}
        if action == "delete":
            return json_format.MessageToJson(service.delete_job(params["name"]), indent=None)
        if action in ("get_operation", "wait_operation"):  # every operation is done already
            return json_format.MessageToJson(service.get_operation(params["name"]), indent=None)
        if action == "delete_operation":
            service.delete_operation(params["name"])
            return {}
        if action == "cancel_operation":
            service.cancel_operation(params["name"])
            return {}
        if action == "preempt":
            body = decode_json(raw, "*") if raw.strip() else {}
            return service.preempt(params["name"], preempt_replica(body))
        if action == "attempts":
            return {"attempts": service.attempts(params["name"])}
        if action == "logs":
            attempt = query.int32("attempt") or None
            replica = query.text("replica") or None
            return {"logs": service.logs(params["name"], attempt, replica, query.int32("tail"))}
        if action == "all":
            return {"customJobs": service.summaries()}
        return {"status": "ok"}


class EmulatorHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that knows its :class:`JobService`.

    Args:
        address: (host, port) to bind; port 0 picks a free one.
        service: the API.
        read_timeout: seconds a request may take to arrive (and a connection to stay idle).
        max_body: the largest request body accepted, in bytes.
        routes: more API surfaces (:class:`RouteSet`), matched after the built-in routes.
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        service: JobService,
        *,
        read_timeout: float = READ_TIMEOUT,
        max_body: int = MAX_BODY,
        routes: Sequence[RouteSet] = (),
    ) -> None:
        super().__init__(address, Handler)
        self.service = service
        self.read_timeout = read_timeout
        self.max_body = max_body
        self.route_sets = tuple(routes)
        # Every route with the set that answers it (None: the CustomJob API's own).
        self.routes: list[tuple[RouteSet | None, Route]] = [(None, r) for r in ROUTES]
        self.routes += [(rs, r) for rs in self.route_sets for r in rs.routes]
        bound, port = self.server_address[:2]
        host = bound.decode() if isinstance(bound, bytes) else str(bound)
        host = f"[{host}]" if ":" in host else host
        service.base_url = f"http://{host}:{port}"
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Remember the connection (see :meth:`server_close`), then serve it on a thread."""
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        """Forget a connection its handler is done with."""
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def server_close(self) -> None:
        """Stop listening, and end kept-alive connections too.

        Their handler threads would otherwise go on serving a stopped service (a closed store)
        to clients that reuse the connection, such as a launcher waiting through a restart.
        """
        super().server_close()
        with self._open_lock:
            connections = list(self._open)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
