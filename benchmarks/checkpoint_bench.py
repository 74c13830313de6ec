"""Checkpoint benchmark for kfp_spot.trainer: throughput, training stall, goodput under preemption.

    .venv/bin/python benchmarks/checkpoint_bench.py [throughput|stall|goodput|all] [options]

1. **throughput** — save and restore of a 256 MiB state (one float32 array) through
   ``CheckpointManager`` against the raw write and read speed of the same disk, measured in the same
   run with ``dd`` (``conv=fsync``, since a checkpoint save fsyncs its files before the manifest).
   Restore reads every byte once and checks its sha256 before decoding.
2. **stall** — a training loop (real NumPy work per step) that checkpoints a 256 MiB state every
   K steps: the time the loop is blocked per checkpoint with synchronous saves and with
   ``async_save`` (snapshot in the loop, write in a background thread), and the wall-time
   overhead against the same loop without checkpoints.
3. **goodput** — useful training time / wall time of a run preempted at random, for fixed
   intervals, for ``auto`` and for the Young-Daly optimum. By default the workload runs as a Spot
   CustomJob on the kfp-spot emulator (``--harness emulator``): the emulator preempts each attempt
   after an exponential time with mean ``--mtbp`` (tens of seconds; seeded, so every policy meets
   the same draws), sends SIGTERM, waits the grace period, SIGKILLs and restarts the job (after six
   restarts the job fails with STOCKOUT and the harness submits a new one on the same output
   directory, as the launcher does). ``--harness local`` plays the same cycle on plain processes
   without the emulator. The workload is a loop of ``--step-seconds`` steps over a ``--state-mib``
   state, checkpointed with ``CheckpointManager`` into ``$AIP_CHECKPOINT_DIR``. With a grace
   period of 0 (the rows without "SIGTERM") every preemption is a kill without notice, the setting
   Young-Daly's formula assumes; the last row gives the trainer 30 s to save on the notice.

Results go to stdout as plain tables. Nothing here is run by the test suite.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
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

from kfp_spot import checkpoints  # noqa: E402
from kfp_spot.trainer import CheckpointManager, young_daly  # noqa: E402

MIB = 1 << 20


# -- 1. throughput -----------------------------------------------------------------------------
def _dd(args: list[str]) -> float:
    """Run dd; return its MB/s figure converted to MiB/s."""
    proc = subprocess.run(["dd", *args], capture_output=True, text=True, check=True)
    match = re.search(r"([\d.]+) s, ", proc.stderr)
    copied = re.search(r"^(\d+) bytes", proc.stderr, re.M)
    if not match or not copied:
        raise RuntimeError(f"unexpected dd output: {proc.stderr}")
    return int(copied.group(1)) / float(match.group(1)) / MIB


def throughput(workdir: Path, mib: int, repeats: int) -> None:
    print(f"\n## 1. Save / restore throughput, {mib} MiB state, disk of {workdir}")
    state = {"weights": np.random.default_rng(0).random(mib * MIB // 4, dtype=np.float32)}
    raw_write, raw_read, saves, restores, hashes = [], [], [], [], []
    for i in range(repeats):
        target = workdir / f"dd-{i}.bin"
        raw_write.append(
            _dd(["if=/dev/zero", f"of={target}", "bs=4M", f"count={mib // 4}", "conv=fsync"])
        )
        raw_read.append(_dd([f"if={target}", "of=/dev/null", "bs=4M"]))
        target.unlink()
        root = workdir / f"ck-{i}"
        ckpt = CheckpointManager(str(root), handle_signals=False, record_attempts=False)
        t0 = time.perf_counter()
        ckpt.save(1, state)
        saves.append(mib / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        restored = ckpt.restore()
        restores.append(mib / (time.perf_counter() - t0))
        assert restored.state["weights"].tobytes() == state["weights"].tobytes()
        t0 = time.perf_counter()
        hashlib.sha256(memoryview(state["weights"]).cast("B")).hexdigest()
        hashes.append(mib / (time.perf_counter() - t0))
        shutil.rmtree(root)
    rows = [
        ("raw write (dd, conv=fsync)", raw_write),
        ("checkpoint save (encode + sha256 + write + fsync + manifest)", saves),
        ("raw read (dd, page cache warm)", raw_read),
        ("checkpoint restore (read + sha256 verify + decode)", restores),
        ("sha256 alone (CPU bound)", hashes),
    ]
    print(f"| {'operation':<62} | MiB/s (median of {repeats}) |")
    print(f"|{'-' * 64}|{'-' * 26}|")
    for name, values in rows:
        print(f"| {name:<62} | {statistics.median(values):>24.0f} |")
    print(
        f"save = {statistics.median(saves) / statistics.median(raw_write):.0%} of the raw fsync'ed "
        f"write speed; restore = {statistics.median(restores) / statistics.median(raw_read):.0%} "
        "of the raw (cached) read speed"
    )


# -- 2. stall ----------------------------------------------------------------------------------
def _train_loop(root: Path | None, mib: int, steps: int, every: int, async_save: bool) -> dict:
    rng = np.random.default_rng(0)
    weights = rng.random(mib * MIB // 4, dtype=np.float32)
    a = rng.random((800, 800))
    ckpt = (
        CheckpointManager(
            str(root),
            interval=str(every),
            async_save=async_save,
            keep_last=2,
            handle_signals=False,
            record_attempts=False,
        )
        if root is not None
        else None
    )
    stalls = []
    t_start = time.perf_counter()
    for step in range(1, steps + 1):
        for _ in range(8):  # ~real work: a few dense products
            a = np.tanh(a @ a / 800.0)
        weights[step % weights.size] += 1.0
        if ckpt is not None:
            t0 = time.perf_counter()
            if ckpt.maybe_save(step, {"weights": weights}):
                stalls.append(time.perf_counter() - t0)
    if ckpt is not None:
        t0 = time.perf_counter()
        ckpt.wait()
        stalls.append(time.perf_counter() - t0)  # the last write the run has to wait for
    return {"wall": time.perf_counter() - t_start, "stalls": stalls}


def stall(workdir: Path, mib: int, steps: int, every: int) -> None:
    print(f"\n## 2. Training stall per checkpoint, {mib} MiB state, a save every {every} steps")
    base = _train_loop(None, mib, steps, every, False)
    step_s = base["wall"] / steps
    print(f"loop without checkpoints: {base['wall']:.2f}s for {steps} steps ({step_s:.3f}s/step)")
    print("| mode  | checkpoints | stall/checkpoint mean (max) | wall | overhead vs none |")
    print("|-------|-------------|-----------------------------|------|------------------|")
    for async_save in (False, True):
        root = workdir / f"stall-{async_save}"
        result = _train_loop(root, mib, steps, every, async_save)
        per = result["stalls"][:-1] or result["stalls"]
        print(
            f"| {'async' if async_save else 'sync':<5} | {len(per):>11} | "
            f"{statistics.mean(per):>10.3f}s ({max(per):.3f}s)        | "
            f"{result['wall']:.2f}s | {result['wall'] / base['wall'] - 1:>15.1%} |"
        )
        shutil.rmtree(root, ignore_errors=True)


# -- 3. goodput --------------------------------------------------------------------------------
def worker(args: argparse.Namespace) -> int:
    """One training attempt (a separate process, as on Vertex)."""
    weights = np.random.default_rng(0).random(args.state_mib * MIB // 4, dtype=np.float32)
    with CheckpointManager(
        args.root,
        interval=args.interval,
        mtbp=args.prior,
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
        str(prior),
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
    saves = sum(r.get("saves") or 0 for r in checkpoints.read_attempt_records(str(root)))
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
                        "packageUris": [package],
                        "pythonModule": "spotbench.bench",
                        "args": [
                            "worker",
                            f"--interval={interval}",
                            f"--prior={prior}",
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
                f"{emu.endpoint}/v1/projects/bench/locations/us-central1/customJobs",
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
    saves = sum(
        r.get("saves") or 0 for r in checkpoints.read_attempt_records(str(base / "checkpoints"))
    )
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
        f"\n## 3. Goodput under preemption: MTBP {args.mtbp:g}s (exponential, seed {args.seed}), "
        f"{args.work_seconds:g}s of useful work in {args.step_seconds:g}s steps, "
        f"{args.state_mib} MiB state"
    )
    print(
        f"measured save cost C = {cost:.3f}s -> Young-Daly optimum T* = sqrt(2*C*M) = "
        f"{t_opt:.2f}s ({t_opt / args.step_seconds:.0f} steps)"
    )
    rng = np.random.default_rng(args.seed)
    draws = list(rng.exponential(args.mtbp, size=args.max_attempts))
    every = lambda seconds: str(max(1, round(seconds / args.step_seconds)))  # noqa: E731
    policies = [
        (f"every {every(t_opt / 4)} steps (T*/4)", every(t_opt / 4), 3600.0, 0.0),
        (f"every {every(t_opt)} steps (Young-Daly optimum T*)", every(t_opt), 3600.0, 0.0),
        (f"every {every(t_opt * 4)} steps (4 T*)", every(t_opt * 4), 3600.0, 0.0),
        (f"every {every(t_opt * 16)} steps (16 T*)", every(t_opt * 16), 3600.0, 0.0),
        ("auto, default prior MTBP 3600s", "auto", 3600.0, 0.0),
        (f"auto, prior MTBP {args.mtbp:g}s", "auto", args.mtbp, 0.0),
        ("auto + save on SIGTERM, grace 30s", "auto", 3600.0, 30.0),
    ]
    print(f"harness: {args.harness}")
    print(
        "| policy                                      | goodput | of billable | model | wall  "
        "| attempts | preempted | saves |"
    )
    print(
        "|---------------------------------------------|---------|-------------|-------|-------"
        "|----------|-----------|-------|"
    )
    package = _bench_package(workdir) if args.harness == "emulator" else ""
    for i, (name, interval, prior, grace) in enumerate(policies):
        if args.harness == "emulator":
            result = _run_on_emulator(workdir, str(i), interval, prior, args, grace, package)
        else:
            result = _run_preempted(workdir, str(i), interval, prior, args, draws, grace)
        if interval != "auto":
            t = int(interval) * args.step_seconds
            # first-order waste: checkpoint cost C/T plus half an interval lost per preemption
            model_text = f"{1.0 / (1.0 + cost / t + t / (2 * args.mtbp)):.0%}"
        else:
            model_text = "-"
        billable = result.get("billable_goodput")
        billable_text = f"{billable:.1%}" if billable is not None else "-"
        print(
            f"| {name:<43} | {result['goodput']:>7.1%} | {billable_text:>11} | {model_text:>5} "
            f"| {result['wall']:>4.0f}s | {result['attempts']:>8} | {result['preemptions']:>9} "
            f"| {result['saves']:>5} |",
            flush=True,
        )
    print(
        "goodput: useful work / wall time from the first attempt's start to the end; of billable: "
        "useful work / billed (running) seconds;\nmodel: 1 / (1 + C/T + T/(2M)), Young-Daly's "
        "first-order prediction for a fixed interval T (restart cost not included)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    for name in ("throughput", "stall", "goodput", "all"):
        p = sub.add_parser(name)
        p.add_argument("--workdir", default=None, help="directory on the disk to measure")
        p.add_argument("--mib", type=int, default=256, help="state size for 1. and 2.")
        p.add_argument("--repeats", type=int, default=3)
        p.add_argument("--stall-steps", type=int, default=40)
        p.add_argument("--stall-every", type=int, default=10)
        p.add_argument("--mtbp", type=float, default=20.0, help="mean time between preemptions")
        p.add_argument("--work-seconds", type=float, default=60.0)
        p.add_argument("--step-seconds", type=float, default=0.1)
        p.add_argument("--state-mib", type=int, default=64, help="state size for 3.")
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--max-attempts", type=int, default=500)
        p.add_argument(
            "--harness",
            choices=("emulator", "local"),
            default="emulator",
            help="goodput: Spot CustomJobs on the kfp-spot emulator (default), or the same "
            "SIGTERM/grace/SIGKILL/restart cycle played by this script on plain processes",
        )
    w = sub.add_parser("worker")
    w.add_argument("--root", default=None, help="default: $AIP_CHECKPOINT_DIR")
    w.add_argument("--interval", required=True)
    w.add_argument("--prior", type=float, required=True)
    w.add_argument("--steps", type=int, required=True)
    w.add_argument("--step-seconds", type=float, required=True)
    w.add_argument("--state-mib", type=int, required=True)
    w.add_argument("--grace", type=float, required=True)
    args = parser.parse_args()
    if args.cmd == "worker":
        return worker(args)
    cmd = args.cmd or "all"
    if args.cmd is None:
        args = parser.parse_args(["all"])
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kfp-spot-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(
        f"# kfp_spot.trainer checkpoint benchmark — {time.strftime('%Y-%m-%d %H:%M:%S')}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, workdir {workdir}"
    )
    try:
        if cmd in ("throughput", "all"):
            throughput(workdir, args.mib, args.repeats)
        if cmd in ("stall", "all"):
            stall(workdir, args.mib, args.stall_steps, args.stall_every)
        if cmd in ("goodput", "all"):
            goodput(workdir, args)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
