"""A local template registry that speaks the protocol ``kfp.registry.RegistryClient`` uses.

Artifact Registry's KFP format has two halves, and this server serves both on one port:

* the ``kfp.pkg.dev`` host, where a repository is ``<host>/<project>/<repo>``: ``POST`` the
  repository URL with a multipart ``content`` file (and a ``tags`` form field, comma-separated) to
  upload; ``GET <repo URL>/<package>/<sha256:hex | tag>`` downloads the template bytes;
* the Artifact Registry REST API for packages, versions and tags, which the client reaches through
  the URL templates of its context. Under ``/v1/projects/P/locations/L/repositories/R/packages``
  it is served as on ``artifactregistry.googleapis.com`` (``kfp_spot/registry/context.json`` is the
  client config file with these templates), and under ``<repo URL>/packages`` as KFP's built-in
  default context lays it out (so ``RegistryClient(host=...)`` works with no config file too).

No authentication: it binds to loopback by default and is meant for one machine or a trusted LAN.
"""

from __future__ import annotations

import email.parser
import fcntl
import json
import logging
import os
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

from kfp_spot.registry.store import (
    MAX_TEMPLATE_BYTES,
    RegistryStore,
    RegistryStoreError,
    Repository,
)

log = logging.getLogger(__name__)

CONTEXT_FILE = str(Path(__file__).with_name("context.json"))
"""The RegistryClient config file (``config_file=``) for a repository URL on this server."""

LOCK_NAME = ".registry.lock"


class _Reply(Exception):
    """Raised by a route to answer with a status and body (errors included)."""

    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.content_type = content_type


def _error(status: int, code_name: str, message: str) -> RegistryStoreError:
    return RegistryStoreError(status, code_name, message)


def _parse_multipart(content_type: str, body: bytes) -> dict[str, bytes]:
    """Form fields of a ``multipart/form-data`` body, byte-exact (no line-ending rewrites)."""
    header = email.parser.Parser().parsestr(
        f"Content-Type: {content_type}\r\n\r\n", headersonly=True
    )
    boundary = header.get_param("boundary")
    if header.get_content_type() != "multipart/form-data" or not boundary:
        raise _error(400, "INVALID_ARGUMENT", "upload must be multipart/form-data with a boundary")
    delimiter = b"\r\n--" + str(boundary).encode("latin-1")
    fields: dict[str, bytes] = {}
    for chunk in (b"\r\n" + body).split(delimiter)[1:]:
        if chunk.startswith(b"--"):  # the closing delimiter
            break
        head, sep, data = chunk.partition(b"\r\n\r\n")
        if not sep:
            raise _error(400, "INVALID_ARGUMENT", "malformed multipart part (no header end)")
        headers = email.parser.BytesHeaderParser().parsebytes(head.lstrip(b" \t").lstrip(b"\r\n"))
        name = headers.get_param("name", header="content-disposition")
        if isinstance(name, str):
            fields[name] = data
    return fields


class _RegistryHandler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"

    # -- plumbing ------------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, doc: Any, status: int = 200) -> _Reply:
        return _Reply(status, json.dumps(doc, indent=1).encode(), "application/json")

    def _body(self) -> bytes:
        return self._request_body

    def _read_body(self) -> None:
        # Read the whole body up front, so an error reply never leaves bytes on a kept-alive
        # connection; an oversized or unreadable body closes the connection instead.
        self._request_body = b""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError as exc:
            self.close_connection = True
            raise _error(400, "INVALID_ARGUMENT", "bad Content-Length") from exc
        if length > MAX_TEMPLATE_BYTES + (1 << 20):
            self.close_connection = True
            raise _error(413, "INVALID_ARGUMENT", f"request larger than {MAX_TEMPLATE_BYTES} bytes")
        if length > 0:
            self._request_body = self.rfile.read(length)

    def _dispatch(self) -> None:
        try:
            try:
                try:
                    self._read_body()
                    self._route()
                except FileNotFoundError as exc:  # deleted by a concurrent request mid-read
                    raise _error(404, "NOT_FOUND", f"gone while reading: {exc}") from exc
                except (OSError, ValueError) as exc:  # unreadable or hand-edited state files
                    log.error("registry state error on %s %s: %s", self.command, self.path, exc)
                    raise _error(500, "INTERNAL", f"registry state is unreadable: {exc}") from exc
                raise _error(404, "NOT_FOUND", f"no route for {self.command} {self.path}")
            except RegistryStoreError as exc:
                status = HTTPStatus(exc.http_status)
                doc = {
                    "error": {"code": status.value, "message": exc.message, "status": exc.status}
                }
                raise self._json(doc, status.value) from exc
        except _Reply as reply:
            self._send(reply.status, reply.body, reply.content_type)

    do_GET = do_POST = do_PATCH = do_DELETE = _dispatch

    # -- routes --------------------------------------------------------------------------------
    def _route(self) -> None:
        url = urlsplit(self.path)
        segs = [unquote(s) for s in url.path.strip("/").split("/")] if url.path.strip("/") else []
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        store = self.server.store
        if (
            len(segs) >= 8
            and segs[0] == "v1"
            and segs[1] == "projects"
            and segs[3] == "locations"
            and segs[5] == "repositories"
            and segs[7] == "packages"
        ):  # Artifact Registry's REST layout
            self._api(store, store.repository(segs[2], segs[6], segs[4]), segs[8:], query)
        elif len(segs) >= 3 and segs[2] == "packages":  # KFP's default context
            self._api(store, store.repository(segs[0], segs[1]), segs[3:], query)
        elif len(segs) == 2 and self.command == "POST":
            self._upload(store, store.repository(segs[0], segs[1]))
        elif len(segs) == 4 and self.command == "GET":
            repo = store.repository(segs[0], segs[1])
            data = repo.read_template(segs[2], segs[3])
            raise _Reply(200, data, "application/x-yaml")

    def _upload(self, store: RegistryStore, repo: Repository) -> None:
        fields = _parse_multipart(self.headers.get("Content-Type", ""), self._body())
        if "content" not in fields:
            raise _error(400, "INVALID_ARGUMENT", "upload has no 'content' file part")
        raw_tags = fields.get("tags", b"").decode("utf-8", "replace")
        tags = raw_tags.split(",") if raw_tags else []  # each one checked as it is, as a tag
        if "" in tags:  # `a,,b`: dropping it would leave a tag the client asked for unset
            raise _error(
                400,
                "INVALID_ARGUMENT",
                f"tags {raw_tags!r}: tag {tags.index('') + 1} of {len(tags)} is empty; give "
                "each tag once, separated by single commas (e.g. 'v1,latest')",
            )
        package, version = store.upload(repo, fields["content"], tags)
        log.info("uploaded %s/%s %s tags=%s", repo.resource, package, version, tags)
        raise _Reply(200, f"{package}/{version}".encode(), "text/plain; charset=utf-8")

    def _tag_body(self) -> str:
        try:
            doc = json.loads(self._body() or b"{}")
        except ValueError as exc:
            raise _error(400, "INVALID_ARGUMENT", f"tag body is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise _error(400, "INVALID_ARGUMENT", "tag body must be a JSON object")
        version = doc.get("version", "")
        # Not a string: the store refuses it as a missing version.
        return version if isinstance(version, str) else ""

    def _api(
        self, store: RegistryStore, repo: Repository, rest: list[str], query: dict[str, str]
    ) -> None:
        method = self.command
        n = len(rest)
        if n == 0 and method == "GET":
            raise self._json({"packages": repo.list_packages()})
        package = rest[0] if n else ""
        if n == 1 and method == "GET":
            raise self._json(repo.get_package(package))
        if n == 1 and method == "DELETE":
            store.delete_package(repo, package)
            raise self._json(self._operation(repo, package))
        if n == 2 and rest[1] == "versions" and method == "GET":
            raise self._json({"versions": repo.list_versions(package)})
        if n == 3 and rest[1] == "versions" and method == "GET":
            raise self._json(repo.get_version(package, rest[2]))
        if n == 3 and rest[1] == "versions" and method == "DELETE":
            force = query.get("force", "").lower() == "true"
            store.delete_version(repo, package, rest[2], force=force)
            raise self._json(self._operation(repo, package))
        if n == 2 and rest[1] == "tags" and method == "GET":
            raise self._json({"tags": repo.list_tags(package)})
        if n == 2 and rest[1] == "tags" and method == "POST":
            if not query.get("tagId"):
                raise _error(400, "INVALID_ARGUMENT", "tagId query parameter is required")
            raise self._json(store.create_tag(repo, package, query["tagId"], self._tag_body()))
        if n == 3 and rest[1] == "tags" and method == "GET":
            raise self._json(repo.get_tag(package, rest[2]))
        if n == 3 and rest[1] == "tags" and method == "PATCH":
            raise self._json(store.update_tag(repo, package, rest[2], self._tag_body()))
        if n == 3 and rest[1] == "tags" and method == "DELETE":
            store.delete_tag(repo, package, rest[2])
            raise self._json({})

    @staticmethod
    def _operation(repo: Repository, package: str) -> dict[str, Any]:
        # Artifact Registry answers deletes with a long-running operation; ours are done at once.
        return {"name": f"{repo.package_resource(package)}/operations/delete", "done": True}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    store: RegistryStore


class RegistryServerError(Exception):
    """The registry server cannot start (port in use, root locked by another server, ...)."""


class RegistryServer:
    """The local registry on ``host:port`` with its state under ``root``.

    Use as a context manager (serves on a background thread), or call :meth:`serve_forever`.

    Example::

        with RegistryServer("registry-data") as server:
            host = server.repository_url("my-project", "templates")
            kfp_spot.registry.push("pipeline.yaml", host, "0.1.0")
    """

    def __init__(
        self, root: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 0
    ) -> None:
        """Bind the server (port 0 picks a free one) and lock ``root`` for this process.

        Raises:
            RegistryServerError: when ``root`` cannot be made or written, is served by another
                process, or the port is taken.
        """
        if not isinstance(root, (str, os.PathLike)) or not os.fspath(root).strip():
            # "" was the working directory: a project folder filled with registry state.
            raise RegistryServerError(
                f"root {root!r} names no folder: give the folder the registry keeps its state in"
            )
        if not 0 <= int(port) <= 65535:
            raise RegistryServerError(f"port must be 0..65535, got {port}")
        if not host.strip():  # "" binds every interface: the templates served to the network
            raise RegistryServerError(
                f"host {host!r} names no interface; give one, e.g. 127.0.0.1 (or 0.0.0.0 to "
                "serve every interface on purpose)"
            )
        try:
            self.store = RegistryStore(root)
            self._lock_file = open(self.store.root / LOCK_NAME, "a+b")  # noqa: SIM115 (held open)
        except OSError as exc:  # a file in the way, a read-only or missing parent
            raise RegistryServerError(
                f"cannot keep the registry's state in {os.fspath(root)!r}: "
                f"{exc.strerror or exc} ({exc.filename}); give a directory that can be made "
                "and written"
            ) from exc
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._lock_file.close()
            raise RegistryServerError(
                f"registry root {self.store.root} is in use by another registry server"
            ) from exc
        try:
            self._httpd = _HTTPServer((host, int(port)), _RegistryHandler)
        except OSError as exc:
            self._release()
            raise RegistryServerError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        self._httpd.store = self.store
        self._thread: threading.Thread | None = None

    @property
    def root(self) -> Path:
        """Where the registry keeps its state."""
        return self.store.root

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://HOST:PORT``."""
        host = cast(str, self._httpd.server_address[0])  # AF_INET: (host, port)
        return f"http://{host}:{self.port}"

    def repository_url(self, project: str = "local-project", repo: str = "templates") -> str:
        """The RegistryClient ``host`` of one repository: ``http://HOST:PORT/PROJECT/REPO``.

        The repository is created if it is not there yet (as ``gcloud artifacts repositories
        create`` makes one on Artifact Registry): a push to one never created is refused.

        Raises:
            ValueError: a project or repository Artifact Registry would refuse, naming it.
        """
        try:
            repository = self.store.create_repository(project, repo)
        except RegistryStoreError as exc:
            raise ValueError(exc.message) from None
        return f"{self.url}/{repository.project}/{repository.repo}"

    def start(self) -> RegistryServer:
        """Serve on a background thread; returns self."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},  # how long stop() waits for the loop to notice
                name="kfp-spot-registry",
                daemon=True,
            )
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on this thread until :meth:`stop` is called from another one (or Ctrl-C)."""
        try:
            self._httpd.serve_forever()
        finally:
            self._close()

    def stop(self) -> None:
        """Stop serving and release the port and the root."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._close()

    def _close(self) -> None:
        self._httpd.server_close()
        self._release()

    def _release(self) -> None:
        if not self._lock_file.closed:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()

    def __enter__(self) -> RegistryServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
