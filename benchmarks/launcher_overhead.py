"""What the launcher costs: request latency, end-to-end overhead, detection delay, Vertex poll rate.

Run: .venv/bin/python benchmarks/launcher_overhead.py
Against the loopback recording server of the tests (the real GAPIC client over REST), and against
the local emulator when ``kfp_spot.emulator`` is installed.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "jobs"))

from artifacts import FakeArtifact
from recording_server import RecordingServer, Script

from kfp_spot.jobs.client import make_job_client, resolve_endpoint
from kfp_spot.jobs.entry import launch_spot_job
from kfp_spot.jobs.service import PollPolicy


def outputs(root: str) -> dict:
    return {
        "checkpoint": FakeArtifact(uri=os.path.join(root, "checkpoint")),
        "model": FakeArtifact(uri=os.path.join(root, "model")),
        "job_report": FakeArtifact(path=os.path.join(root, "job_report")),
        "gcp_resources": os.path.join(root, "gcp_resources"),
    }


def get_latency(n: int = 300) -> None:
    with RecordingServer(default=Script(["JOB_STATE_RUNNING"])) as server:
        client = make_job_client(resolve_endpoint("us-central1", server.endpoint))
        body = {"display_name": "bench", "job_spec": {"worker_pool_specs": []}}
        job = client.create_custom_job(parent="projects/p/locations/l", custom_job=body)
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            client.get_custom_job(name=job.name)
            samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    print(
        f"get_custom_job over REST to loopback: median {statistics.median(samples):.2f} ms, "
        f"p95 {samples[int(0.95 * n)]:.2f} ms (n={n})"
    )


def end_to_end(n: int = 10) -> None:
    times = []
    with RecordingServer(default=Script(["JOB_STATE_SUCCEEDED"])) as server:
        for _ in range(n):
            with tempfile.TemporaryDirectory() as root:
                t0 = time.perf_counter()
                launch_spot_job(
                    project="bench-project",
                    container_image_uri="us-docker.pkg.dev/p/r/i:1",
                    api_endpoint=server.endpoint,
                    **outputs(root),
                )
                times.append((time.perf_counter() - t0) * 1000)
    print(
        f"launch_spot_job, job already terminal at first poll (build, validate, create, "
        f"gcp_resources, poll, report): median {statistics.median(times):.1f} ms (n={n})"
    )


def detection_delay() -> None:
    try:
        from kfp_spot.emulator import Emulator
    except ImportError:
        print("emulator not installed: detection delay skipped")
        return
    import io
    import tarfile

    with tempfile.TemporaryDirectory() as root:
        pkg = os.path.join(root, "sleeper-0.1.tar.gz")
        files = {
            "sleeper-0.1/pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
            'build-backend = "setuptools.build_meta"\n[project]\nname = "sleeper"\n'
            'version = "0.1"\n[tool.setuptools]\npackages = ["sleeper"]\n',
            "sleeper-0.1/sleeper/__init__.py": "",
            "sleeper-0.1/sleeper/task.py": "import time\ntime.sleep(3)\n",
        }
        with tarfile.open(pkg, "w:gz") as tar:
            for name, text in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(text.encode())
                tar.addfile(info, io.BytesIO(text.encode()))
        delays = []
        env_cache = os.path.join(root, "env")
        with Emulator(os.path.join(root, "emu"), env_cache_dir=env_cache) as emu:
            for i in range(5):
                out = outputs(os.path.join(root, f"run{i}"))
                launch_spot_job(
                    project="bench-project",
                    package=FakeArtifact(uri=pkg, metadata={"python_module": "sleeper.task"}),
                    api_endpoint=emu.endpoint,
                    **out,
                )
                returned = time.time()
                name = sorted(emu.list_jobs(), key=lambda j: j["createTime"])[-1]["name"]
                ended = emu.job(name).end_time.timestamp()
                delays.append(returned - ended)
        print(
            "emulator job end -> launch_spot_job returns (auto local polling, report incl.): "
            f"median {statistics.median(delays) * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms"
        )
        # Recovery: a Spot job exhausted at once (7 immediate preemptions) -> the STANDARD
        # resubmission is created. Measured from the first job's end to the second's create.
        gaps = []
        for i in range(3):
            with Emulator(
                os.path.join(root, f"emu-x{i}"),
                env_cache_dir=env_cache,
                grace_period=0.1,
                preempt_at=(0.0,) * 7,
            ) as emu:
                launch_spot_job(
                    project="bench-project",
                    package=FakeArtifact(uri=pkg, metadata={"python_module": "sleeper.task"}),
                    api_endpoint=emu.endpoint,
                    fallback_after=1,
                    **outputs(os.path.join(root, f"x{i}")),
                )
                first, second = sorted(emu.list_jobs(), key=lambda j: j["createTime"])
                ended = emu.job(first["name"]).end_time.timestamp()
                created = emu.job(second["name"]).create_time.timestamp()
                gaps.append(created - ended)
        print(
            "Spot job exhausted (STOCKOUT) -> fallback CustomJob created: "
            f"median {statistics.median(gaps) * 1000:.0f} ms (n={len(gaps)})"
        )


def vertex_poll_rate() -> None:
    policy = PollPolicy.auto(local=False)
    for hours in (1, 24):
        t, interval, gets = 0.0, policy.initial, 0
        while t < hours * 3600:
            gets += 1
            t += interval
            interval = policy.next(interval)
        print(f"Vertex defaults: {gets} get_custom_job calls for a {hours} h job (one state)")


if __name__ == "__main__":
    get_latency()
    end_to_end()
    detection_delay()
    vertex_poll_rate()
