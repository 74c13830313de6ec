"""Checkpoint benchmark for kfp_spot.trainer: cost of a checkpoint, of a restart, goodput.

    .venv/bin/python benchmarks/checkpoint_bench.py COMMAND [opts]

COMMAND: throughput, stall, pages, restart, goodput, memory or all (the default).

0. **checksums** (with throughput) — CRC32C as kfp-spot computes it, against sha256, zlib's crc32
   and (when installed) crc32c-rs, ICRAR's crc32c package and BLAKE3, on one core.
1. **throughput** — in one run on one disk: ``dd bs=4M conv=fsync`` of ``--mib`` MiB (default
   256), a synchronous ``CheckpointManager.save`` of a float32 array that size (its speed as a
   fraction of dd's), the loop stall of an async save (first save, and later saves that reuse the
   snapshot buffers; as a fraction of the sync save), each a range over ``--repeats`` runs;
   then a verified restore against ``numpy.load`` of the same file plus the CRC32C of the loaded
   array, in alternating rounds (at least 9): medians and ranges of the ratio, wall and CPU.
4. **import time** (with throughput) — ``import kfp_spot.trainer``, ``from kfp_spot.trainer
   import CheckpointManager`` and ``import numpy`` (for scale) in fresh interpreters, from this
   checkout (benchmarks/trainer_import.py measures the wheel a VM installs).
2. **stall** — a training loop (real NumPy work per step) that checkpoints a 256 MiB state every
   K steps, in ``--stall-repeats`` rounds (default 9: one round's overhead moves by ±10% with the
   machine, so a median of fewer cannot tell 5% from 10%) after a warm-up, each round running the
   loop without checkpoints, with synchronous saves, with ``async_save`` through a new
   ``CheckpointManager`` (a short attempt: its first save allocates the snapshot buffers, memory
   new to the process) and through one ``CheckpointManager`` kept across the rounds (a long
   attempt after its first save), the order rotating: the time the loop is blocked per checkpoint
   (and at its first), and the overhead in wall and CPU time (user + system of the process)
   against the same round's loop without checkpoints; medians and ranges. Then where a kept
   manager's save costs the loop its time: the added time of the save's own step (the stall) and
   of the steps after it (the background write), beside the CPU time of each part of a save
   (copy, CRC32C, write and commit) run alone.
2b. **pages** — in one process, paired rounds of ``--stall-every`` steps with one save each
   through two kept managers: snapshot buffers moved into huge pages after the first write (as
   kfp-spot does where Linux has transparent huge pages) against buffers kept in small pages; the
   loop's added time per save and the machine's added CPU (``/proc/stat``), medians.
5. **restart** — SIGTERM to a training process, its save on the notice, its exit, a new process,
   its restore and its first step; minus the trainer's own floor (a process that imports NumPy and
   takes one step), what kfp-spot adds to a restart.
6. **goodput** — useful training time / wall time of a run killed at random (exponential, mean
   ``--mtbp``; the same draws for every policy within a seed) for the Young-Daly optimum T*
   (a fixed interval from the measured save cost and the true MTBP), ``auto`` without a hint
   (it learns the rate from the run's attempt records), and ``auto`` given the true MTBP;
   ``--all-policies`` adds T*/4, 4T*, 16T* and a save on SIGTERM with a 30 s grace period. By
   default this script plays the kill/restart cycle on plain processes (``--harness local``);
   ``--harness emulator`` runs Spot CustomJobs on the kfp-spot emulator instead (which adds its
   own scheduling to every restart).
7. **memory** — the memory a save of a dict of ``--mib`` MiB of float64 in 8 arrays (one
   ``.npz``) holds beside the state, sync and async, each in a fresh process: the growth of its
   peak RSS (``ru_maxrss``) over the save and tracemalloc's peak (NumPy's and Python's
   allocations; an async save's large snapshot buffers are anonymous mappings it does not see).

Results go to stdout as plain tables. Nothing here is run by the test suite.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import hostref  # noqa: E402 - the host's speed now, printed beside the figures

from kfp_spot import checkpoints  # noqa: E402
from kfp_spot.checkpoints import checksum  # noqa: E402
from kfp_spot.trainer import CheckpointManager, snapshot, young_daly  # noqa: E402

MIB = 1 << 20


# -- 7. memory --------------------------------------------------------------------------------
def memory(workdir: Path, mib: int) -> None:
    """Each mode's save in its own process (a fresh ``ru_maxrss``); see the module docstring."""
    print(f"\n## memory of a save of a dict of arrays ({mib} MiB in 8 arrays, one .npz)")
    for mode in ("sync", "async"):
        root = str(workdir / f"memory-{mode}")
        command = [sys.executable, __file__, "memory-worker", "--mode", mode, "--root", root]
        out = subprocess.run(
            [*command, "--mib", str(mib)],
            check=True,
            capture_output=True,
            text=True,
        )
        print(out.stdout.strip())


def memory_worker(args: argparse.Namespace) -> int:
    import tracemalloc

    rng = np.random.default_rng(0)
    value = {f"layer{i}": rng.random(args.mib * MIB // 64) for i in range(8)}
    size = sum(array.nbytes for array in value.values())
    with CheckpointManager(
        args.root, handle_signals=False, record_attempts=False, async_save=args.mode == "async"
    ) as ckpt:
        ckpt.save(1, {"warm": {"a": np.zeros(3)}})  # what a save imports, imported
        ckpt.wait()
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        tracemalloc.start()
        ckpt.save(2, {"params": value})
        ckpt.wait()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        f"{args.mode:>5}: state {size / MIB:.0f} MiB; peak RSS grew {(rss1 - rss0) / MIB:.0f} MiB "
        f"({(rss1 - rss0) / size:.2f}x the state), tracemalloc peak {peak / MIB:.0f} MiB"
    )
    shutil.rmtree(args.root, ignore_errors=True)
    return 0


# -- 1. throughput -----------------------------------------------------------------------------
def _dd(args: list[str]) -> float:
    """Run dd; return its MB/s figure converted to MiB/s."""
    proc = subprocess.run(["dd", *args], capture_output=True, text=True, check=True)
    match = re.search(r"([\d.]+) s, ", proc.stderr)
    copied = re.search(r"^(\d+) bytes", proc.stderr, re.M)
    if not match or not copied:
        raise RuntimeError(f"unexpected dd output: {proc.stderr}")
    return int(copied.group(1)) / float(match.group(1)) / MIB


def _cpu() -> float:
    """CPU time (user + system) of this process so far, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def checksums(mib: int) -> None:
    print(f"\n## 0. Checksums of a {mib} MiB buffer on one core (best of 3)")
    import zlib

    import google_crc32c

    data = np.random.default_rng(0).random(mib * MIB // 8)
    view = memoryview(data).cast("B")
    rows = [
        (
            f"crc32c, kfp-spot (by {checksum.implementation()}, no copy, GIL released)",
            lambda: checkpoints.crc32c(view),
        ),
        (
            "crc32c, google_crc32c.value() (bytes only: copies first)",
            lambda: google_crc32c.value(bytes(view)),
        ),
        ("sha256 (hashlib, OpenSSL)", lambda: hashlib.sha256(view).digest()),
        ("crc32 (zlib, not what GCS reports)", lambda: zlib.crc32(view)),
    ]
    try:
        import crc32c_rs  # the Unlicense; optional, as ICRAR's is
    except ImportError:
        print("(crc32c-rs not installed: pip install crc32c-rs to add its row)")
    else:
        rows.append(("crc32c, the crc32c-rs package", lambda: crc32c_rs.crc32c(view)))
    try:
        import crc32c  # ICRAR's package: LGPL, not a kfp-spot dependency
    except ImportError:
        print("(crc32c not installed: pip install crc32c to add its row)")
    else:
        rows.append(("crc32c, the crc32c package (ICRAR's; LGPL)", lambda: crc32c.crc32c(view)))
    try:
        import blake3
    except ImportError:
        print("(blake3 not installed: pip install blake3 to add its row)")
    else:
        rows.append(("blake3 (one thread)", lambda: blake3.blake3(view).digest()))
        rows.append(
            (
                "blake3 (all cores)",
                lambda: blake3.blake3(view, max_threads=blake3.blake3.AUTO).digest(),
            )
        )
    print(f"| {'checksum':<72} | MiB/s |")
    print(f"|{'-' * 74}|-------|")
    for name, fn in rows:
        print(f"| {name:<72} | {mib / _best(fn, 3):>5.0f} |")


def throughput(workdir: Path, mib: int, repeats: int) -> dict:
    print(f"\n## 1. Save / restore of a {mib} MiB NumPy state, disk of {workdir}")
    weights = np.random.default_rng(0).random(mib * MIB // 4, dtype=np.float32)
    state = {"weights": weights}
    warm = np.ones(mib * MIB * 3 // 8)  # have the VM back the memory the runs will use
    del warm
    rows: dict[str, list[float]] = {k: [] for k in ("dd", "save", "stall", "stall_first")}
    for i in range(repeats):
        target = workdir / f"dd-{i}.bin"
        rows["dd"].append(
            mib / _dd(["if=/dev/zero", f"of={target}", "bs=4M", f"count={mib // 4}", "conv=fsync"])
        )
        target.unlink()
        root = workdir / f"ck-{i}"
        ckpt = CheckpointManager(
            str(root), handle_signals=False, record_attempts=False, keep_last=2
        )
        t0 = time.perf_counter()
        ckpt.save(1, state)
        rows["save"].append(time.perf_counter() - t0)

        shutil.rmtree(root)
        # async: the loop waits only for the copy into the (reused) snapshot buffers
        aroot = workdir / f"async-{i}"
        actx = CheckpointManager(
            str(aroot), handle_signals=False, record_attempts=False, async_save=True, keep_last=2
        )
        for step in range(1, 4):
            t0 = time.perf_counter()
            actx.save(step, state)
            (rows["stall_first"] if step == 1 else rows["stall"]).append(time.perf_counter() - t0)
            actx.wait()
        actx.close()
        shutil.rmtree(aroot)

    def rng(key: str, scale: float = 1.0) -> str:
        values = [v * scale for v in rows[key]]
        return f"{min(values):.3f}-{max(values):.3f}"

    dd_mibs = [mib / v for v in rows["dd"]]
    save_mibs = [mib / v for v in rows["save"]]
    print(f"| {'operation':<64} | seconds ({repeats} runs) |")
    print(f"|{'-' * 66}|{'-' * 21}|")
    for name, key in [
        ("raw write, dd bs=4M conv=fsync", "dd"),
        ("sync save (CRC32C while writing from the array, fsync, manifest)", "save"),
        ("async save: loop stall, first save (fresh snapshot buffers)", "stall_first"),
        ("async save: loop stall, later saves (buffers reused)", "stall"),
    ]:
        print(f"| {name:<64} | {rng(key):>19} |")
    ratio_save = [s / d for s, d in zip(save_mibs, dd_mibs, strict=True)]
    stall = [
        min(rows["stall"][2 * i : 2 * i + 2]) / rows["save"][i] for i in range(len(rows["save"]))
    ]
    med = statistics.median
    best = {k: min(v) for k, v in rows.items()}
    print(
        f"sync save speed / dd: best of {repeats} {best['dd'] / best['save']:.2f}, per run "
        f"{min(ratio_save):.2f}-{max(ratio_save):.2f}, median {med(ratio_save):.2f} (goal >= 0.9)"
    )
    print(
        f"async stall / sync save: best of {repeats} {best['stall'] / best['save']:.3f}, per run "
        f"{min(stall):.3f}-{max(stall):.3f}, median {med(stall):.3f} (goal <= 0.1)"
    )
    print("(the machine is shared: best of N is the figure with the least interference)")
    restore_vs_load(workdir, weights, max(repeats, 9))
    return rows


def restore_vs_load(workdir: Path, weights: np.ndarray, rounds: int) -> None:
    """Verified restore against ``numpy.load`` of the same file plus the CRC32C of its bytes.

    One committed step; then ``rounds`` rounds, each timing a verified restore (a new
    CheckpointManager: list the steps, read and check the manifest, read the file with its
    CRC32C, decode) and ``numpy.load`` of the step's ``.npy`` followed by the CRC32C of the
    loaded array, in turns (the order alternates: whichever runs first may find the memory it
    frees reused). Both read from the page cache into new memory. Figures: medians and ranges
    of each round's ratio, in wall time and in CPU time (user + system of the process).
    """
    root = workdir / "restore"
    CheckpointManager(str(root), handle_signals=False, record_attempts=False).save(
        1, {"weights": weights}
    )
    path = root / "step-1" / "weights.npy"
    expected = weights.tobytes()

    def restore() -> tuple[float, float]:
        c0, t0 = _cpu(), time.perf_counter()
        restored = CheckpointManager(str(root), handle_signals=False, record_attempts=False)
        state = restored.restore()
        took = time.perf_counter() - t0, _cpu() - c0
        assert state is not None and state.state["weights"].tobytes() == expected
        return took

    def load() -> tuple[float, float]:
        c0, t0 = _cpu(), time.perf_counter()
        loaded = np.load(path)
        checkpoints.crc32c(memoryview(loaded).cast("B"))
        return time.perf_counter() - t0, _cpu() - c0

    load()
    restore()  # warm-up: the page cache, the code paths
    times: dict[str, list[tuple[float, float]]] = {"restore": [], "load": []}
    for i in range(rounds):
        order = (("restore", restore), ("load", load))
        for name, fn in order if i % 2 else order[::-1]:
            times[name].append(fn())
    shutil.rmtree(root)
    med = statistics.median
    for j, what in ((0, "wall"), (1, "CPU")):
        ratios = [r[j] / n[j] for r, n in zip(times["restore"], times["load"], strict=True)]
        print(
            f"verified restore / (numpy.load + CRC32C), {what}: median {med(ratios):.2f} "
            f"[{min(ratios):.2f}-{max(ratios):.2f}] over {rounds} rounds (goal <= 1.1); "
            f"restore {med(r[j] for r in times['restore']):.3f}s, numpy.load + CRC32C "
            f"{med(n[j] for n in times['load']):.3f}s (medians)"
        )


def _deployed_env() -> dict[str, str]:
    """The environment of an installed trainer: this checkout first, bytecode caches on."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its .pyc files
    return env


def import_time(repeats: int) -> None:
    print(
        f"\n## 4. Imports in a fresh interpreter, this checkout ({repeats} runs; "
        "benchmarks/trainer_import.py measures the wheel the VM installs)"
    )
    code = "import time; t = time.perf_counter(); {m}; print(time.perf_counter() - t)"
    env = _deployed_env()
    for statement in (
        "import kfp_spot.trainer",
        "from kfp_spot.trainer import CheckpointManager",
        "import numpy",
    ):
        subprocess.run([sys.executable, "-c", statement], check=True, env=env)  # .pyc
        times = [
            float(
                subprocess.run(
                    [sys.executable, "-c", code.format(m=statement)],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=env,
                ).stdout
            )
            for _ in range(repeats)
        ]
        print(
            f"{statement}: {min(times) * 1000:.0f}-{max(times) * 1000:.0f} ms "
            f"(median {statistics.median(times) * 1000:.0f} ms)"
        )


# One attempt of the restart measurement, run as `python -c`: the trainer's own floor ("bare")
# imports only NumPy; the other mode restores, steps every 10 ms and stops on SIGTERM.
RESTART_WORKER = """
import sys, time
import numpy
mode, root, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "bare":
    time.sleep(0.01)
    print("first-step", repr(time.time()), flush=True)
    sys.exit(0)
from kfp_spot.trainer import CheckpointManager
with CheckpointManager(root, interval="1000000", grace_period=30.0) as ckpt:
    restored = ckpt.restore()
    step = restored.step if restored else 0
    weights = restored.state["weights"] if restored else numpy.zeros(mib << 18, numpy.float32)
    first = step + 1
    while True:
        time.sleep(0.01)
        weights[step % weights.size] += 1
        step += 1
        if step == first:
            print("first-step", repr(time.time()), flush=True)
        ckpt.maybe_save(step, {"weights": weights})
        if ckpt.should_stop:
            sys.exit(143)
"""


def restart(workdir: Path, repeats: int, state_mib: int) -> None:
    print(
        f"\n## 5. Preemption -> the next attempt's first step ({state_mib} MiB state, "
        f"{repeats} runs): SIGTERM, save on the notice, exit, new process, restore, one 10 ms step"
    )
    env = _deployed_env()
    base = [sys.executable, "-c", RESTART_WORKER]
    subprocess.run([*base, "bare", "", "0"], check=True, env=env, stdout=subprocess.DEVNULL)

    def first_step(proc: subprocess.Popen) -> float:
        for line in proc.stdout:
            if line.startswith("first-step "):
                return float(line.split()[1])
        raise RuntimeError(f"worker ended without a step: {proc.wait()}")

    floors, totals = [], []
    quiet = subprocess.DEVNULL
    for i in range(repeats):
        t0 = time.time()
        bare = subprocess.Popen(
            [*base, "bare", "", "0"], stdout=subprocess.PIPE, text=True, env=env
        )
        floors.append(first_step(bare) - t0 - 0.01)
        bare.wait()
        root = str(workdir / f"restart-{i}")
        cmd = [*base, "train", root, str(state_mib)]
        first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=quiet, text=True, env=env)
        first_step(first)
        time.sleep(0.3)
        t0 = time.time()
        first.send_signal(signal.SIGTERM)
        first.wait()
        nxt = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=quiet, text=True, env=env)
        totals.append(first_step(nxt) - t0 - 0.01)
        nxt.send_signal(signal.SIGTERM)
        nxt.wait()
        shutil.rmtree(root, ignore_errors=True)
    added = [t - f for t, f in zip(totals, floors, strict=True)]
    print(
        f"SIGTERM -> next first step: {min(totals):.3f}-{max(totals):.3f}s; the trainer's floor "
        f"(a process importing numpy, to its first step): {min(floors):.3f}-{max(floors):.3f}s; "
        f"kfp-spot adds {min(added):.3f}-{max(added):.3f}s per run, median "
        f"{statistics.median(added):.3f}s; best of {repeats}: {min(totals) - min(floors):.3f}s"
    )


# -- 2. stall ----------------------------------------------------------------------------------
def _manager(root: Path, every: int, async_save: bool) -> CheckpointManager:
    return CheckpointManager(
        str(root),
        interval=str(every),
        async_save=async_save,
        keep_last=2,
        handle_signals=False,
        record_attempts=False,
    )


def _train_loop(ckpt: CheckpointManager | None, mib: int, steps: int, first_step: int = 1) -> dict:
    """Run ``steps`` training steps from ``first_step``, saving through ``ckpt`` when given.

    ``ckpt`` is waited for (its last write) after the loop's time is taken, not closed.
    """
    rng = np.random.default_rng(0)
    weights = rng.random(mib * MIB // 4, dtype=np.float32)
    a = rng.random((800, 800))
    stalls = []
    saved_at = []  # indices (0-based, in this run) of the steps that saved
    step_times = []
    c_start, t_start = _cpu(), time.perf_counter()
    for step in range(first_step, first_step + steps):
        t_step = time.perf_counter()
        for _ in range(8):  # ~real work: a few dense products
            a = np.tanh(a @ a / 800.0)
        weights[step % weights.size] += 1.0
        if ckpt is not None:
            t0 = time.perf_counter()
            if ckpt.maybe_save(step, {"weights": weights}):
                stalls.append(time.perf_counter() - t0)
                saved_at.append(step - first_step)
        step_times.append(time.perf_counter() - t_step)
    c_loop, t_loop = _cpu(), time.perf_counter()
    if ckpt is not None:
        ckpt.wait()  # the last write, which the loop did not wait for
    c_end, t_end = _cpu(), time.perf_counter()
    return {
        "loop": t_loop - t_start,
        "loop_cpu": c_loop - c_start,
        "drain": t_end - t_loop,
        "all": t_end - t_start,
        "all_cpu": c_end - c_start,
        "stalls": stalls,
        "saved_at": saved_at,
        "step_times": step_times,
    }


STALL_MODES = {
    "sync": "sync: a new CheckpointManager each round",
    "async": "async: a new CheckpointManager each round (its first save allocates the snapshot)",
    "steady": "async: one CheckpointManager for every round (snapshot allocated before them)",
}


def stall(workdir: Path, mib: int, steps: int, every: int, repeats: int) -> None:
    print(
        f"\n## 2. A training loop saving {mib} MiB every {every} of {steps} steps: "
        f"{repeats} rounds, each running the loop without checkpoints, with sync saves, with "
        "async saves through a new CheckpointManager (a short attempt: its first save allocates "
        "the snapshot buffers) and through one CheckpointManager kept across the rounds (a long "
        "attempt after its first save), in turns (the order rotates), after a warm-up"
    )
    _train_loop(None, 16, every)  # warm-up: BLAS threads, first allocations
    warm = _manager(workdir / "warm", every, True)
    _train_loop(warm, 16, every)
    warm.close()
    shutil.rmtree(workdir / "warm", ignore_errors=True)
    steady = _manager(workdir / "stall-steady", every, True)
    _train_loop(steady, mib, every)  # its first save: the snapshot buffers
    next_step = {"steady": every + 1}
    modes = ("none", *STALL_MODES)
    runs: dict[str, list[dict]] = {mode: [] for mode in modes}
    for i in range(repeats):
        for mode in modes[i % len(modes) :] + modes[: i % len(modes)]:
            if mode == "steady":
                runs[mode].append(_train_loop(steady, mib, steps, next_step[mode]))
                next_step[mode] += steps
                continue
            root = workdir / f"stall-{mode}-{i}"
            ckpt = None if mode == "none" else _manager(root, every, mode == "async")
            runs[mode].append(_train_loop(ckpt, mib, steps))
            if ckpt is not None:
                ckpt.close()
                shutil.rmtree(root, ignore_errors=True)
    steady.close()
    shutil.rmtree(workdir / "stall-steady", ignore_errors=True)
    med = statistics.median

    def fig(values: list[float], fmt: str = "{:.2f}") -> str:
        return f"{fmt.format(med(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"

    base = runs["none"]
    print(
        f"loop without checkpoints: {fig([r['loop'] for r in base])}s wall, "
        f"{fig([r['loop_cpu'] for r in base])}s CPU for {steps} steps (median [range]); "
        f"load average {os.getloadavg()[0]:.1f} at the end"
    )
    print(
        "| mode | stall per save | first save's stall | loop wall | overhead: loop wall | "
        "loop CPU | overhead: CPU | + last write's drain |"
    )
    print("|-----|-----|-----|-----|-----|-----|-----|-----|")
    for mode, name in STALL_MODES.items():
        rows = runs[mode]
        stalls = [s for r in rows for s in r["stalls"]]
        firsts = [r["stalls"][0] for r in rows if r["stalls"]]
        over = [r["loop"] / b["loop"] - 1 for r, b in zip(rows, base, strict=True)]
        over_cpu = [r["loop_cpu"] / b["loop_cpu"] - 1 for r, b in zip(rows, base, strict=True)]
        print(
            f"| {name} | {fig(stalls, '{:.3f}')}s | {fig(firsts, '{:.3f}')}s | "
            f"{fig([r['loop'] for r in rows])}s | {fig(over, '{:.1%}')} | "
            f"{fig([r['loop_cpu'] for r in rows])}s | {fig(over_cpu, '{:.1%}')} | "
            f"{fig([r['drain'] for r in rows], '{:.2f}')}s |"
        )
    print(
        "overhead: each round's run against the same round's run without checkpoints, median "
        "[range] over the rounds (goal for async: <= 5% of the loop's wall time); the loop's "
        "wall time ends with its last step (its last save started), the drain is the wait for "
        "that save's background write after it; CPU is the whole process's (user + system, "
        "every thread: BLAS's, the copy's, the writer's)"
    )
    _where_the_time_goes(workdir, runs["steady"], base, mib, every)


def _save_cpu(workdir: Path, mib: int, repeats: int = 5) -> dict[str, float]:
    """The CPU time of one async save's parts, each run alone (medians, seconds).

    ``copy``: the state into a reused snapshot buffer (the loop's stall); ``crc``: CRC32C of it;
    ``write``: the rest of ``write_step`` from that buffer (``O_DIRECT`` write, fsync, manifest).
    """
    size = mib * MIB
    # as a kept manager's buffer is after its first write: huge pages where the system has them
    buf = snapshot.settled_buffer(size) or checkpoints.aligned_buffer(size, huge_pages=False)
    target = memoryview(buf).cast("B")
    source = memoryview(np.random.default_rng(1).random(size // 8)).cast("B")
    target[:] = source  # first touch: the steady mode's buffers were touched before its rounds
    root = workdir / "save-cpu"
    parts: dict[str, list[float]] = {"copy": [], "crc": [], "write": []}
    for i in range(repeats):
        c0 = time.thread_time()
        target[:] = source
        c1 = time.thread_time()
        checkpoints.crc32c(target)
        c2 = time.thread_time()
        checkpoints.write_step(str(root), i + 1, {"weights": (buf,)})
        c3 = time.thread_time()
        parts["copy"].append(c1 - c0)
        parts["crc"].append(c2 - c1)
        parts["write"].append(c3 - c2 - (c2 - c1))  # write_step computes the CRC32C too
        checkpoints.delete_step(str(root), i + 1)
    shutil.rmtree(root, ignore_errors=True)
    return {name: statistics.median(values) for name, values in parts.items()}


def _where_the_time_goes(
    workdir: Path, rows: list[dict], base: list[dict], mib: int, every: int
) -> None:
    """Print where an async save's cost to the loop goes, step by step, beside its CPU time."""
    # Added time of each step after a save against the same step of the same round without
    # checkpoints (the work of step i is the same in both: the same seed, the same products).
    added: dict[int, list[float]] = {offset: [] for offset in range(every)}
    for row, plain in zip(rows, base, strict=True):
        for index in row["saved_at"]:
            for offset in range(every):
                if index + offset < len(row["step_times"]):
                    k = index + offset
                    added[offset].append(row["step_times"][k] - plain["step_times"][k])
    at_save = statistics.median(added[0])
    after = sum(statistics.median(v) for offset, v in added.items() if offset and v)
    interval = (
        statistics.median(sum(b["step_times"]) for b in base) * every / len(base[0]["step_times"])
    )
    cpu = _save_cpu(workdir, mib)
    total = sum(cpu.values())
    ms = 1000
    print(
        f"where an async save's cost goes (one CheckpointManager kept; per save, medians of each "
        f"step's added time over its rounds' saves): the save's own step +{at_save * ms:.1f} ms "
        f"(the loop blocked: the copy into the snapshot), the {every - 1} steps after it "
        f"+{after * ms:.1f} ms in all (the background write beside the loop); together "
        f"{(at_save + after) * ms:.1f} ms, {(at_save + after) / interval:.1%} of the "
        f"{interval * ms:.0f} ms that {every} steps take without checkpoints"
    )
    print(
        f"the save's CPU, each part run alone after the rounds (median of 5): copy into the "
        f"snapshot {cpu['copy'] * ms:.1f} ms, CRC32C {cpu['crc'] * ms:.1f} ms, write + fsync + "
        f"commit {cpu['write'] * ms:.1f} ms (write_step's thread CPU less its CRC32C); "
        f"{total * ms:.1f} ms in all, against the {(at_save + after) * ms:.1f} ms the loop lost. "
        "The loop keeps both cores busy (BLAS's worker spins between products): no part of a "
        "save runs on an idle core, and the loop loses at least the save's CPU time. At this "
        f"interval the 5% goal leaves {0.05 * interval * ms:.1f} ms per save"
    )


def _machine_busy() -> float | None:
    """Seconds of CPU the whole machine has used (every process and the kernel); None off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = [int(x) for x in handle.readline().split()[1:9]]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def pages(workdir: Path, mib: int, every: int, rounds: int) -> None:
    """Snapshot buffers in huge pages (after an attempt's first write) against small pages."""
    print(
        f"\n## 2b. Snapshot pages: one process, {rounds} rounds of {every} steps, each running the "
        f"loop without checkpoints and with one {mib} MiB save at its first step through each of "
        "two kept CheckpointManagers (the order rotates; each round waits for the last write "
        "first): one whose buffers moved into huge pages after its first write (as kfp-spot "
        "does where Linux has them), one kept in small pages"
    )
    if not snapshot.huge_pages_available():
        print("this system gives no transparent huge pages: both would be the same; skipped")
        return
    available = snapshot.huge_pages_available
    managers = {}
    for name in ("huge", "small"):
        snapshot.huge_pages_available = (lambda: False) if name == "small" else available
        managers[name] = _manager(workdir / f"pages-{name}", every, True)
        for k in range(1, 4):  # the first save, its write (and the move to huge pages), two more
            _train_loop(managers[name], mib, every, k * every)
            managers[name].wait()
    snapshot.huge_pages_available = available
    _train_loop(None, mib, every, every)
    plain: list[float] = []
    lost: dict[str, list[float]] = {"huge": [], "small": []}
    busy: dict[str, list[float]] = {"huge": [], "small": []}
    order = ("none", "huge", "small")
    for i in range(rounds):
        first = (4 + i) * every  # a save at each round's first step
        row = {}
        for name in order[i % 3 :] + order[: i % 3]:
            ckpt = managers.get(name)
            snapshot.huge_pages_available = (lambda: False) if name == "small" else available
            m0 = _machine_busy()
            run = _train_loop(ckpt, mib, every, first)
            if ckpt is not None:
                ckpt.wait()  # inside the round's machine CPU, outside its loop time
            m1 = _machine_busy()
            row[name] = (run["loop"], None if m0 is None or m1 is None else m1 - m0)
        plain.append(row["none"][0])
        for name in ("huge", "small"):
            lost[name].append(row[name][0] - row["none"][0])
            if row[name][1] is not None and row["none"][1] is not None:
                busy[name].append(row[name][1] - row["none"][1])
    snapshot.huge_pages_available = available
    for ckpt in managers.values():
        ckpt.close()
    med = statistics.median
    print(
        f"loop without checkpoints: {med(plain) * 1000:.0f} ms for {every} steps (median); "
        f"load average {os.getloadavg()[0]:.1f} at the end"
    )
    print("| snapshot buffer | loop lost per save, median [range] | share | machine CPU added |")
    print("| --- | --- | --- | --- |")
    for name in ("huge", "small"):
        values = lost[name]
        cpu = f"{med(busy[name]) * 1000:.0f} ms" if busy[name] else "-"
        print(
            f"| {name} pages | {med(values) * 1000:.1f} ms [{min(values) * 1000:.0f}.."
            f"{max(values) * 1000:.0f}] | {med(values) / med(plain):.1%} | {cpu} |"
        )
    print(
        "each save against the same round's loop without checkpoints; the machine's CPU "
        "(/proc/stat: every process and the kernel, which pins the buffer's pages for the "
        "O_DIRECT write) over the round and its write, against the round without checkpoints"
    )


# -- 3. goodput --------------------------------------------------------------------------------
def worker(args: argparse.Namespace) -> int:
    """One training attempt (a separate process, as on Vertex)."""
    weights = np.random.default_rng(0).random(args.state_mib * MIB // 4, dtype=np.float32)
    with CheckpointManager(
        args.root,
        interval=args.interval,
        mtbp=args.prior or None,
        keep_last=2,
        grace_period=args.grace,
        heartbeat_seconds=1.0,
    ) as ckpt:
        restored = ckpt.restore()
        step = 0
        if restored is not None:
            weights = restored.state["weights"]
            step = restored.state["step"]
        while step < args.steps:
            time.sleep(args.step_seconds)  # the training step (I/O-free, CPU-free stand-in)
            weights[step % weights.size] += 1.0
            step += 1
            ckpt.maybe_save(step, {"weights": weights, "step": step})
            if ckpt.should_stop:
                return 143
        if ckpt.last_committed_step != args.steps:
            ckpt.save(args.steps, {"weights": weights, "step": step})
    return 0


def _measure_save_cost(workdir: Path, mib: int) -> float:
    weights = np.random.default_rng(0).random(mib * MIB // 4, dtype=np.float32)
    ckpt = CheckpointManager(
        str(workdir / "cost"), handle_signals=False, record_attempts=False, keep_last=1
    )
    times = []
    for step in range(1, 4):
        t0 = time.perf_counter()
        ckpt.save(step, {"weights": weights, "step": step})
        times.append(time.perf_counter() - t0)
    shutil.rmtree(workdir / "cost")
    return statistics.median(times)


def _run_preempted(
    workdir: Path,
    name: str,
    interval: str,
    prior: float,
    args: argparse.Namespace,
    preempt_after: list[float],
    grace: float,
) -> dict:
    root = workdir / f"goodput-{name}"
    shutil.rmtree(root, ignore_errors=True)
    steps = round(args.work_seconds / args.step_seconds)
    cmd = [
        sys.executable,
        __file__,
        "worker",
        "--root",
        str(root),
        "--interval",
        interval,
        "--prior",
        str(prior or 0),
        "--steps",
        str(steps),
        "--step-seconds",
        str(args.step_seconds),
        "--state-mib",
        str(args.state_mib),
        "--grace",
        str(grace),
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    t_start = time.monotonic()
    attempts = preemptions = 0
    for budget in preempt_after:
        attempts += 1
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            preemptions += 1
            if grace > 0:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
            else:
                proc.kill()
            proc.wait()
            continue
        if proc.returncode == 0:
            break
        raise RuntimeError(f"worker failed ({proc.returncode}): {proc.stderr.read().decode()}")
    else:
        raise RuntimeError("ran out of preemption draws; raise --max-attempts")
    wall = time.monotonic() - t_start
    saves = sum(r.saves for r in checkpoints.read_attempt_records(str(root)))
    shutil.rmtree(root, ignore_errors=True)
    return {
        "wall": wall,
        "goodput": args.work_seconds / wall,
        "attempts": attempts,
        "preemptions": preemptions,
        "saves": saves,
    }


EXECUTOR = "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest"


def _bench_package(workdir: Path) -> str:
    """An sdist of package ``spotbench`` whose module ``spotbench.bench`` is this very file."""
    out = workdir / "spotbench-0.1.tar.gz"
    files = {
        "spotbench-0.1/pyproject.toml": (
            '[build-system]\nrequires = ["setuptools"]\n'
            'build-backend = "setuptools.build_meta"\n'
            '[project]\nname = "spotbench"\nversion = "0.1"\n'
            '[tool.setuptools]\npackages = ["spotbench"]\n'
        ),
        "spotbench-0.1/spotbench/__init__.py": "",
        "spotbench-0.1/spotbench/bench.py": Path(__file__).read_text(),
    }
    with tarfile.open(out, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return str(out)


def _rfc3339_to_epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _run_on_emulator(
    workdir: Path,
    name: str,
    interval: str,
    prior: float,
    args: argparse.Namespace,
    grace: float,
    package: str,
) -> dict:
    """Run the worker as a Spot CustomJob on the kfp-spot emulator until it succeeds.

    The emulator preempts attempts after exponential times (mean ``--mtbp``, seeded, the same
    draws for every policy), restarts a preempted job up to six times, then fails it with
    STOCKOUT; the harness then submits a new job on the same output directory, as the launcher
    would, and the run goes on from its checkpoints.
    """
    from kfp_spot.emulator import Emulator
    from kfp_spot.packaging.trainer_dist import build_trainer_wheel

    # The job environment is as strict as a Vertex executor image: kfp_spot.trainer reaches it
    # the way it reaches a VM, as the light kfp-spot-trainer wheel next to the package.
    trainer_wheel = str(build_trainer_wheel(workdir / "kfp-spot-trainer"))
    base = workdir / f"goodput-{name}"
    shutil.rmtree(base, ignore_errors=True)
    steps = round(args.work_seconds / args.step_seconds)
    body = {
        "displayName": f"goodput-{name}",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "replicaCount": 1,
                    "pythonPackageSpec": {
                        "executorImageUri": EXECUTOR,
                        "packageUris": [package, trainer_wheel],
                        "pythonModule": "spotbench.bench",
                        "args": [
                            "worker",
                            f"--interval={interval}",
                            f"--prior={prior or 0}",
                            f"--steps={steps}",
                            f"--step-seconds={args.step_seconds}",
                            f"--state-mib={args.state_mib}",
                            f"--grace={grace}",
                        ],
                    },
                }
            ],
            "scheduling": {"strategy": "SPOT"},
            "baseOutputDirectory": {"outputUriPrefix": str(base)},
        },
    }
    rows: list[dict] = []
    jobs = 0
    with Emulator(
        workdir / f"emulator-{name}",
        grace_period=grace,
        preempt_every=args.mtbp,
        seed=args.seed,
        env_cache_dir=workdir / "envcache",
    ) as emu:
        while True:
            jobs += 1
            request = urllib.request.Request(
                f"{emu.endpoint}/v1/projects/bench-project/locations/us-central1/customJobs",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=60) as response:
                job = json.loads(response.read())
            final = emu.wait(job["name"], timeout=3600)
            rows += emu.attempts(job["name"])
            if final.state.name == "JOB_STATE_SUCCEEDED":
                break
            if "STOCKOUT" not in final.error.message or jobs >= 20:
                logs = emu.logs(job["name"])
                raise RuntimeError(f"job failed: {final.error.message}\n{logs[-1:]}")
    start = min(_rfc3339_to_epoch(r["startTime"]) for r in rows)
    end = max(_rfc3339_to_epoch(r["endTime"]) for r in rows)
    saves = sum(r.saves for r in checkpoints.read_attempt_records(str(base / "checkpoints")))
    shutil.rmtree(base, ignore_errors=True)
    billable = sum(float(r.get("billableSeconds") or 0) for r in rows)
    return {
        "wall": end - start,
        "goodput": args.work_seconds / (end - start),
        "billable_goodput": args.work_seconds / billable if billable else float("nan"),
        "attempts": len(rows),
        "preemptions": sum(r["endReason"] == "PREEMPTED" for r in rows),
        "saves": saves,
        "jobs": jobs,
    }


def goodput(workdir: Path, args: argparse.Namespace) -> None:
    cost = _measure_save_cost(workdir, args.state_mib)
    t_opt = young_daly(cost, args.mtbp)
    print(
        f"\n## 6. Goodput under preemption: MTBP {args.mtbp:g}s (exponential), "
        f"{args.work_seconds:g}s of useful work in {args.step_seconds:g}s steps, "
        f"{args.state_mib} MiB state, kills without notice, harness {args.harness}"
    )
    print(
        f"measured save cost C = {cost:.3f}s -> Young-Daly optimum T* = sqrt(2*C*M) = "
        f"{t_opt:.2f}s ({t_opt / args.step_seconds:.0f} steps)"
    )
    every = lambda seconds: str(max(1, round(seconds / args.step_seconds)))  # noqa: E731
    policies = [
        (f"every {every(t_opt)} steps (Young-Daly optimum T*)", every(t_opt), None, 0.0),
        ("auto, no hint", "auto", None, 0.0),
        (f"auto, hint mtbp={args.mtbp:g}", "auto", args.mtbp, 0.0),
    ]
    if args.all_policies:
        policies += [
            (f"every {every(t_opt / 4)} steps (T*/4)", every(t_opt / 4), None, 0.0),
            (f"every {every(t_opt * 4)} steps (4 T*)", every(t_opt * 4), None, 0.0),
            (f"every {every(t_opt * 16)} steps (16 T*)", every(t_opt * 16), None, 0.0),
            ("auto + save on SIGTERM, grace 30s", "auto", None, 30.0),
        ]
    print(
        "| seed | policy                                      | goodput | model | wall  "
        "| attempts | preempted | saves |"
    )
    print(
        "|------|---------------------------------------------|---------|-------|-------"
        "|----------|-----------|-------|"
    )
    package = _bench_package(workdir) if args.harness == "emulator" else ""
    results: dict[tuple[int, str], dict] = {}
    for seed in args.seeds:
        args.seed = seed
        draws = list(np.random.default_rng(seed).exponential(args.mtbp, size=args.max_attempts))
        for i, (name, interval, prior, grace) in enumerate(policies):
            if args.harness == "emulator":
                result = _run_on_emulator(workdir, str(i), interval, prior, args, grace, package)
            else:
                result = _run_preempted(workdir, str(i), interval, prior, args, draws, grace)
            results[(seed, name)] = result
            if interval != "auto":
                t = int(interval) * args.step_seconds
                # first-order waste: checkpoint cost C/T plus half an interval lost per preemption
                model_text = f"{1.0 / (1.0 + cost / t + t / (2 * args.mtbp)):.0%}"
            else:
                model_text = "-"
            print(
                f"| {seed:>4} | {name:<43} | {result['goodput']:>7.1%} | {model_text:>5} "
                f"| {result['wall']:>4.0f}s | {result['attempts']:>8} | "
                f"{result['preemptions']:>9} | {result['saves']:>5} |",
                flush=True,
            )
    optimum, auto = policies[0][0], policies[1][0]
    ratios = [results[(s, auto)]["goodput"] / results[(s, optimum)]["goodput"] for s in args.seeds]
    pooled = sum(results[(s, optimum)]["wall"] for s in args.seeds) / sum(
        results[(s, auto)]["wall"] for s in args.seeds
    )
    print(
        f"auto without a hint / the Young-Daly optimum: {min(ratios):.3f}-{max(ratios):.3f} "
        f"per seed, {pooled:.3f} pooled over {len(args.seeds)} seeds (goal >= 0.97)"
    )
    print(
        "goodput: useful work / wall time from the first attempt's start to the end; "
        "model: 1 / (1 + C/T + T/(2M)), Young-Daly's first-order prediction for a fixed "
        "interval T (restart cost not included)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    for name in ("throughput", "stall", "pages", "restart", "goodput", "memory", "all"):
        p = sub.add_parser(name)
        p.add_argument("--workdir", default=None, help="directory on the disk to measure")
        p.add_argument("--mib", type=int, default=256, help="state size for 1. and 2.")
        p.add_argument("--repeats", type=int, default=3)
        p.add_argument("--stall-steps", type=int, default=40)
        p.add_argument("--stall-every", type=int, default=10)
        p.add_argument("--stall-repeats", type=int, default=9, help="rounds of 2.")
        p.add_argument("--pages-rounds", type=int, default=30, help="rounds of 2b.")
        p.add_argument("--mtbp", type=float, default=20.0, help="mean time between preemptions")
        p.add_argument("--work-seconds", type=float, default=60.0)
        p.add_argument("--step-seconds", type=float, default=0.1)
        p.add_argument("--state-mib", type=int, default=64, help="state size for 3.")
        p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
        p.add_argument("--restart-mib", type=int, default=1, help="state size for 5.")
        p.add_argument("--restart-repeats", type=int, default=15)
        p.add_argument("--all-policies", action="store_true", help="goodput: fixed T*/4..16T*")
        p.add_argument("--max-attempts", type=int, default=500)
        p.add_argument(
            "--harness",
            choices=("emulator", "local"),
            default="local",
            help="goodput: the SIGTERM/grace/SIGKILL/restart cycle played by this script on "
            "plain processes (default), or Spot CustomJobs on the kfp-spot emulator",
        )
    w = sub.add_parser("worker")
    w.add_argument("--root", default=None, help="default: $AIP_CHECKPOINT_DIR")
    w.add_argument("--interval", required=True)
    w.add_argument("--prior", type=float, default=0.0, help="mtbp hint; 0: none")
    w.add_argument("--steps", type=int, required=True)
    w.add_argument("--step-seconds", type=float, required=True)
    w.add_argument("--state-mib", type=int, required=True)
    w.add_argument("--grace", type=float, required=True)
    m = sub.add_parser("memory-worker")
    m.add_argument("--mode", choices=("sync", "async"), required=True)
    m.add_argument("--mib", type=int, required=True)
    m.add_argument("--root", required=True)
    args = parser.parse_args()
    if args.cmd == "worker":
        return worker(args)
    if args.cmd == "memory-worker":
        return memory_worker(args)
    cmd = args.cmd or "all"
    if args.cmd is None:
        args = parser.parse_args(["all"])
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kfp-spot-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(
        f"# kfp_spot.trainer checkpoint benchmark — {time.strftime('%Y-%m-%d %H:%M:%S')}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, workdir {workdir}; "
        f"CRC32C by {checksum.implementation()}"
    )
    print(hostref.line())
    try:
        if cmd in ("throughput", "all"):
            checksums(args.mib)
            throughput(workdir, args.mib, args.repeats)
            import_time(max(5, args.repeats))
        if cmd in ("stall", "all"):
            stall(workdir, args.mib, args.stall_steps, args.stall_every, args.stall_repeats)
        if cmd in ("pages", "all"):
            pages(workdir, args.mib, args.stall_every, args.pages_rounds)
        if cmd in ("memory", "all"):
            memory(workdir, args.mib)
        if cmd in ("restart", "all"):
            restart(workdir, args.restart_repeats, args.restart_mib)
        if cmd in ("goodput", "all"):
            goodput(workdir, args)
        print(f"\nload average {os.getloadavg()[0]:.1f} at the end; {hostref.line()}")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
