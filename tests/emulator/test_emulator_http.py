"""The HTTP layer under abuse: every malformed request is a JSON 4xx, slow clients time out alone.

These talk raw HTTP over sockets: what real clients would never send is the point.
"""

from __future__ import annotations

import http.client
import io
import json
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kfp_spot.emulator import Emulator
from kfp_spot.emulator.server import MAX_BODY, Handler

PARENT = "projects/local-project/locations/us-central1"
READ_TIMEOUT = 1.0  # seconds: short, so the slow-client tests are quick


@pytest.fixture
def emu(tmp_path: Path, env_cache: Path) -> Iterator[Emulator]:
    with Emulator(
        tmp_path / "state", grace_period=1.0, env_cache_dir=env_cache, read_timeout=READ_TIMEOUT
    ) as running:
        yield running


def exchange(emu: Emulator, data: bytes, wait: float = 30.0) -> tuple[bytes, float]:
    """Send ``data`` on a new connection and read until the server closes (or ``wait`` passes)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", emu.port), timeout=wait) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer, time.monotonic() - started


def parse(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of the first response in ``answer``."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    length = int(headers.get("content-length", len(body)))
    return int(status_line.split()[1]), headers, body[:length]


def request(method: str, path: str, extra: str = "", body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}"
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def assert_json_error(answer: bytes, status: int) -> dict:
    code, headers, body = parse(answer)
    assert code == status, answer[:300]
    assert headers["content-type"].startswith("application/json")
    error = json.loads(body)["error"]
    assert error["code"] == status and error["message"] and error["status"]
    return error


@pytest.mark.parametrize("method", ["OPTIONS", "TRACE", "PUT", "PATCH", "BREW", "CONNECT"])
def test_methods_a_path_does_not_offer_answer_json(emu, method):
    answer, _ = exchange(emu, request(method, "/emulator/v1/health"))
    error = assert_json_error(answer, 404)
    assert f"{method} is not offered on /emulator/v1/health; it takes GET" in error["message"]


def test_head_answers_like_get_without_a_body(emu):
    get, _ = exchange(emu, request("GET", f"/v1/{PARENT}/customJobs"))
    head, _ = exchange(emu, request("HEAD", f"/v1/{PARENT}/customJobs"))
    status, headers, _ = parse(head)
    assert status == 200 and head.endswith(b"\r\n\r\n")  # headers only
    assert headers["content-length"] == parse(get)[1]["content-length"]
    missing, _ = exchange(emu, request("HEAD", "/nowhere"))
    assert parse(missing)[0] == 404 and missing.endswith(b"\r\n\r\n")


@pytest.mark.parametrize(
    ("raw", "status", "fragment"),
    [
        (b"GARBAGE\r\n\r\n", 400, "Bad request syntax"),
        (b"GET /emulator/v1/health HTTP/2.0\r\n\r\n", 400, "Invalid HTTP version"),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414, "URI Too Long"),
        (
            b"GET /emulator/v1/health HTTP/1.1\r\n" + b"X-A: b\r\n" * 150 + b"\r\n",
            431,
            "Too many headers",
        ),
        (request("POST", f"/v1/{PARENT}/customJobs", "Content-Length: ten\r\n"), 400, "ten"),
        (
            request("POST", f"/v1/{PARENT}/customJobs", "Transfer-Encoding: chunked\r\n")
            + b"5\r\nhello\r\n0\r\n\r\n",
            411,
            "Content-Length",
        ),
        (  # the first one framed the body, the rest of it read as the next request
            request(
                "POST", f"/v1/{PARENT}/customJobs", "Content-Length: 2\r\nContent-Length: 9\r\n"
            )
            + b"{}",
            400,
            "Content-Length is given 2 times with different values ('2', '9')",
        ),
        (request("GET", f"/v1/{PARENT}/customJobs?orderBy=createTime"), 400, "orderBy"),
        (request("GET", f"/v1/{PARENT}/customJobs?filter=a&filter=b"), 400, "Multiple values"),
        (request("GET", f"/v1/{PARENT}/customJobs?pageSize=1e3"), 400, "TYPE_INT32"),
        (request("GET", f"/v1/{PARENT}/customJobs?pageSize=4294967296"), 400, "TYPE_INT32"),
        (request("GET", f"/v1/{PARENT}/customJobs?" + "&".join(["a=1"] * 100)), 400, "more than"),
        (request("POST", f"/v1/{PARENT}/customJobs/1:cancel", body=b'{"force": 1}'), 400, "force"),
        # Body fields were checked by name only: a wrong type or a malformed Duration passed.
        (
            request("POST", f"/v1/{PARENT}/customJobs/1:cancel", body=b'{"name": 5}'),
            400,
            "Invalid value at 'name' (TYPE_STRING), 5",
        ),
        (
            request("POST", f"/v1/{PARENT}/operations/1:wait", body=b'{"timeout": "soon"}'),
            400,
            "Invalid value at 'timeout' (type.googleapis.com/google.protobuf.Duration), \"soon\"",
        ),
        (
            request("POST", f"/v1/{PARENT}/operations/1:wait", body=b'{"timeout": 5}'),
            400,
            "Invalid value at 'timeout' (type.googleapis.com/google.protobuf.Duration), 5",
        ),
        (
            request("POST", f"/v1/{PARENT}/endpoints/1/operations/2:wait?timeout=x"),
            400,
            "Invalid value at 'timeout' (type.googleapis.com/google.protobuf.Duration), \"x\"",
        ),
        (  # a serving replica is named by its index: the body's number reaches the handler
            request(
                "POST",
                f"/emulator/v1/{PARENT}/endpoints/1/deployedModels/2:preempt",
                body=b'{"replica": 0}',
            ),
            404,
            "does not exist",
        ),
    ],
    ids=[
        "bad request line",
        "HTTP/2.0",
        "long URI",
        "150 headers",
        "Content-Length not a number",
        "chunked body",
        "two Content-Lengths",
        "unknown query parameter",
        "repeated parameter",
        "pageSize not an int",
        "pageSize past int32",
        "too many parameters",
        "unknown body field on cancel",
        "name not a string",
        "timeout not a duration",
        "timeout a number",
        "timeout query parameter not a duration",
        "serving replica by index",
    ],
)
def test_malformed_requests_get_json_4xx(emu, raw, status, fragment):
    answer, _ = exchange(emu, raw)
    error = assert_json_error(answer, status)
    assert fragment in error["message"]


def test_an_oversized_body_is_refused_from_its_length_before_it_is_sent(emu):
    """The server answers from the headers alone: the client has not sent a byte of body."""
    head = request("POST", f"/v1/{PARENT}/customJobs", f"Content-Length: {50 << 20}\r\n")
    with socket.create_connection(("127.0.0.1", emu.port), timeout=30) as sock:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65536):  # the server ends its side after answering
            answer += chunk
    error = assert_json_error(answer, 400)
    assert f"at most {MAX_BODY} bytes" in error["message"]
    assert error["details"][0]["fieldViolations"][0]["field"] == "custom_job"


def test_an_oversized_body_sent_whole_gets_the_answer_not_a_reset(emu):
    """A 20 MB body, sent in full as urllib does before it reads: a 400, not ECONNRESET."""
    data = b"x" * (20 << 20)
    req = urllib.request.Request(f"{emu.endpoint}/v1/{PARENT}/customJobs", data=data)
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(req, timeout=60)
    assert caught.value.code == 400
    assert "accepts at most" in json.loads(caught.value.read())["error"]["message"]


def test_expect_100_continue_is_refused_before_the_body(emu):
    head = request(
        "POST",
        f"/v1/{PARENT}/customJobs",
        f"Content-Length: {MAX_BODY + 1}\r\nExpect: 100-continue\r\n",
    )
    answer, _ = exchange(emu, head)
    assert b"100 Continue" not in answer
    assert_json_error(answer, 400)


def test_a_half_sent_body_times_out_alone_while_others_are_served(tmp_path, env_cache):
    """A client announces 100 bytes and sends 50: it gets a 408 within the read timeout, and the
    emulator answers other clients meanwhile."""
    # Whether the others were answered *meanwhile* is told by the order of the answers, not by
    # how long they took: with a server answering one connection at a time a health request
    # waited out the slow client (1 s) and still came back "fast". The slow client's read timeout
    # here leaves a loaded machine seconds to answer the others before it.
    read_timeout = 5.0
    with Emulator(
        tmp_path / "state", grace_period=1.0, env_cache_dir=env_cache, read_timeout=read_timeout
    ) as emu:
        partial = request("POST", f"/v1/{PARENT}/customJobs", "Content-Length: 100\r\n")
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", emu.port), timeout=60) as slow:
            slow.sendall(partial + b"{" + b" " * 49)  # sent before the others connect
            for _ in range(3):
                answer, _ = exchange(emu, request("GET", "/emulator/v1/health"), wait=60)
                assert parse(answer)[0] == 200
            slow.setblocking(False)
            with pytest.raises(BlockingIOError):  # no answer yet: it still waits for its body
                slow.recv(1)
            slow.settimeout(60)
            slow_answer = b""
            while chunk := slow.recv(65536):
                slow_answer += chunk
            seconds = time.monotonic() - started
    error = assert_json_error(slow_answer, 408)
    assert "did not arrive in full" in error["message"]
    assert read_timeout * 0.9 <= seconds < read_timeout + 10


def test_a_client_that_stalls_in_its_headers_is_cut_off(emu):
    answer, seconds = exchange(emu, b"GET /emulator/v1/health HTTP/1.1\r\nHost: x\r\n")
    assert_json_error(answer, 408)
    assert seconds < READ_TIMEOUT + 10


def test_an_idle_kept_alive_connection_is_closed_quietly(emu):
    answer, seconds = exchange(
        emu, request("GET", "/emulator/v1/health").replace(b"close", b"keep-alive")
    )
    assert parse(answer)[0] == 200  # answered, then closed after the idle timeout, no 408
    assert b"408" not in answer and seconds < READ_TIMEOUT + 10


def test_a_kept_alive_connection_stays_in_step_after_errors(emu):
    """An error with a body (404, 400) still consumes the body: the next request is understood."""
    body = b'{"displayName": 5}'
    one = f"POST /v1/{PARENT}/nothing HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    two = f"POST /v1/{PARENT}/customJobs HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    three = "GET /emulator/v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answer, _ = exchange(emu, one.encode() + body + two.encode() + body + three.encode())
    statuses = [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)]
    assert statuses == [404, 400, 200]


@pytest.mark.parametrize(
    "block",
    [
        b"Host: a\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n",
        b"X-Folded: one\r\n  two\r\n\tthree\r\nAccept: */*\r\n\r\n",
        b"Dup: 1\r\ndup: 2\r\nDUP:3\r\n\r\n",
        b"Good: yes\r\nnot a header line\r\nLater: ignored\r\n\r\n",
        b"Bad Name: x\r\nAfter: y\r\n\r\n",
        b" leading: continuation\r\nReal: one\r\n\r\n",
        b"Spaces:   padded value  \r\nEmpty:\r\n:no-name\r\n\r\n",
        b"Latin: caf\xe9\nLF-only: yes\n\n",
        b"\r\n",
    ],
)
def test_headers_are_read_as_the_email_parser_reads_them(block):
    """The server's own header reader gives what ``http.client.parse_headers`` gives."""
    handler = Handler.__new__(Handler)
    handler.rfile = io.BufferedReader(io.BytesIO(block + b"body"))
    ours = handler._read_headers()
    assert handler.rfile.read() == b"body"  # read up to the blank line, not further
    theirs = http.client.parse_headers(io.BufferedReader(io.BytesIO(block)))
    assert ours.items() == theirs.items()
