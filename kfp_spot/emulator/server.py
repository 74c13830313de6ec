"""HTTP front of the emulator: every request read, bounded, dispatched and answered as JSON.

What is served is the one route table (:class:`~kfp_spot.emulator.routing.RouteTable`, built by
:func:`kfp_spot.emulator.routes.route_table`): the CustomJob REST surface of Vertex AI ``v1``, the
emulator's own methods (``/emulator/v1/...``: preempt, attempts, logs, health) and the Model,
Endpoint and Prediction APIs. This module matches each request against the table, checks its
query parameters and, for the routes that declare them, its body fields, and calls the route's
handler; handlers answer a JSON document or a :class:`~kfp_spot.emulator.routing.Reply` (any
status, body and headers).

Bodies and answers are protobuf JSON (camelCase); enums are answered as names unless the client
asks for ``$alt=json;enum-encoding=int`` as the GAPIC REST transport does.

Every malformed request gets a Google JSON error with a 4xx status, never the standard
library's HTML pages: an unknown query parameter, a method a path does not offer, a body over
``MAX_BODY`` (answered from its Content-Length, before it is read), a chunked body, a request
line or headers that cannot be parsed. Each request must arrive whole within ``read_timeout``
seconds (request line, headers and body together); a client that sends less than it announced
gets a 408 and its connection is closed, while every other connection is served by its own
thread.

Why one module: the HTTP front is one request handler (parsing, limits, timeouts, dispatch, the JSON
error mapping); the routes are in routing.py and routes.py, the APIs behind them in jobs.py and
serving/.
"""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import io
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.routing import Answer, Query, Reply, Request, RouteTable, object_body

if TYPE_CHECKING:
    from kfp_spot.emulator.jobs import CustomJobApi

log = logging.getLogger(__name__)

MAX_BODY = 16 * 1024 * 1024
READ_TIMEOUT = 30.0
DRAIN_SECONDS = 10.0  # at most this long reading (and dropping) a refused body before closing
MAX_LINE = 65536  # the longest request or header line (the standard library's limit)
MAX_HEADERS = 100  # the most header lines (the standard library's limit)
_HEADER_NAME = re.compile(r"[!-9;-~]*")  # what the email package takes for a header's name


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
    """Reads each request, answers it through the route table, and errors as Google JSON errors."""

    server: EmulatorHTTPServer
    _headers_buffer: list[bytes]  # the standard library's, filled by send_response/send_header
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

    def parse_request(self) -> bool:
        """The request line and headers, as the standard library parses them, only faster.

        The same checks and answers as ``BaseHTTPRequestHandler.parse_request`` (bad versions,
        HTTP/0.9, ``Connection``, ``Expect: 100-continue``, 431 for a header line over
        ``MAX_LINE`` or more than ``MAX_HEADERS`` lines); the headers are read by
        :meth:`_read_headers` instead of the ``email`` package's parser, which cost a third of
        the server's time for a GET.
        """
        self.command = None  # type: ignore[assignment]  # set in case of error on the first line
        self.request_version = version = self.default_request_version
        self.close_connection = True
        requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        self.requestline = requestline
        words = requestline.split()
        if not words:
            return False
        if len(words) >= 3:  # enough to determine the protocol version
            version = words[-1]
            parts = version[5:].partition(".") if version.startswith("HTTP/") else ("", "", "")
            major, dot, minor = parts
            if not (dot and major.isdecimal() and minor.isdecimal()) or max(map(len, parts)) > 10:
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request version ({version!r})")
                return False
            number = (int(major), int(minor))
            if number >= (1, 1) and self.protocol_version >= "HTTP/1.1":
                self.close_connection = False
            if number >= (2, 0):
                self.send_error(
                    HTTPStatus.HTTP_VERSION_NOT_SUPPORTED,
                    f"Invalid HTTP version ({version[5:]})",
                )
                return False
            self.request_version = version
        if not 2 <= len(words) <= 3:
            self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({requestline!r})")
            return False
        command, path = words[:2]
        if len(words) == 2:
            self.close_connection = True
            if command != "GET":
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad HTTP/0.9 request type ({command!r})")
                return False
        self.command, self.path = command, path
        if self.path.startswith("//"):  # never an absolute URI without a scheme
            self.path = "/" + self.path.lstrip("/")
        try:
            self.headers = self._read_headers()
        except http.client.LineTooLong as err:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long", str(err))
            return False
        except http.client.HTTPException as err:
            self.send_error(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers", str(err)
            )
            return False
        connection = self.headers.get("Connection", "").lower()
        if connection == "close":
            self.close_connection = True
        elif connection == "keep-alive" and self.protocol_version >= "HTTP/1.1":
            self.close_connection = False
        expect = self.headers.get("Expect", "").lower()
        if expect == "100-continue" and self.request_version >= "HTTP/1.1":
            return self.handle_expect_100()
        return True

    def _read_headers(self) -> http.client.HTTPMessage:
        """The header lines up to the blank one, as the ``email`` parser would give them.

        ``Name: value`` lines (the value without its leading blanks and line end); a line that
        begins with a blank continues the one before; one without a name is skipped; a line that
        is not a header ends the headers (the rest up to the blank line is skipped, as the
        parser takes it for a body).
        """
        fields: list[list[str]] = []
        ended = False
        for count in range(MAX_HEADERS + 1):
            raw = self.rfile.readline(MAX_LINE + 1)
            if len(raw) > MAX_LINE:
                raise http.client.LineTooLong("header line")
            if raw in (b"\r\n", b"\n", b""):
                break
            if count == MAX_HEADERS:
                raise http.client.HTTPException(f"got more than {MAX_HEADERS} headers")
            line = raw.decode("iso-8859-1")
            if ended:
                continue
            if line[0] in " \t":  # folded: continues the header before (none: skipped)
                if fields:
                    fields[-1][1] += line
                continue
            name, colon, value = line.partition(":")
            if colon and not name:  # ":value": skipped
                continue
            if not colon or not _HEADER_NAME.fullmatch(name):
                ended = True
                continue
            fields.append([name, value.lstrip(" \t")])
        message = http.client.HTTPMessage()
        for name, value in fields:
            message[name] = value.rstrip("\r\n")
        return message

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The ``Date`` header's text, formatted once a second."""
        if timestamp is not None:
            return str(email.utils.formatdate(timestamp, usegmt=True))
        second = int(time.time())
        cached = self.server.date_text
        if cached[0] != second:
            cached = self.server.date_text = (second, email.utils.formatdate(second, usegmt=True))
        return cached[1]

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
        lengths = self.headers.get_all("Content-Length") or []
        if len(set(lengths)) > 1:  # which one frames the body? (RFC 9112: an unrecoverable error)
            return ApiError(
                "INVALID_ARGUMENT",
                f"Content-Length is given {len(lengths)} times with different values "
                f"({', '.join(map(repr, lengths))}); send it once",
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

    def _send(self, status: int, payload: Answer, *, head: bool = False) -> None:
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
        # headers and body in one write: one system call, one release of the GIL
        self._headers_buffer.append(b"\r\n" if head else b"\r\n" + body)
        self.flush_headers()

    def _route(self, method: str, raw: bytes) -> Answer:
        url = urlsplit(self.path)
        found = self.server.table.match(method, unquote(url.path))
        route = found.route
        query = Query(url.query, route.params)
        if route.body is not None:
            object_body(raw, route.body)
        content_type = self.headers.get("Content-Type", "")
        return route.handler(found.api, Request(found.params, query, raw, content_type))


class EmulatorHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that answers through one route table.

    Args:
        address: (host, port) to bind; port 0 picks a free one.
        service: the CustomJob API (told the server's URL, the root of ``webAccessUris``).
        table: every route served (``routes.route_table``).
        read_timeout: seconds a request may take to arrive (and a connection to stay idle).
        max_body: the largest request body accepted, in bytes.
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        service: CustomJobApi,
        table: RouteTable,
        *,
        read_timeout: float = READ_TIMEOUT,
        max_body: int = MAX_BODY,
    ) -> None:
        # Set before binding: a failed bind calls server_close(), which reads them.
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, Handler)
        self.service = service
        self.table = table
        self.read_timeout = read_timeout
        self.max_body = max_body
        bound, port = self.server_address[:2]
        host = bound.decode() if isinstance(bound, bytes) else str(bound)
        host = f"[{host}]" if ":" in host else host
        service.base_url = f"http://{host}:{port}"
        self.date_text = (0, "")  # (second, the Date header's text): see Handler

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
