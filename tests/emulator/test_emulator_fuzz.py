"""Property-based fuzzing of the running emulator: whatever is sent, the answer is a bounded 4xx.

Requests over create, get, list (filters, page tokens, read masks), cancel and delete, with
mutated and random bodies, headers, methods and paths, each on its own connection to one running
emulator. For every request: an answer within ``ANSWER_BOUND`` seconds (no hang), never a 5xx,
every error a Google JSON error, and every refused create names a field in a ``BadRequest``
field violation. Derandomized with a fixed number of examples, so ``make test`` stays fast and
the same inputs run every time (600 requests in about 3 s on the 2-core build machine).
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from kfp_spot.emulator import Emulator, names
from tests.emulator.body_strategies import JOB_FIELDS, mutated_bodies

ANSWER_BOUND = 15.0  # seconds; the emulator answers in milliseconds, this only catches hangs
EXAMPLES = 600
PROJECT = "fuzz-project"
GOOD: dict[str, Any] = {
    "displayName": "fuzz",
    "labels": {"team": "ml"},
    "jobSpec": {
        "workerPoolSpecs": [
            {
                "machineSpec": {"machineType": "n1-standard-4"},
                "replicaCount": "1",
                "diskSpec": {"bootDiskSizeGb": 100},
                "pythonPackageSpec": {
                    "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6",
                    "packageUris": ["/nonexistent/trainer-0.1.tar.gz"],
                    "pythonModule": "trainer.task",
                    "env": [{"name": "A", "value": "1"}],
                },
            }
        ],
        "scheduling": {"strategy": 4, "timeout": "3600s"},
        "enableWebAccess": True,
    },
}


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory, env_cache: Path) -> Iterator[dict]:
    """One emulator for the whole module, with a few real jobs to aim at."""
    state = tmp_path_factory.mktemp("fuzz") / "state"
    with Emulator(state, grace_period=0.5, env_cache_dir=env_cache, read_timeout=5.0) as emu:
        ids = []
        for _ in range(3):
            job = emu.service.create_job(f"projects/{PROJECT}/locations/us-central1", GOOD)
            ids.append(job.name.rsplit("/", 1)[1])
        yield {"port": emu.port, "ids": ids}


# pieces of requests -------------------------------------------------------------------------

safe_chars = st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from("/:%?#.*")
safe_text = st.text(safe_chars, max_size=12)
any_text = st.text(max_size=12)  # surrogates included
projects = st.sampled_from(
    [PROJECT] * 6 + [names.project_number(PROJECT)] * 2 + ["p", "0", "9" * 30, "-", ".."]
) | st.text(safe_chars, min_size=1, max_size=12)
locations = st.sampled_from(["us-central1"] * 6 + ["europe-west4", "", "x" * 300]) | safe_text
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | any_text
    | st.sampled_from(["SPOT", "FLEX_START", "1e999", "-1", "NaN", "3600s", "-5s", "\ud800"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=10,
)
keys = st.sampled_from(
    [
        *JOB_FIELDS,
        "display_name",
        "diskSpec",
        "bootDiskSizeGb",
        "bootDiskType",
        "maxWaitDuration",
        "timeout",
        "disableRetries",
        "env",
        "webAccessUris",
        "@type",
        "\udc00x",
    ]
)


def _segment(text: str) -> str:
    return quote(text.encode("utf-8", "surrogatepass"), safe=":")


def _encode(doc: Any) -> bytes:
    return json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")


bodies = st.one_of(
    mutated_bodies(GOOD, keys, json_values, max_changes=4, max_depth=4).map(_encode),
    json_values.map(_encode),
    st.binary(max_size=64),
    st.sampled_from(
        [
            b"",
            b"{",
            b'{"displayName": "x", "jobSpec": {"scheduling": {"strategy": Infinity}}}',
            b'{"displayName": "\\ud800"}',
            b'{"\\udc00": 1}',
            b"[" * 5000 + b"]" * 5000,
            b'{"labels": ' * 100 + b"{}" + b"}" * 100,
            _encode(
                {
                    **GOOD,
                    "jobSpec": {
                        **GOOD["jobSpec"],
                        "scheduling": {"strategy": "SPOT", "maxWaitDuration": "1s"},
                    },
                }
            ),
        ]
    ),
)
filters = st.one_of(
    any_text,
    st.lists(
        st.sampled_from(
            [
                "state",
                "display_name",
                "labels.team",
                "labels",
                "create_time",
                "update_time",
                "=",
                "!=",
                ":",
                "<",
                ">=",
                "AND",
                "OR",
                "NOT",
                "-",
                "(",
                ")",
                '"fu*"',
                "*",
                "JOB_STATE_RUNNING",
                '"2026-01-01T00:00:00Z"',
            ]
        ),
        max_size=12,
    ).map(" ".join),
    st.integers(1, 3000).map(lambda n: "(" * n + 'state="JOB_STATE_RUNNING"' + ")" * n),
    st.integers(1, 3000).map(lambda n: "NOT " * n + "display_name:*"),
)
methods = st.sampled_from(
    ["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS", "TRACE", "BREW", "get"]
)
headers = st.dictionaries(
    st.sampled_from(["Content-Type", "Accept", "X-Goog-Api-Client", "Expect", "X-Fuzz"]),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
    max_size=3,
)


@st.composite
def requests(draw: st.DrawFn, ids: list[str]) -> tuple[str, str, bytes, dict, bool]:
    """(method, path, body, headers, is_create) of one request."""
    parent = f"projects/{_segment(draw(projects))}/locations/{_segment(draw(locations))}"
    job_id = draw(st.sampled_from(ids) | st.sampled_from(["0", "9" * 25, "-1"]) | safe_text)
    job = f"{parent}/customJobs/{_segment(job_id)}"
    kind = draw(
        st.sampled_from(["create"] * 4 + ["list"] * 3 + ["get", "cancel", "delete", "operation"])
    )
    body = b""
    if kind == "create":
        method, path, body = "POST", f"/v1/{parent}/customJobs", draw(bodies)
    elif kind == "get":
        method, path = "GET", f"/v1/{job}"
    elif kind == "cancel":
        method, path, body = "POST", f"/v1/{job}:cancel", draw(bodies | st.just(b"{}"))
    elif kind == "delete":
        method, path = "DELETE", f"/v1/{job}"
    elif kind == "operation":
        prefix = draw(st.sampled_from(["v1", "ui"]))
        method, path = "GET", f"/{prefix}/{parent}/operations/{_segment(job_id)}"
    else:
        query: dict[str, Any] = {}
        if draw(st.booleans()):
            query["filter"] = draw(filters).encode("utf-8", "surrogatepass")
        if draw(st.booleans()):
            query["pageSize"] = draw(st.integers(-5, 2**33) | safe_text)
        if draw(st.booleans()):
            query["pageToken"] = draw(safe_text | st.sampled_from(["eyJhZnRlciI6IDF9", "AAAA"]))
        if draw(st.booleans()):
            query["readMask"] = draw(
                st.sampled_from(["displayName,state", "*", "name", "colour", "job_spec.x"])
                | safe_text
            )
        if draw(st.booleans()):
            query[draw(st.sampled_from(["orderBy", "page_size", "$alt", "fields", "x"]))] = "1"
        method, path = "GET", f"/v1/{parent}/customJobs?{urlencode(query)}"
    if draw(st.integers(0, 9)) == 0:  # now and then: another method, or a mangled path
        method = draw(methods)
    if draw(st.integers(0, 9)) == 0:
        path = draw(
            st.sampled_from(
                [
                    path + "/",
                    path.replace("/v1/", "/v1beta1/"),
                    path.replace("/v1/", "//v1/"),
                    path + ":wait",
                    "/emulator/v1/" + path.split("/v1/", 1)[-1] + ":preempt",
                    "/" + _segment(draw(any_text)),
                ]
            )
        )
    is_create = method == "POST" and re.fullmatch(
        r"/v1/projects/[^/]+/locations/[^/]+/customJobs", path
    )
    return method, path, body, draw(headers), bool(is_create)


def send(port: int, method: str, path: str, body: bytes, extra: dict) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=ANSWER_BOUND)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for key, value in extra.items():
            conn.putheader(key, value)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()  # raises TimeoutError if no answer within the bound
        return response.status, response.read()
    finally:
        conn.close()


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_any_request_is_answered_in_time_never_5xx_and_refused_creates_name_a_field(target, data):
    method, path, body, extra, is_create = data.draw(requests(target["ids"]))
    note(f"{method} {path} headers={extra} body={body[:300]!r}")
    if extra.get("Expect", "").lower() == "100-continue":
        extra = {k: v for k, v in extra.items() if k != "Expect"}  # http.client cannot wait for 100
    status, raw = send(target["port"], method, path, body, extra)
    event(f"{'create' if is_create else method} -> {status}")  # --hypothesis-show-statistics
    assert status < 500, raw[:500]
    if method == "HEAD":
        assert raw == b""
        return
    doc = json.loads(raw)
    if status >= 400:
        error = doc["error"]
        assert error["code"] == status and error["message"] and error["status"], error
        if is_create and status != 404:
            violations = error["details"][0]["fieldViolations"]
            assert violations and all(v["field"] for v in violations), error
    elif is_create:  # accepted: stop it, so generated jobs do not pile up
        status, _ = send(target["port"], "POST", f"/v1/{doc['name']}:cancel", b"{}", {})
        assert status in (200, 400)
