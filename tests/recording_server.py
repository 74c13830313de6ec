"""A loopback HTTP server that records the requests a real client sends and answers like Vertex.

It is a local endpoint for the real google-cloud-aiplatform SDK, not a mock of the SDK: the SDK
builds and sends real REST requests, and the tests assert what arrived.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class RecordingServer:
    """Serve ``/v1/projects/*/locations/*/pipelineJobs`` on 127.0.0.1 and record each request."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.jobs: dict[str, dict] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _reply(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append({"method": "POST", "path": url.path, "body": body})
                if url.path.endswith("/pipelineJobs"):
                    job_id = parse_qs(url.query).get("pipelineJobId", ["job-1"])[0]
                    name = f"{url.path[len('/v1/') :]}/{job_id}"
                    job = dict(body, name=name, state="PIPELINE_STATE_PENDING")
                    server.jobs[name] = job
                    self._reply(200, job)
                else:
                    self._reply(404, {"error": {"code": 404, "message": "not found"}})

            def do_GET(self):
                url = urlparse(self.path)
                server.requests.append({"method": "GET", "path": url.path})
                job = server.jobs.get(url.path[len("/v1/") :])
                if job is None:
                    self._reply(404, {"error": {"code": 404, "message": "not found"}})
                else:
                    self._reply(200, job)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> RecordingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
