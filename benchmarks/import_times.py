"""What importing each component's runtime entry module costs, beside KFP's own floor.

Run: .venv/bin/python benchmarks/import_times.py [--runs 5] [--heaviest 8]

A KFP task runs ``kfp.dsl.executor_main`` and then imports the component's runtime entry module
before it does any work, so that import is paid by every task. For each entry module (and
``kfp.dsl.executor_main`` for scale) this starts ``--runs`` fresh interpreters and measures two
figures per run:

- **wall**: ``time.perf_counter()`` around ``import MODULE`` inside the fresh interpreter (the
  interpreter's own start-up is not counted);
- **importtime**: the sum of ``python -X importtime``'s cumulative microseconds of the top-level
  imports ``import MODULE`` triggered (what the interpreter itself charges to the import).

It prints the medians first (with the ratio to ``kfp.dsl.executor_main``'s median wall time),
then whether each module pulled in ``google.cloud.aiplatform_v1`` (its GAPIC types and service
clients), then with ``--heaviest N`` the N packages with the largest cumulative time under each
entry module (from the last run). The machine's load is printed too: on a busy machine every
figure grows, the ratios much less. Nothing here is run by the test suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

FLOOR = "kfp.dsl.executor_main"
# The module each component body imports (docs/ARCHITECTURE.md, "Runtime entry points").
ENTRY_MODULES = (
    "kfp_spot.packaging.component",
    "kfp_spot.jobs.entry",
    "kfp_spot.evaluation.component",
    "kfp_spot.promotion",
    "kfp_spot.serving.entry",
)
_MARKER = "-- import starts --"
_PROBE = """
import sys, time
sys.stderr.write("{marker}\\n")
sys.stderr.flush()
t = time.perf_counter()
import {module}
wall = time.perf_counter() - t
gapic = sorted(m for m in sys.modules if m.startswith("google.cloud.aiplatform_v1"))
print(wall, len(gapic), sum(m.startswith("google.cloud.aiplatform_v1.services.") for m in gapic))
"""


def _importtime_lines(stderr: str) -> list[tuple[int, str, int]]:
    """``(depth, module, cumulative_us)`` of each ``-X importtime`` line, in printed order."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|", 2)
        depth = (len(name) - len(name.lstrip(" "))) // 2
        rows.append((depth, name.strip(), int(cumulative)))
    return rows


def measure(module: str) -> tuple[float, float, int, int, list[tuple[int, str, int]]]:
    """One fresh interpreter importing ``module``: wall s, importtime s, GAPIC modules, rows."""
    code = _PROBE.format(module=module, marker=_MARKER)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    wall_text, gapic, services = done.stdout.split()
    # Rows printed after the probe's marker belong to ``import module``.
    rows = _importtime_lines(done.stderr.split(_MARKER, 1)[1])
    total_us = sum(cumulative for depth, _, cumulative in rows if depth == 0)
    return float(wall_text), total_us / 1e6, int(gapic), int(services), rows


def heaviest(rows: list[tuple[int, str, int]], n: int) -> list[tuple[str, int]]:
    """The ``n`` packages (``google.x.y`` or a first name) with the most cumulative time."""
    by_package: dict[str, int] = {}
    for _, name, cumulative in rows:
        parts = name.split(".")
        package = ".".join(parts[:3] if parts[0] == "google" else parts[:1])
        by_package[package] = max(by_package.get(package, 0), cumulative)
    return sorted(by_package.items(), key=lambda kv: -kv[1])[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--heaviest", type=int, default=0)
    parser.add_argument("modules", nargs="*", default=list(ENTRY_MODULES))
    args = parser.parse_args()
    results: dict[str, tuple[float, float, int, int, list[tuple[int, str, int]]]] = {}
    for module in (FLOOR, *args.modules):
        runs = [measure(module) for _ in range(args.runs)]
        results[module] = (
            statistics.median(r[0] for r in runs),
            statistics.median(r[1] for r in runs),
            runs[-1][2],
            runs[-1][3],
            runs[-1][4],
        )
    floor_wall = results[FLOOR][0]
    print(
        f"median of {args.runs} fresh interpreters each; wall = perf_counter around the import, "
        f"importtime = sum of -X importtime's top-level cumulative; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {sys.executable}"
    )
    print(f"{'module':<26} {'wall s':>8} {'x floor':>8} {'importtime s':>13}  aiplatform_v1")
    for module, (wall, itime, gapic, services, _) in results.items():
        loaded = "no" if not gapic else f"{gapic} modules, {services} services"
        print(f"{module:<26} {wall:>8.3f} {wall / floor_wall:>8.2f} {itime:>13.3f}  {loaded}")
    if args.heaviest:
        for module, (*_, rows) in results.items():
            print(f"\nheaviest imports under {module} (cumulative s):")
            for package, cumulative in heaviest(rows, args.heaviest):
                print(f"  {package:<40} {cumulative / 1e6:.3f}")


if __name__ == "__main__":
    main()
