"""Figures for the template registry and the run reports (prints them; asserts nothing).

    .venv/bin/python benchmarks/registry_and_reports.py [--rounds N]

Registry: push / list_tags / pull latency of the real kfp.registry.RegistryClient against a local
`RegistryServer`, and the time to restart a server over a root with many versions.
Reports: time to write report.png + report.md for a run with 7 attempts and 60 checkpoints.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kfp import compiler, dsl

import kfp_spot.registry as registry
from kfp_spot.registry import RegistryServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reports"))
from test_reports import Attempt, build_run

from kfp_spot.reports import write_report


@dsl.component(base_image="python:3.11-slim", install_kfp_package=False)
def add(a: int, b: int) -> int:
    return a + b


def make_template(folder: Path, i: int) -> Path:
    @dsl.pipeline(name="bench-add", description=f"variant {i}")
    def pipe(a: int = i, b: int = 2) -> int:
        return add(a=a, b=b).output

    path = folder / f"t{i}.yaml"
    compiler.Compiler().compile(pipe, package_path=str(path))
    return path


def ms(values: list[float]) -> str:
    return f"median {1000 * statistics.median(values):.1f} ms, max {1000 * max(values):.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        templates = [make_template(tmp, i) for i in range(args.rounds)]
        push_t, tags_t, pull_t = [], [], []
        with RegistryServer(tmp / "root") as server:
            host = server.repository_url()
            for i, template in enumerate(templates):
                t = time.perf_counter()
                registry.push(template, host, f"1.0.{i}")
                push_t.append(time.perf_counter() - t)
                t = time.perf_counter()
                registry.list_tags(host, "bench-add")
                tags_t.append(time.perf_counter() - t)
                t = time.perf_counter()
                registry.pull(host, "bench-add", output=tmp / "pulled.yaml")
                pull_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        with RegistryServer(tmp / "root") as server:
            n = len(registry.list_tags(server.repository_url(), "bench-add"))
        restart = time.perf_counter() - t
        size = templates[0].stat().st_size
        print(f"registry: {args.rounds} versions of a {size}-byte template, real RegistryClient")
        print(f"  push      {ms(push_t)}")
        print(f"  list_tags {ms(tags_t)} (up to {args.rounds + 1} tags)")
        print(f"  pull      {ms(pull_t)}")
        print(f"  restart + list {n} tags: {1000 * restart:.1f} ms")

        attempts = [Attempt(3, 300, [i / 10 for i in range(1, 10)], "PREEMPTED", 0.4, 2.0)] * 6
        attempts.append(Attempt(3, 300, [i / 7 for i in range(1, 8)], "SUCCEEDED", 0.4, 2.0))
        build_run(tmp / "run", attempts)
        times = []
        for _ in range(5):
            t = time.perf_counter()
            report = write_report(tmp / "run")
            times.append(time.perf_counter() - t)
        print(
            f"report: 7 attempts, {report.summary.checkpoints} checkpoints: {ms(times)}; "
            f"PNG {report.png.stat().st_size} bytes"
        )


if __name__ == "__main__":
    main()
