"""Wall time of the CLI's list/describe commands against a running emulator; prints figures.

Method: a local emulator with ``--jobs`` CustomJobs (their package is missing, so each fails at
once; one VM, so at most one runs); each command is run ``--runs`` times as a fresh ``kfp-spot``
process (what a user waits for: interpreter start, imports, the REST call, output) and the median
and max wall times are printed, with the load average at the time. For comparison, the same number
of fresh interpreters importing ``google.cloud.aiplatform_v1`` alone (what every such command
paid before it spoke REST) and doing nothing (the interpreter's floor).

``--compare TREE``: also the same commands from another checkout's ``kfp_spot`` (e.g. ``git archive
REV kfp_spot | tar -x -C TREE``), run as ``python -c 'from kfp_spot.cli import main; main()'`` with
``PYTHONPATH=TREE``, and this checkout's the same way, interleaved run by run.

Usage: python benchmarks/cli_bench.py [--runs 5] [--jobs 20] [--compare TREE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kfp_spot.emulator import Emulator

PROJECT = "bench"
KFP_SPOT = str(Path(sys.executable).with_name("kfp-spot"))


def timed(
    argv: list[str], runs: int, env: dict[str, str] | None = None, cwd: str | None = None
) -> list[float]:
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, timeout=120, env=env, cwd=cwd)
        walls.append(time.perf_counter() - t0)
    return walls


def compare(tree: str, args: list[str], runs: int) -> tuple[list[float], list[float]]:
    """(other tree, this checkout) wall times of ``kfp-spot ARGS``, interleaved."""
    here = str(Path(__file__).resolve().parent.parent)
    cmd = [sys.executable, "-c", "from kfp_spot.cli import main; main()", *args]
    other: list[float] = []
    this: list[float] = []
    for _ in range(runs):
        # cwd too: ``python -c`` puts the working directory first on sys.path
        other += timed(cmd, 1, {**os.environ, "PYTHONPATH": tree}, cwd=tree)
        this += timed(cmd, 1, {**os.environ, "PYTHONPATH": here}, cwd=here)
    return other, this


def show(what: str, walls: list[float]) -> None:
    print(
        f"{what:58s} median {statistics.median(walls):6.3f} s, max {max(walls):6.3f} s "
        f"({len(walls)} fresh processes)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--compare", metavar="TREE", help="another checkout to compare with")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        capacity = {"n1-standard-4": 1}
        with Emulator(Path(tmp) / "state", capacity=capacity) as emu:
            import json
            import urllib.request

            body = {
                "displayName": "cli-bench",
                "jobSpec": {
                    "workerPoolSpecs": [
                        {
                            "machineSpec": {"machineType": "n1-standard-4"},
                            "replicaCount": "1",
                            "pythonPackageSpec": {
                                "executorImageUri": (
                                    "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6"
                                ),
                                "packageUris": [str(Path(tmp) / "missing.tar.gz")],
                                "pythonModule": "trainer.task",
                            },
                        }
                    ],
                    "scheduling": {"strategy": "SPOT"},
                },
            }
            name = ""
            for _ in range(args.jobs):
                request = urllib.request.Request(
                    f"{emu.endpoint}/v1/projects/{PROJECT}/locations/us-central1/customJobs",
                    data=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(request, timeout=30) as answer:
                    name = json.load(answer)["name"]
            api = ["--api-endpoint", emu.endpoint]
            show(
                f"kfp-spot jobs list ({args.jobs} jobs)",
                timed([KFP_SPOT, "jobs", "list", "--project", PROJECT, *api], args.runs),
            )
            show(
                "kfp-spot jobs describe",
                timed([KFP_SPOT, "jobs", "describe", name, *api], args.runs),
            )
            if args.compare:
                listing = ["jobs", "list", "--project", PROJECT, *api]
                other, this = compare(args.compare, listing, args.runs)
                show(f"jobs list, {args.compare} (interleaved)", other)
                show("jobs list, this checkout (interleaved)", this)
            show(
                "kfp-spot endpoint list (none)",
                timed([KFP_SPOT, "endpoint", "list", "--project", PROJECT, *api], args.runs),
            )
    py = sys.executable
    show(
        "reference: python -c 'import google.cloud.aiplatform_v1'",
        timed([py, "-c", "import google.cloud.aiplatform_v1"], args.runs),
    )
    show("floor: python -c pass", timed([py, "-c", "pass"], args.runs))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
