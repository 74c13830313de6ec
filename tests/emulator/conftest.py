"""Fixtures for the emulator tests: a tiny training package and a running emulator.

The training package (``toytrain``) loops over steps, appends its progress to a file the test
names, and handles SIGTERM like a checkpointing trainer would; tests wait on that file or on the
job state with bounded deadlines, never on fixed sleeps.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kfp_spot.emulator import Emulator
from tests.shared import write_sdist

EXECUTOR = "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest"
TASK = r"""
import argparse, json, os, signal, sys, time

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=5)
p.add_argument("--step-seconds", type=float, default=0.05)
p.add_argument("--progress", default="")
p.add_argument("--exit-code", type=int, default=0)
p.add_argument("--ignore-sigterm", action="store_true")
p.add_argument("--env-out", default="")
p.add_argument("--until", default="", help="keep stepping (past --steps) until this file exists")
p.add_argument("--leave", action="store_true", help="note what an earlier process left, leave more")
a = p.parse_args()
name = json.loads(os.environ.get("CLUSTER_SPEC", "{}")).get("task", {})
replica = f"{name.get('type', 'workerpool0')}-{name.get('index', 0)}"

def note(text):
    if a.progress:
        with open(a.progress, "a") as f:
            f.write(f"{replica} {os.getpid()} {text}\n")

def on_term(signum, frame):
    note("sigterm")
    if not a.ignore_sigterm:
        sys.exit(143)

signal.signal(signal.SIGTERM, on_term)
if a.env_out:
    os.makedirs(a.env_out, exist_ok=True)
    # Written whole, then renamed: a test waiting for the file never reads it half-written.
    out = os.path.join(a.env_out, replica + ".json")
    with open(out + ".tmp", "w") as f:
        json.dump(dict(os.environ), f)
    os.replace(out + ".tmp", out)
note("start")
if a.leave:  # in the working dir and the temp dir: what an earlier attempt's VM left there
    import tempfile
    places = {"cwd": os.getcwd(), "tmp": tempfile.gettempdir()}
    found = [k for k, d in places.items() if os.path.exists(os.path.join(d, "left.txt"))]
    note("found " + json.dumps({"found": found, "places": places}))
    for d in places.values():
        with open(os.path.join(d, "left.txt"), "w") as f:
            f.write("left by an earlier attempt")
i = 0
while i < a.steps or (a.until and not os.path.exists(a.until)):
    time.sleep(a.step_seconds)
    note(f"step {i}")
    print(f"step {i}", flush=True)
    i += 1
note("done")
sys.exit(a.exit_code)
"""


@pytest.fixture(scope="session")
def toy_package(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An sdist of the ``toytrain`` package (module ``toytrain.task``)."""
    out = tmp_path_factory.mktemp("pkg") / "toytrain-0.1.tar.gz"
    write_sdist(
        out,
        {
            "toytrain-0.1/pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
            'build-backend = "setuptools.build_meta"\n'
            '[project]\nname = "toytrain"\nversion = "0.1"\n'
            '[tool.setuptools]\npackages = ["toytrain"]\n',
            "toytrain-0.1/toytrain/__init__.py": "",
            "toytrain-0.1/toytrain/task.py": TASK,
        },
    )
    return str(out)


@pytest.fixture
def emulator(tmp_path: Path, env_cache: Path) -> Iterator[Emulator]:
    """A running emulator on a free port with a 1 s grace period."""
    with Emulator(tmp_path / "state", grace_period=1.0, env_cache_dir=env_cache) as emu:
        yield emu


def toy_job_body(
    toy_package: str,
    out_dir: Path,
    *args: str,
    strategy: Any = "SPOT",
    display_name: str = "toy",
    replicas: tuple[int, ...] = (1,),
    machine_type: str = "n1-standard-4",
) -> dict[str, Any]:
    """A CustomJob body (protobuf JSON) that runs ``toytrain.task`` with ``args``, writing below
    ``out_dir`` (also for module-scoped fixtures, which cannot use ``make_job``)."""
    pools = [
        {
            "machineSpec": {"machineType": machine_type},
            "replicaCount": count,
            "pythonPackageSpec": {
                "executorImageUri": EXECUTOR,
                "packageUris": [toy_package],
                "pythonModule": "toytrain.task",
                "args": list(args),
            },
        }
        for count in replicas
    ]
    return {
        "displayName": display_name,
        "jobSpec": {
            "workerPoolSpecs": pools,
            "scheduling": {"strategy": strategy},
            "baseOutputDirectory": {"outputUriPrefix": str(out_dir / "out")},
        },
    }


@pytest.fixture
def make_job(toy_package: str, tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """Build a CustomJob body (protobuf JSON) that runs ``toytrain.task``."""

    def make(*args: str, **options: Any) -> dict[str, Any]:
        return toy_job_body(toy_package, tmp_path, *args, **options)

    return make


def http(
    method: str, url: str, body: Any = None, raw: bytes | None = None
) -> tuple[int, dict[str, Any]]:
    """One JSON request; returns (HTTP status, decoded body) for errors too."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


@pytest.fixture
def api() -> Callable[..., tuple[int, dict[str, Any]]]:
    """The ``http`` helper as a fixture."""
    return http


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what`` after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def until() -> Callable[..., Any]:
    """The ``wait_until`` helper as a fixture."""
    return wait_until


def progress_lines(path: Path) -> list[str]:
    """Lines the training processes wrote to their progress file so far."""
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def lines() -> Callable[[Path], list[str]]:
    """The ``progress_lines`` helper as a fixture."""
    return progress_lines


@pytest.fixture
def gapic(emulator: Emulator) -> Any:
    """The real GAPIC ``JobServiceClient`` (REST transport) pointed at the emulator."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform_v1

    return aiplatform_v1.JobServiceClient(
        transport="rest",
        client_options=ClientOptions(api_endpoint=emulator.endpoint),
        credentials=AnonymousCredentials(),
    )
