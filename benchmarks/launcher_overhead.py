"""What the launcher costs: request latency, end-to-end overhead, how soon a job's end is seen.

Run: .venv/bin/python benchmarks/launcher_overhead.py [--lengths 0.5 2 8 20] [--runs 8]
     [--skip-sdk] [--only lag]

1. ``get_custom_job`` latency over REST to a loopback server (the real GAPIC client).
2. A whole launch when the job is already terminal at the first poll (build, validate, create,
   gcp_resources, poll, report), against the recording server of the tests.
3. **Lag**: a CustomJob's end (its ``endTime`` in the emulator) to the moment the caller gets
   control back, for jobs of several lengths on the local emulator, for ``launch_spot_job``
   (report included) and, on the same jobs, for the Vertex SDK's ``aiplatform.CustomJob.run``.
   p50 and p95 per length. Each job runs its length plus a random 0-1 s (seeded): a poll runs on
   a fixed schedule from the job's start, so jobs of one exact length would all end at the same
   phase of it and show one lag, not the spread real jobs see.
4. Recovery: a Spot job exhausted at once (STOCKOUT) to the fallback CustomJob's creation.
5. How many ``get_custom_job`` calls the Vertex poll policy makes for 1 h and 24 h jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import random
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "jobs"))

from artifacts import FakeArtifact
from recording_server import RecordingServer, Script

from kfp_spot.jobs.entry import launch_spot_job
from kfp_spot.vertex.client import make_job_client, resolve_endpoint

PROJECT, LOCATION = "bench-project", "us-central1"


def outputs(root: str) -> dict:
    return {
        "checkpoint": FakeArtifact(uri=os.path.join(root, "checkpoint")),
        "model": FakeArtifact(uri=os.path.join(root, "model")),
        "job_report": FakeArtifact(path=os.path.join(root, "job_report")),
        "gcp_resources": os.path.join(root, "gcp_resources"),
    }


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def ms(values: list[float]) -> str:
    return (
        f"p50 {1000 * percentile(values, 0.5):6.0f} ms, p95 {1000 * percentile(values, 0.95):6.0f}"
        f" ms, max {1000 * max(values):6.0f} ms"
    )


def get_latency(n: int = 300) -> None:
    with RecordingServer(default=Script(["JOB_STATE_RUNNING"])) as server:
        client = make_job_client(resolve_endpoint("us-central1", server.endpoint))
        body = {"display_name": "bench", "job_spec": {"worker_pool_specs": []}}
        job = client.create_custom_job(parent="projects/p/locations/l", custom_job=body)
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            client.get_custom_job(name=job.name)
            samples.append(time.perf_counter() - t0)
    print(f"get_custom_job over REST to loopback (n={n}): {ms(samples)}")


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
                times.append(time.perf_counter() - t0)
    print(f"launch_spot_job, job terminal at the first poll (n={n}): {ms(times)}")


def sleeper_package(folder: str) -> str:
    """An sdist whose module ``sleeper.task SECONDS`` sleeps that long."""
    path = os.path.join(folder, "sleeper-0.1.tar.gz")
    files = {
        "sleeper-0.1/pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
        'build-backend = "setuptools.build_meta"\n[project]\nname = "sleeper"\n'
        'version = "0.1"\n[tool.setuptools]\npackages = ["sleeper"]\n',
        "sleeper-0.1/sleeper/__init__.py": "",
        "sleeper-0.1/sleeper/task.py": "import sys, time\ntime.sleep(float(sys.argv[1]))\n",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return path


@contextlib.contextmanager
def vertex_sdk(endpoint: str) -> Iterator[object]:
    """``google.cloud.aiplatform`` pointed at the emulator; its global config restored after."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform
    from google.cloud.aiplatform import initializer

    saved = dict(vars(initializer.global_config))
    aiplatform.init(
        project=PROJECT,
        location=LOCATION,
        api_endpoint=endpoint,
        api_transport="rest",
        credentials=AnonymousCredentials(),
    )
    try:
        yield aiplatform
    finally:
        vars(initializer.global_config).clear()
        vars(initializer.global_config).update(saved)


def _end_of_last_job(emu) -> float:
    name = sorted(emu.list_jobs(), key=lambda j: j["createTime"])[-1]["name"]
    return emu.job(name).end_time.timestamp()


def lag(lengths: list[float], runs: int, with_sdk: bool, seed: int = 7) -> None:
    """Job end -> caller returns, for launch_spot_job and CustomJob.run, per job length."""
    from kfp_spot.emulator import Emulator

    rng = random.Random(seed)

    with tempfile.TemporaryDirectory() as root:
        pkg = sleeper_package(root)
        package = FakeArtifact(uri=pkg, metadata={"python_module": "sleeper.task"})
        with Emulator(os.path.join(root, "emu"), env_cache_dir=os.path.join(root, "env")) as emu:
            counter = iter(range(1_000_000))

            def kfp_spot_run(seconds: float) -> None:
                launch_spot_job(
                    project=PROJECT,
                    location=LOCATION,
                    package=package,
                    args=[str(seconds)],
                    api_endpoint=emu.endpoint,
                    **outputs(os.path.join(root, f"run{next(counter)}")),
                )

            tools: dict[str, Callable[[float], None]] = {"launch_spot_job": kfp_spot_run}
            stack = contextlib.ExitStack()
            if with_sdk:
                sdk = stack.enter_context(vertex_sdk(emu.endpoint))

                def sdk_run(seconds: float) -> None:
                    job = sdk.CustomJob(
                        display_name="bench-sdk",
                        worker_pool_specs=[
                            {
                                "machine_spec": {"machine_type": "n1-standard-4"},
                                "replica_count": 1,
                                "python_package_spec": {
                                    "executor_image_uri": "us-docker.pkg.dev/vertex-ai/training/"
                                    "sklearn-cpu.1-6:latest",
                                    "package_uris": [pkg],
                                    "python_module": "sleeper.task",
                                    "args": [str(seconds)],
                                },
                            }
                        ],
                        staging_bucket=os.path.join(root, "staging"),
                    )
                    strategy = sdk.compat.types.custom_job.Scheduling.Strategy.SPOT
                    job.run(scheduling_strategy=strategy)

                tools["aiplatform.CustomJob.run"] = sdk_run
            with stack:
                kfp_spot_run(0.1)  # warm-up: the first job builds the package's environment
                results: dict[tuple[str, float], list[float]] = {}
                for seconds in lengths:
                    for _ in range(runs):
                        jittered = round(seconds + rng.uniform(0.0, 1.0), 3)
                        for tool, run in tools.items():  # interleaved: same jobs, same load
                            run(jittered)
                            returned = time.time()
                            results.setdefault((tool, seconds), []).append(
                                returned - _end_of_last_job(emu)
                            )
    print(f"job end -> caller returns, on the local emulator ({runs} jobs per length):")
    print(f"  {'job length':>12}  {'tool':<26} lag")
    for (tool, seconds), values in results.items():
        length = f"{seconds:g}-{seconds + 1:g} s"
        print(f"  {length:>12}  {tool:<26} {ms(values)}")


def fallback_delay(n: int = 3) -> None:
    """A Spot job exhausted at once (7 immediate preemptions) -> the STANDARD one is created."""
    from kfp_spot.emulator import Emulator

    with tempfile.TemporaryDirectory() as root:
        pkg = sleeper_package(root)
        gaps = []
        for i in range(n):
            with Emulator(
                os.path.join(root, f"emu{i}"),
                env_cache_dir=os.path.join(root, "env"),
                grace_period=0.1,
                preempt_at=(0.0,) * 7,
            ) as emu:
                launch_spot_job(
                    project="bench-project",
                    package=FakeArtifact(uri=pkg, metadata={"python_module": "sleeper.task"}),
                    args=["1"],
                    api_endpoint=emu.endpoint,
                    fallback_after=1,
                    **outputs(os.path.join(root, f"x{i}")),
                )
                first, second = sorted(emu.list_jobs(), key=lambda j: j["createTime"])
                ended = emu.job(first["name"]).end_time.timestamp()
                created = emu.job(second["name"]).create_time.timestamp()
                gaps.append(created - ended)
    print(f"Spot job exhausted (STOCKOUT) -> fallback CustomJob created (n={n}): {ms(gaps)}")


def vertex_poll_rate() -> None:
    from kfp_spot.jobs.backend import backend_for

    policy = backend_for(resolve_endpoint(LOCATION)).poll
    for hours in (1, 24):
        t, interval, gets = 0.0, policy.initial, 0
        while t < hours * 3600:
            gets += 1
            t += interval
            interval = policy.next(interval)
        print(f"Vertex defaults: {gets} get_custom_job calls for a {hours} h job (one state)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=float, nargs="+", default=[0.5, 2.0, 8.0, 20.0])
    parser.add_argument("--runs", type=int, default=8, help="jobs per length and tool")
    parser.add_argument("--skip-sdk", action="store_true", help="only launch_spot_job's lag")
    parser.add_argument("--only", choices=["lag"], help="run only this part")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger().setLevel(logging.WARNING)
    if args.only != "lag":
        get_latency()
        end_to_end()
    lag(args.lengths, args.runs, with_sdk=not args.skip_sdk)
    if args.only != "lag":
        fallback_delay()
        vertex_poll_rate()


if __name__ == "__main__":
    main()
