"""How fast this host is right now: a fixed piece of CPU work and of memory work, timed.

A VM of one kind runs the same work at different speeds from hour to hour: on the 2-core x86_64
VMs this project is measured on, the test suite took 770-930 CPU-seconds in one phase and about
550 in another, with nothing in the load average or the steal time to tell the two apart (the
host's other tenants, its memory bandwidth). Every figure a benchmark prints moves with it, so the
benchmarks print this reference beside their own, at their start and end: two figures are
comparable when their references are.

Run alone: .venv/bin/python benchmarks/hostref.py [--rounds 5]

- **python**: a fixed pure-Python loop (integer arithmetic and a dict, one core, about 0.1 s).
- **copy**: 256 MiB copied between two NumPy buffers touched before (memory bandwidth; the
  checkpoint's snapshot is such a copy).

Each is the median over ``rounds`` runs, in milliseconds of wall time, with the process's CPU
time beside the loop's (the two part when another process shares the core).
"""

from __future__ import annotations

import argparse
import statistics
import time

MIB = 1 << 20


def _python_loop() -> int:
    table: dict[int, int] = {}
    total = 0
    for i in range(1_000_000):
        total = (total * 31 + i) % 1_000_003
        table[i & 1023] = total
    return total + len(table)


def measure(rounds: int = 5, copy_mib: int = 256) -> dict[str, float]:
    """Median wall milliseconds of each part (``python``, ``copy``) and the loop's CPU ms."""
    import numpy as np

    walls, cpus, copies = [], [], []
    for _ in range(rounds):
        w0, c0 = time.perf_counter(), time.process_time()
        _python_loop()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    src = np.ones(copy_mib * MIB, dtype=np.uint8)
    dst = np.zeros_like(src)
    np.copyto(dst, src)  # both touched: no page faults in the timed copies
    for _ in range(rounds):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        copies.append(time.perf_counter() - t0)
    ms = 1000.0
    return {
        "python": statistics.median(walls) * ms,
        "python_cpu": statistics.median(cpus) * ms,
        "copy": statistics.median(copies) * ms,
    }


def line(rounds: int = 5) -> str:
    """One line for a benchmark's output: the reference now, and what it measures."""
    ref = measure(rounds)
    return (
        f"host reference: Python loop {ref['python']:.0f} ms ({ref['python_cpu']:.0f} ms CPU), "
        f"256 MiB copy {ref['copy']:.1f} ms (medians of {rounds}; fixed work, so a slower host "
        "shows larger numbers: compare figures only where these agree)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    print(line(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
