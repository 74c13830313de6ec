"""Open-loop load on the local emulator (127.0.0.1 only, bounded in count and time); prints figures.

1. ``get``: GETs of CustomJobs at a fixed rate (``--rate`` req/s for ``--seconds``), each request
   scheduled at ``t0 + i / rate`` on one of ``--connections`` keep-alive connections; latency is
   measured from the *scheduled* send time (so a stalled server is charged for the requests that
   queue behind it), p50/p90/p99/max; and the emulator process's CPU time per request (user +
   system, all threads, from /proc: the figure the machine's load moves least). ``--repeat``
   runs the loop that many times on the same emulator and prints the range.
2. ``jobs``: ``--jobs`` CustomJobs (each a trivial Python package that sleeps ``--job-seconds``)
   created as fast as ``--connections`` clients can; the time to create them all, how many of
   them a client listing RUNNING jobs every 0.5 s saw RUNNING (each at least once, and the most
   at once), how long until all SUCCEEDED, the GET latency of one client polling a job every
   20 ms meanwhile, and the emulator's CPU time over the run.

3. ``floor``: the same open loop against the least an HTTP server in Python does: the standard
   library's threading server in its own process answering a job's JSON from memory (keep-alive,
   TCP_NODELAY, one write). What it measures is this machine and this client, not the emulator:
   the p99 no emulator in Python gets below here.

Every figure is printed median first, with how it was measured beside it. The emulator runs as
``kfp-spot emulator start`` in its own process (its own GIL), the load from this one (set
PYTHONPATH to run another checkout's emulator). Usage: python benchmarks/emulator_load.py
[get|jobs|floor|all] [--rate 1000] [--seconds 10] [--repeat 1] [--jobs 1000] [--job-seconds 20]
[--connections 16]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from emulator_bench import PARENT, build_package

KFP_SPOT = str(Path(sys.executable).with_name("kfp-spot"))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (
        f"p50 {pct(ms, 0.5):.2f} ms, p90 {pct(ms, 0.9):.2f} ms, p99 {pct(ms, 0.99):.2f} ms, "
        f"max {max(ms):.1f} ms ({len(ms)} requests)"
    )


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Conn:
    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(self, method: str, path: str, payload: dict | None = None) -> dict:
        data = json.dumps(payload).encode() if payload is not None else None
        self.conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        text = response.read()
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: {response.status} {text[:200]!r}")
        return json.loads(text)


class Emulator:
    """``kfp-spot emulator start`` in a child process."""

    def __init__(self, work: Path) -> None:
        self.proc = subprocess.Popen(
            [
                KFP_SPOT,
                "emulator",
                "start",
                "--state-dir",
                str(work / "state"),
                "--env-cache-dir",
                str(work / "envs"),
                "--grace-period",
                "1",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not found:
            self.proc.kill()
            raise RuntimeError(f"emulator did not start: {line!r}")
        self.port = int(found.group(1))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=120)


def job_body(package: Path, seconds: float) -> dict:
    return {
        "displayName": "load",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "replicaCount": "1",
                    "pythonPackageSpec": {
                        "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6",
                        "packageUris": [str(package)],
                        "pythonModule": "benchtrain.sleep",
                        "args": [str(seconds)],
                    },
                }
            ],
        },
    }


def open_loop(port: int, paths: list[str], rate: float, seconds: float, connections: int):
    total = int(rate * seconds)
    samples: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    t0 = time.perf_counter() + 0.2

    def worker(k: int) -> None:
        conn = Conn(port)
        local = []
        for i in range(k, total, connections):
            scheduled = t0 + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            try:
                conn.call("GET", paths[i % len(paths)])
            except (OSError, RuntimeError) as err:
                errors.append(str(err)[:100])
                conn = Conn(port)
                continue
            local.append(time.perf_counter() - scheduled)
        with lock:
            samples.extend(local)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples, errors


def bench_get(work: Path, package: Path, args: argparse.Namespace) -> None:
    emu = Emulator(work / "get")
    try:
        conn = Conn(emu.port)
        names = []
        for _ in range(20):
            names.append(
                conn.call("POST", f"/v1/{PARENT}/customJobs", job_body(package, 0))["name"]
            )
        deadline = time.monotonic() + 300
        while any(conn.call("GET", f"/v1/{n}")["state"] != "JOB_STATE_SUCCEEDED" for n in names):
            if time.monotonic() > deadline:
                raise TimeoutError("the jobs to read did not succeed")
            time.sleep(0.5)
        paths = [f"/v1/{n}" for n in names]
        p50s, p99s, cpus = [], [], []
        for run in range(args.repeat):
            before, cpu0 = load(), cpu_seconds(emu.proc.pid)
            samples, errors = open_loop(emu.port, paths, args.rate, args.seconds, args.connections)
            cpu = (cpu_seconds(emu.proc.pid) - cpu0) / max(1, len(samples)) * 1e6
            p50s.append(pct(samples, 0.5) * 1000)
            p99s.append(pct(samples, 0.99) * 1000)
            cpus.append(cpu)
            print(
                f"GET open loop, run {run + 1}/{args.repeat}: {summary(samples)}; emulator CPU "
                f"{cpu:.0f} us/request -- {args.rate:.0f} req/s x {args.seconds:.0f} s on "
                f"{args.connections} keep-alive connections, latency from each request's "
                f"scheduled send; errors {len(errors)}; load average {before} -> {load()}"
            )
        if args.repeat > 1:
            print(
                f"GET open loop over {args.repeat} runs: median p50 {statistics.median(p50s):.2f} "
                f"ms (range {min(p50s):.2f}-{max(p50s):.2f}), median p99 "
                f"{statistics.median(p99s):.2f} ms (range {min(p99s):.2f}-{max(p99s):.2f}), "
                f"emulator CPU {statistics.median(cpus):.0f} us/request (range "
                f"{min(cpus):.0f}-{max(cpus):.0f})"
            )
    finally:
        emu.stop()


FLOOR_SERVER = r"""
import socket, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
BODY = open(sys.argv[1], "rb").read()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    def log_message(self, *args):
        pass
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(BODY)))
        self._headers_buffer.append(b"\r\n" + BODY)
        self.flush_headers()
server = ThreadingHTTPServer(("127.0.0.1", 0), H)
server.daemon_threads = True
print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
"""


def bench_floor(work: Path, package: Path, args: argparse.Namespace) -> None:
    """The open loop against a minimal Python HTTP server answering one job's JSON."""
    answer = work / "answer.json"
    emu = Emulator(work / "floor")  # one real answer, so the body is the same size
    try:
        job = Conn(emu.port).call("POST", f"/v1/{PARENT}/customJobs", job_body(package, 0))
        answer.write_text(json.dumps(job))
    finally:
        emu.stop()
    proc = subprocess.Popen(
        [sys.executable, "-c", FLOOR_SERVER, str(answer)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().rsplit(":", 1)[1])
        paths = ["/v1/" + job["name"]]
        for run in range(args.repeat):
            before, cpu0 = load(), cpu_seconds(proc.pid)
            samples, errors = open_loop(port, paths, args.rate, args.seconds, args.connections)
            cpu = (cpu_seconds(proc.pid) - cpu0) / max(1, len(samples)) * 1e6
            print(
                f"floor, run {run + 1}/{args.repeat}: {summary(samples)}; server CPU {cpu:.0f} "
                f"us/request -- the same open loop against the standard library's threading "
                f"server answering a job's JSON from memory; errors {len(errors)}; load average "
                f"{before} -> {load()}"
            )
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def bench_jobs(work: Path, package: Path, args: argparse.Namespace) -> None:
    emu = Emulator(work / "jobs")
    try:
        probe = Conn(emu.port)
        first = probe.call("POST", f"/v1/{PARENT}/customJobs", job_body(package, 0.0))[
            "name"
        ]  # builds the package env before the clock starts
        deadline = time.monotonic() + 300
        while probe.call("GET", f"/v1/{first}")["state"] != "JOB_STATE_SUCCEEDED":
            if time.monotonic() > deadline:
                raise TimeoutError("the warm-up job did not succeed")
            time.sleep(0.2)
        names: list[str] = []
        done = threading.Event()
        gets: list[float] = []
        max_running = [0]
        seen_running: set[str] = set()
        lock = threading.Lock()
        before, cpu0 = load(), cpu_seconds(emu.proc.pid)
        t0 = time.perf_counter()

        def create(k: int) -> None:
            conn = Conn(emu.port)
            for _ in range(k, args.jobs, args.connections):
                name = conn.call(
                    "POST", f"/v1/{PARENT}/customJobs", job_body(package, args.job_seconds)
                )["name"]
                with lock:
                    names.append(name)

        def poll_get() -> None:
            conn = Conn(emu.port)
            while not done.is_set():
                start = time.perf_counter()
                conn.call("GET", f"/v1/{first}")
                gets.append(time.perf_counter() - start)
                time.sleep(0.02)

        def count_running() -> None:
            conn = Conn(emu.port)
            while not done.is_set():
                running = 0
                token = ""
                while True:
                    q = "pageSize=100&filter=state%3D%22JOB_STATE_RUNNING%22"
                    page = conn.call("GET", f"/v1/{PARENT}/customJobs?{q}&pageToken={token}")
                    running += len(page.get("customJobs", []))
                    seen_running.update(job["name"] for job in page.get("customJobs", []))
                    token = page.get("nextPageToken", "")
                    if not token:
                        break
                max_running[0] = max(max_running[0], running)
                time.sleep(0.5)

        watchers = [threading.Thread(target=poll_get), threading.Thread(target=count_running)]
        for w in watchers:
            w.start()
        creators = [threading.Thread(target=create, args=(k,)) for k in range(args.connections)]
        for c in creators:
            c.start()
        for c in creators:
            c.join()
        created = time.perf_counter() - t0
        conn = Conn(emu.port)
        limit = time.monotonic() + args.job_seconds + 600
        succeeded = 0
        while time.monotonic() < limit:
            succeeded = 0
            token = ""
            while True:
                q = "pageSize=100&filter=state%3D%22JOB_STATE_SUCCEEDED%22"
                page = conn.call("GET", f"/v1/{PARENT}/customJobs?{q}&pageToken={token}")
                succeeded += len(page.get("customJobs", []))
                token = page.get("nextPageToken", "")
                if not token:
                    break
            if succeeded >= args.jobs + 1:
                break
            time.sleep(1.0)
        finished = time.perf_counter() - t0
        cpu = cpu_seconds(emu.proc.pid) - cpu0
        done.set()
        for w in watchers:
            w.join()
        after = load()
        seen = len(seen_running & set(names))
        print(
            f"{args.jobs} jobs of {args.job_seconds:.0f} s: created in {created:.1f} s -- "
            f"{args.connections} clients creating as fast as answered"
        )
        print(
            f"  seen RUNNING {seen}/{args.jobs} (each at least once), most at once "
            f"{max_running[0]} -- one client listing RUNNING jobs (pages of 100) every 0.5 s"
        )
        print(
            f"  SUCCEEDED {succeeded - 1}/{args.jobs} after {finished:.1f} s -- from the first "
            "create, a client listing SUCCEEDED jobs every 1 s"
        )
        print(
            f"  GET meanwhile: {summary(gets)} -- one client GETting a finished job every 20 ms "
            "on a keep-alive connection, from its send"
        )
        print(
            f"  emulator CPU {cpu:.1f} s over the {finished:.0f} s (all threads); load average "
            f"{before} -> {after}"
        )
    finally:
        emu.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="all", choices=["get", "jobs", "floor", "all"])
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--job-seconds", type=float, default=20.0)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        package = build_package(work, extra={"benchtrain-0.1/benchtrain/sleep.py": SLEEP})
        if args.what in ("get", "all"):
            bench_get(work, package, args)
        if args.what in ("jobs", "all"):
            bench_jobs(work, package, args)
        if args.what in ("floor", "all"):
            bench_floor(work, package, args)


SLEEP = "import sys, time\ntime.sleep(float(sys.argv[1]))\n"

if __name__ == "__main__":
    main()
