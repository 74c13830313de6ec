"""A loopback HTTP proxy that makes a storage server unreliable, for tests.

It forwards every request to ``upstream`` and, for a seeded random share of them, instead:

- ``error``: answers 429 or 503 without forwarding (the request never reaches the server);
- ``delay``: waits a little, then forwards;
- ``cut-request``: reads part of the request body and drops the connection (the upload is cut);
- ``cut-response``: forwards, then sends the response headers and only half of the body before
  dropping the connection (the server did the work; the client cannot know).

``deny`` makes every request whose path matches a pattern fail with 403 (not retried by clients)
until it is cleared, to force a save to fail for good. ``unavailable(pattern, n)`` answers the next
``n`` requests whose path matches with 503 (a transient outage clients should retry through).
"""

from __future__ import annotations

import http.client
import random
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

FAULTS = ("error", "delay", "cut-request", "cut-response")
_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


class FaultProxy:
    """Start with ``with FaultProxy(upstream, rate=0.05, seed=1) as proxy: proxy.url``."""

    def __init__(self, upstream: str, *, rate: float = 0.05, seed: int = 0) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rate = rate
        self.deny: re.Pattern[str] | None = None
        self._outage: tuple[re.Pattern[str], int] | None = None
        self.counts: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                proxy._serve(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` of the proxy."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def unavailable(self, pattern: str, count: int) -> None:
        """Answer the next ``count`` requests whose path matches ``pattern`` with 503."""
        with self._lock:
            self._outage = (re.compile(pattern), count)

    def _choose(self, path: str) -> str:
        with self._lock:
            self.counts["requests"] += 1
            if self.deny is not None and self.deny.search(path):
                fault = "deny"
            elif self._outage is not None and self._outage[1] and self._outage[0].search(path):
                self._outage = (self._outage[0], self._outage[1] - 1)
                fault = "unavailable"
            elif self._rng.random() < self.rate:
                fault = self._rng.choice(FAULTS)
            else:
                fault = "none"
            self.counts[fault] += 1
            delay = self._rng.uniform(0.05, 0.3)
        return fault if fault != "delay" else f"delay:{delay}"

    def _serve(self, request: BaseHTTPRequestHandler) -> None:
        fault = self._choose(request.path)
        length = int(request.headers.get("Content-Length") or 0)
        if fault == "cut-request" and length > 1:
            request.rfile.read(length // 2)
            request.close_connection = True
            return
        body = request.rfile.read(length) if length else b""
        if fault in ("error", "deny", "unavailable"):
            status = {"deny": 403, "unavailable": 503}.get(fault) or self._rng.choice((429, 503))
            payload = b'{"error": {"code": %d, "message": "injected by the test proxy"}}' % status
            request.send_response(status)
            request.send_header("Content-Type", "application/json")
            request.send_header("Content-Length", str(len(payload)))
            request.end_headers()
            request.wfile.write(payload)
            return
        if fault.startswith("delay:"):
            time.sleep(float(fault.split(":", 1)[1]))
        upstream = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
            upstream.request(request.command, request.path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            out_headers = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP]
            status = response.status
        finally:
            upstream.close()
        request.send_response(status)
        for key, value in out_headers:
            request.send_header(key, value)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        if request.command == "HEAD":
            return
        if fault == "cut-response" and len(data) > 1:
            request.wfile.write(data[: len(data) // 2])
            request.wfile.flush()
            request.close_connection = True
            return
        request.wfile.write(data)
