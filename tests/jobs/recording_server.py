"""A small recording CustomJob REST server for the launcher's tests.

It speaks the subset of the Vertex AI v1 JobService REST surface the GAPIC client uses (create,
get, list, cancel; protobuf JSON bodies; google.rpc-style errors), records every request, and
moves each job through a scripted list of states, one state per GET — so tests drive the real
client library without timing. It runs no training; the emulator does that.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from google.cloud.aiplatform_v1.types import CustomJob
from google.protobuf import json_format

_JOBS = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+)/customJobs$")
_JOB = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/customJobs/[^/:]+)(:cancel)?$")
# How often the serving loop looks for a shutdown: at the default 0.5 s, leaving each `with`
# block waited about that long, about 0.5 s of each of the hundreds of tests that use one.
_POLL = {"poll_interval": 0.05}


@dataclass
class Script:
    """What a created job does: states shown on successive GETs; the last one sticks."""

    states: list[str]
    error: dict[str, Any] | None = None  # set with the terminal FAILED state
    started: bool = True  # whether start_time is set once RUNNING is passed


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    body: dict[str, Any] | None


@dataclass
class _Job:
    message: Any  # the raw CustomJob protobuf
    script: Script
    position: int = 0
    cancelled: bool = False


@dataclass
class RecordingServer:
    """Start with ``with RecordingServer(scripts) as server:``; ``server.endpoint`` is the URL."""

    scripts: list[Script] = field(default_factory=list)
    default: Script = field(
        default_factory=lambda: Script(
            ["JOB_STATE_QUEUED", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"]
        )
    )
    on_create: Callable[[int, CustomJob], None] | None = None
    fail_next: list[int] = field(default_factory=list)  # HTTP statuses for the next requests
    fail_next_creates: list[int] = field(default_factory=list)  # ... for the next creates only
    lose_create_responses: int = 0  # creates that succeed but answer 503 (a lost response)
    refuse_filters: bool = False  # answer list filters with 400, as a stricter service might
    ledger: dict[str, list[dict[str, Any]]] = field(
        default_factory=dict
    )  # served like the emulator
    requests: list[Recorded] = field(default_factory=list)
    jobs: dict[str, _Job] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._seen = threading.Condition(self._lock)

    # -- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> RecordingServer:
        server_self = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server_self._handle(self, "GET")

            def do_POST(self) -> None:
                server_self._handle(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, kwargs=_POLL, daemon=True).start()
        return self

    def __exit__(self, *_exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- what tests look at ---------------------------------------------------------------------
    def created(self) -> list[dict[str, Any]]:
        """Bodies of every create request, in order."""
        with self._lock:
            return [
                r.body or {}
                for r in self.requests
                if r.method == "POST" and r.path.endswith("/customJobs")
            ]

    def cancels(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests if r.path.endswith(":cancel")]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
        """Block until ``predicate()`` holds (checked after every request), or ``timeout``."""
        with self._seen:
            return self._seen.wait_for(predicate, timeout=timeout)

    # -- the protocol ---------------------------------------------------------------------------
    def _reply(self, handler: BaseHTTPRequestHandler, status: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _error(self, handler: BaseHTTPRequestHandler, status: int, name: str, message: str) -> None:
        self._reply(
            handler, status, {"error": {"code": status, "message": message, "status": name}}
        )

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        # Resource names are matched decoded, as Vertex does (example.com%3Ap is example.com:p).
        parts = urlsplit(handler.path)._replace(path=unquote(urlsplit(handler.path).path))
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        with self._seen:
            self.requests.append(Recorded(method, parts.path, body))
            self._seen.notify_all()
            creating = method == "POST" and _JOBS.match(parts.path) is not None
            if self.fail_next or (creating and self.fail_next_creates):
                status = (self.fail_next or self.fail_next_creates).pop(0)
                names = {
                    503: "UNAVAILABLE",
                    429: "RESOURCE_EXHAUSTED",
                    500: "INTERNAL",
                    400: "INVALID_ARGUMENT",
                }
                return self._error(handler, status, names.get(status, "UNKNOWN"), "injected")
            if method == "POST" and (m := _JOBS.match(parts.path)):
                if self.lose_create_responses:
                    self.lose_create_responses -= 1
                    self._create(None, m.group(1), raw)
                    return self._error(handler, 503, "UNAVAILABLE", "response lost")
                return self._create(handler, m.group(1), raw)
            if method == "GET" and parts.path.startswith("/emulator/v1/"):
                name = parts.path[len("/emulator/v1/") : -len("/attempts")]
                if name in self.ledger:
                    return self._reply(handler, 200, {"attempts": self.ledger[name]})
            if method == "GET" and (m := _JOBS.match(parts.path)):
                filter_text = parse_qs(parts.query).get("filter", [""])[0]
                if filter_text and self.refuse_filters:
                    return self._error(handler, 400, "INVALID_ARGUMENT", "unsupported filter")
                return self._list(handler, filter_text)
            if (m := _JOB.match(parts.path)) and m.group(1) in self.jobs:
                job = self.jobs[m.group(1)]
                if method == "POST" and m.group(2):
                    job.cancelled = True
                    return self._reply(handler, 200, {})
                if method == "GET" and not m.group(2):
                    return self._get(handler, job)
            return self._error(handler, 404, "NOT_FOUND", f"{method} {parts.path}")

    def _create(self, handler: BaseHTTPRequestHandler | None, parent: str, raw: bytes) -> None:
        message = CustomJob.pb(CustomJob())
        json_format.Parse(raw, message, ignore_unknown_fields=False)
        index = len(self.jobs)
        message.name = f"{parent}/customJobs/{1000 + index}"
        message.state = 1  # QUEUED
        message.create_time.GetCurrentTime()
        script = self.scripts[index] if index < len(self.scripts) else self.default
        self.jobs[message.name] = _Job(message, script)
        if self.on_create is not None:
            self.on_create(index, CustomJob.wrap(message))
        if handler is not None:
            self._reply(handler, 200, json_format.MessageToDict(message))

    def _get(self, handler: BaseHTTPRequestHandler, job: _Job) -> None:
        message = job.message
        if job.cancelled and message.state not in (4, 5, 7):
            message.state = 6 if message.state != 6 else 7  # CANCELLING, then CANCELLED
            if message.state == 7:
                message.end_time.GetCurrentTime()
        elif not job.cancelled:
            states = job.script.states
            name = states[min(job.position, len(states) - 1)]
            job.position += 1
            state = CustomJob.pb(CustomJob()).DESCRIPTOR.fields_by_name["state"].enum_type
            message.state = state.values_by_name[name].number
            if (
                name == "JOB_STATE_RUNNING"
                and job.script.started
                and not message.HasField("start_time")
            ):
                message.start_time.GetCurrentTime()
            if name in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED") and not message.HasField(
                "end_time"
            ):
                message.end_time.GetCurrentTime()
                if job.script.error:
                    message.error.code = job.script.error["code"]
                    message.error.message = job.script.error["message"]
        self._reply(handler, 200, json_format.MessageToDict(message))

    def _list(self, handler: BaseHTTPRequestHandler, filter_text: str) -> None:
        match = re.match(r'labels\.([\w-]+)="([^"]*)"', filter_text)
        jobs = [
            json_format.MessageToDict(j.message)
            for j in self.jobs.values()
            if not match or j.message.labels.get(match.group(1)) == match.group(2)
        ]
        self._reply(handler, 200, {"customJobs": jobs})
