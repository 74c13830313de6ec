"""Benchmark of the local Vertex emulator; prints figures (recorded in docs/emulator.md).

Measures:
1. create -> RUNNING latency: server-side createTime to startTime of fresh jobs (package env warm),
   and the first job's (cold: the package is installed into a new environment).
2. API latency under concurrent load: get/list requests from several threads over keep-alive
   connections, p50/p99 and throughput.
3. The restart path, over ``--rounds`` preemptions (6 per job, then a new job: the 7th would
   STOCKOUT), for a trainer that exits on SIGTERM, p50/p95 of:
   - preemption request -> SIGTERM delivered (the trainer's handler ran);
   - preemption request -> the next attempt's process started (its first line);
   - SIGTERM received -> the next attempt's process started;
   - the floor: the same trainer started directly by ``subprocess`` (Popen -> first line), which
     no emulator can beat.

4. A fresh emulator's first job (package env cached; containerSpec: the container runtime's
   probe), at once and 3 s after the emulator started (``--only first``).

Usage: python benchmarks/emulator_bench.py [--jobs 10] [--threads 8] [--requests 300]
    [--rounds 30] [--only restart|first]
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from kfp_spot.emulator import Emulator

PARENT = "projects/bench-project/locations/us-central1"
TASK = r"""
import os, signal, sys, time
out = sys.argv[1]
def note(text):
    with open(out, "a") as f:
        f.write(f"{os.getpid()} {text} {time.time()}\n")
signal.signal(signal.SIGTERM, lambda *a: (note("sigterm"), sys.exit(143)))
note("start")
while True:
    time.sleep(0.01)
"""


def build_package(folder: Path, extra: dict[str, str] | None = None) -> Path:
    path = folder / "benchtrain-0.1.tar.gz"
    files = {
        "benchtrain-0.1/pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
        'build-backend = "setuptools.build_meta"\n[project]\nname = "benchtrain"\n'
        'version = "0.1"\n[tool.setuptools]\npackages = ["benchtrain"]\n',
        "benchtrain-0.1/benchtrain/__init__.py": "",
        "benchtrain-0.1/benchtrain/task.py": TASK,
        **(extra or {}),
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def body(package: Path, progress: Path) -> dict:
    return {
        "displayName": "bench",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "replicaCount": "1",
                    "pythonPackageSpec": {
                        "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6",
                        "packageUris": [str(package)],
                        "pythonModule": "benchtrain.task",
                        "args": [str(progress)],
                    },
                }
            ],
            "scheduling": {"strategy": 4},
        },
    }


class Client:
    """One keep-alive connection."""

    def __init__(self, endpoint: str) -> None:
        host, port = endpoint.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)

    def call(self, method: str, path: str, payload: dict | None = None) -> dict:
        data = json.dumps(payload).encode() if payload is not None else None
        headers = {"Content-Type": "application/json"}
        self.conn.request(method, path, body=data, headers=headers)
        response = self.conn.getresponse()
        text = response.read()
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: {response.status} {text[:300]!r}")
        return json.loads(text)


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def wait(predicate, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.002)
    raise TimeoutError("benchmark condition not met in time")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_create_to_running(emu: Emulator, package: Path, work: Path, jobs: int) -> None:
    client = Client(emu.endpoint)
    latencies = []
    for i in range(jobs + 1):
        progress = work / f"create-{i}.txt"
        job = client.call("POST", f"/v1/{PARENT}/customJobs", body(package, progress))
        name = job["name"]
        got = wait(lambda n=name: (j := client.call("GET", f"/v1/{n}")).get("startTime") and j)
        latencies.append(ts(got["startTime"]) - ts(got["createTime"]))
        client.call("POST", f"/v1/{name}:cancel", {})
        wait(lambda n=name: client.call("GET", f"/v1/{n}")["state"] == "JOB_STATE_CANCELLED")
    cold, warm = latencies[0], latencies[1:]
    print(f"create -> RUNNING, first job (cold env install): {cold * 1000:8.1f} ms")
    print(
        f"create -> RUNNING, {len(warm)} warm jobs: median {statistics.median(warm) * 1000:.1f} ms,"
        f" p90 {pct(warm, 0.9) * 1000:.1f} ms, max {max(warm) * 1000:.1f} ms"
    )


CONTAINER_IMAGE = "ghcr.io/kfp-spot/python-runtime:0.1.0"


def container_body() -> dict:
    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": "1",
        "containerSpec": {
            "imageUri": CONTAINER_IMAGE,
            "command": ["python", "-c", "import time; time.sleep(30)"],
        },
    }
    return {"displayName": "bench-container", "jobSpec": {"workerPoolSpecs": [pool]}}


def bench_first_jobs(work: Path, package: Path, settle: float) -> None:
    """A fresh emulator's first and second job of each kind, the package env already cached.

    create call: the POST's wall time; create -> RUNNING: server-side createTime to startTime.
    ``settle``: seconds between the emulator's start and the first create (0: at once).
    """
    for kind in ("package", "container"):
        state = work / f"first-{kind}-{settle}"
        with Emulator(state, grace_period=1.0, env_cache_dir=work / "envs") as emu:
            time.sleep(settle)
            client = Client(emu.endpoint)
            figures = []
            for i in range(2):
                payload = body(package, work / f"first-{i}.txt") if kind == "package" else None
                t0 = time.perf_counter()
                try:
                    job = client.call(
                        "POST", f"/v1/{PARENT}/customJobs", payload or container_body()
                    )
                except RuntimeError as err:  # no container runtime here
                    print(f"first {kind} job: refused ({str(err)[:80]})")
                    break
                called = time.perf_counter() - t0
                got = wait(
                    lambda n=job["name"], client=client: (
                        (j := client.call("GET", f"/v1/{n}")).get("startTime") and j
                    )
                )
                start = ts(got["startTime"]) - ts(got["createTime"])
                figures.append(
                    f"job {i + 1}: create call {called * 1000:.0f} ms, "
                    f"create -> RUNNING {start * 1000:.0f} ms"
                )
                client.call("POST", f"/v1/{job['name']}:cancel", {})
            if figures:
                print(
                    f"fresh emulator, {kind} job, first create {settle:.0f} s after start: "
                    + "; ".join(figures)
                )


def bench_api_load(emu: Emulator, package: Path, work: Path, threads: int, requests: int) -> None:
    client = Client(emu.endpoint)
    names = []
    for i in range(20):  # jobs to read; they stay QUEUED behind a capacity of 0 running VMs
        job = client.call("POST", f"/v1/{PARENT}/customJobs", body(package, work / f"l{i}.txt"))
        names.append(job["name"])
    samples: list[float] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        c = Client(emu.endpoint)
        local = []
        for i in range(requests):
            if i % 5 == 4:
                path = f"/v1/{PARENT}/customJobs?pageSize=10"
            else:
                path = f"/v1/{names[(i + k) % len(names)]}"
            t0 = time.perf_counter()
            c.call("GET", path)
            local.append(time.perf_counter() - t0)
        with lock:
            samples.extend(local)

    t0 = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - t0
    print(
        f"API under load ({threads} threads x {requests} GET/list, 20 jobs): "
        f"p50 {pct(samples, 0.5) * 1000:.2f} ms, p99 {pct(samples, 0.99) * 1000:.2f} ms, "
        f"{len(samples) / elapsed:.0f} req/s"
    )
    for name in names:
        client.call("POST", f"/v1/{name}:cancel", {})


def _notes(progress: Path, what: str) -> list[float]:
    text = progress.read_text() if progress.exists() else ""
    return [float(x.split()[2]) for x in text.splitlines() if f" {what} " in x]


def _p(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5) * 1000:.1f} ms, p95 {pct(values, 0.95) * 1000:.1f} ms"


def bench_preemption(emu: Emulator, package: Path, work: Path, rounds: int) -> None:
    client = Client(emu.endpoint)
    to_term, to_next, term_to_next = [], [], []
    job_index = 0
    while len(to_next) < rounds:
        progress = work / f"preempt-{job_index}.txt"
        job = client.call("POST", f"/v1/{PARENT}/customJobs", body(package, progress))
        name = job["name"]
        job_index += 1
        wait(lambda p=progress: len(_notes(p, "start")) == 1)
        for i in range(min(6, rounds - len(to_next))):  # a 7th preemption would STOCKOUT
            t0 = time.time()
            client.call("POST", f"/emulator/v1/{name}:preempt", {})
            starts = wait(
                lambda p=progress, i=i: len(_notes(p, "start")) == i + 2 and _notes(p, "start")
            )
            terms = _notes(progress, "sigterm")
            to_term.append(terms[-1] - t0)
            to_next.append(starts[-1] - t0)
            term_to_next.append(starts[-1] - terms[-1])
        client.call("POST", f"/v1/{name}:cancel", {})
        wait(lambda n=name: client.call("GET", f"/v1/{n}")["state"] == "JOB_STATE_CANCELLED")
    print(f"restart path over {rounds} preemptions ({job_index} jobs):")
    print(f"  preempt request -> SIGTERM delivered:              {_p(to_term)}")
    print(f"  preempt request -> next attempt's process started: {_p(to_next)}")
    print(f"  SIGTERM received -> next attempt's process started: {_p(term_to_next)}")


def bench_process_floor(work: Path, rounds: int) -> None:
    """The trainer's own start-up: Popen -> first line, with no emulator in between."""
    script = work / "floor_task.py"
    script.write_text(TASK)
    gaps = []
    for i in range(rounds):
        progress = work / f"floor-{i}.txt"
        t0 = time.time()
        proc = subprocess.Popen([sys.executable, str(script), str(progress)])
        wait(lambda p=progress: _notes(p, "start"))
        gaps.append(_notes(progress, "start")[0] - t0)
        proc.terminate()
        proc.wait()
    print(f"  floor: Popen -> first line of the same trainer:    {_p(gaps)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument(
        "--only",
        choices=["restart", "first"],
        help="run only the restart-path or first-job figures",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        package = build_package(work)
        if args.only == "first":
            with Emulator(work / "warm", grace_period=1.0, env_cache_dir=work / "envs") as emu:
                bench_create_to_running(emu, package, work, 1)  # builds the package env
            for settle in (0.0, 3.0):
                bench_first_jobs(work, package, settle)
            return
        with Emulator(work / "state", grace_period=30.0, env_cache_dir=work / "envs") as emu:
            if args.only != "restart":
                bench_create_to_running(emu, package, work, args.jobs)
            bench_preemption(emu, package, work, args.rounds)
            bench_process_floor(work, args.rounds)
        if args.only == "restart":
            return
        for settle in (0.0, 3.0):
            bench_first_jobs(work, package, settle)
        capacity = {"n1-standard-4": 1}
        with Emulator(work / "state2", capacity=capacity, env_cache_dir=work / "envs") as emu:
            # one long job holds the only VM, so the 20 load jobs stay QUEUED (no processes)
            Client(emu.endpoint).call(
                "POST", f"/v1/{PARENT}/customJobs", body(package, work / "hold.txt")
            )
            bench_api_load(emu, package, work, args.threads, args.requests)


if __name__ == "__main__":
    main()
