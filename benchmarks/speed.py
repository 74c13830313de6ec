"""Where people wait: entry-module imports, ``kfp-spot run`` and ``kfp-spot jobs list``.

Run: .venv/bin/python benchmarks/speed.py [--runs 3] [--import-runs 5] [--list-runs 5]

Prints, medians first and the method beside each figure (nothing here is a test):

1. **imports**: each component's runtime entry module, imported the way a KFP task imports it:
   a fresh interpreter with ``_KFP_RUNTIME=true`` (KFP's lightweight command sets it) imports
   ``kfp.dsl.executor_main`` (KFP's own floor), then the module; ``time.perf_counter`` and
   ``time.process_time`` around each import. ``x floor`` compares the module with the floor
   as the brief states it: ``python -c "import kfp.dsl.executor_main"`` without ``_KFP_RUNTIME``
   (which also loads ``kfp.client`` and the Kubernetes client); ``x task floor`` with the floor a
   task really pays.
2. **kfp-spot run**: the demo (``kfp-spot run``: spot_training on the bundled example, one
   preemption), ``--runs`` times one after the other, each in a fresh run directory, after one
   untimed warm-up run (package environments cached, as on a second ``make demo``). Per run: the
   process's wall time, its CPU time with every descendant's (``os.wait4``; tasks and training
   replicas included), the pipeline's time (first task started to last task ended, from the
   run's ``logs/pipeline.log``), the time before and after it, and per task: start (task
   started to KFP's executor loaded), work, exit (output written to task ended); for the
   launch: submitted to RUNNING and each attempt's RUNNING time (the emulator's ledger).
3. **kfp-spot jobs list** against a running emulator holding a few jobs: ``--list-runs`` fresh
   ``kfp-spot`` processes, wall time each.

The machine's load average is printed with each part: on a busy machine every wall figure grows
(CPU times much less), so compare figures measured together. So is the host's speed, at the
start and the end (``benchmarks/hostref.py``: fixed work, timed): the same VM kind is slower in
some hours than in others, with the load average unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import hostref  # the host's speed now, printed beside the figures
from import_times import ENTRY_MODULES, FLOOR  # one list of the runtime entry modules

PYTHON = sys.executable
KFP_SPOT = str(Path(PYTHON).with_name("kfp-spot"))
TASKS = ("prepare-package", "launch-spot-job", "evaluate-checkpoint", "promote-model")
_PROBE = """
import sys, time
def timed(name):
    w, c = time.perf_counter(), time.process_time()
    __import__(name)
    return time.perf_counter() - w, time.process_time() - c
floor = timed({floor!r})
module = timed({module!r}) if {module!r} else (0.0, 0.0)
print(*floor, *module)
"""


def load() -> str:
    """The load averages, for the figures' context."""
    return " ".join(f"{x:.1f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


def med(values: list[float]) -> float:
    """The median (nan for none)."""
    return statistics.median(values) if values else float("nan")


def probe(module: str, task: bool) -> list[float]:
    """``[floor wall, floor cpu, module wall, module cpu]`` in one fresh interpreter."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("_KFP_RUNTIME", None)
    if task:
        env["_KFP_RUNTIME"] = "true"
    code = _PROBE.format(floor=FLOOR, module=module)
    out = subprocess.run([PYTHON, "-c", code], env=env, check=True, capture_output=True, text=True)
    return [float(x) for x in out.stdout.split()]


def imports(runs: int) -> None:
    """Part 1: the entry modules' import times beside KFP's floor."""
    brief = [probe("", task=False) for _ in range(runs)]
    floor_wall = med([r[0] for r in brief])
    rows = {m: [probe(m, task=True) for _ in range(runs)] for m in ENTRY_MODULES}
    task_floor = med([r[0] for rs in rows.values() for r in rs])
    print(f"\n== imports: median of {runs} fresh interpreters per module; load {load()}")
    print(
        "   wall = perf_counter around the import, cpu = process_time; a module is imported "
        f"after {FLOOR} with _KFP_RUNTIME=true, as in a task"
    )
    print(f"{'module':<40} {'wall s':>7} {'cpu s':>6} {'x floor':>8} {'x task floor':>13}")
    floor_cpu = med([r[1] for r in brief])
    print(f"{'floor: ' + FLOOR + ' (as in the brief)':<40} {floor_wall:7.3f} {floor_cpu:6.3f}")
    task_cpu = med([r[1] for rs in rows.values() for r in rs])
    print(f"{'task floor: the same, _KFP_RUNTIME=true':<40} {task_floor:7.3f} {task_cpu:6.3f}")
    for module, rs in rows.items():
        wall, cpu = med([r[2] for r in rs]), med([r[3] for r in rs])
        print(
            f"{module:<40} {wall:7.3f} {cpu:6.3f} {wall / floor_wall:8.2f} "
            f"{wall / task_floor:13.2f}"
        )


def _clock(text: str, day: datetime) -> float:
    """Epoch seconds of a log line's ``HH:MM:SS.mmm`` (local time) on ``day``."""
    h, m, s = text.split(":")
    return day.replace(hour=int(h), minute=int(m), second=0, microsecond=0).timestamp() + float(s)


def _executor_clock(line: str) -> float:
    """Epoch seconds of a ``[KFP Executor YYYY-MM-DD HH:MM:SS,mmm ...]`` line."""
    stamp = re.search(r"KFP Executor (\S+ \S+?),(\d+)", line)
    assert stamp, line
    return datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + (
        int(stamp.group(2)) / 1000
    )


def parts(run_dir: Path, started: float) -> dict[str, float]:
    """The run's phases in seconds, read from its logs and ledger (see the module docstring)."""
    day = datetime.fromtimestamp(started)
    out: dict[str, float] = {}
    task_times: dict[str, list[float]] = {}
    for line in (run_dir / "logs" / "pipeline.log").read_text().splitlines():
        head = re.match(r"(\d\d:\d\d:\d\d\.\d+) - INFO - (Executing task|Task) '([^']+)'", line)
        if head and head.group(3) in TASKS:
            task_times.setdefault(head.group(3), []).append(_clock(head.group(1), day))
    for task in TASKS:
        text = (run_dir / "logs" / f"{task}.log").read_text().splitlines()
        begin, end = task_times[task][0], task_times[task][-1]
        up = next(_executor_clock(x) for x in text if "Looking for component" in x)
        wrote = next(_executor_clock(x) for x in text if "Wrote executor output" in x)
        out[f"{task}"] = end - begin
        out[f"  {task}: start"] = up - begin
        out[f"  {task}: work"] = wrote - up
        out[f"  {task}: exit"] = end - wrote
        if task == "launch-spot-job":
            submitted = next(_executor_clock(x) for x in text if "]: submitted " in x)
            running = next(_executor_clock(x) for x in text if "is JOB_STATE_RUNNING" in x)
            out["  launch-spot-job: start to submitted"] = submitted - up
            out["  launch-spot-job: submitted to RUNNING"] = running - submitted
    ledger = json.loads((run_dir / "run.json").read_text())["ledger"]
    for row in ledger:
        out[f"  launch-spot-job: attempt {row['attempt']} RUNNING"] = float(row["billableSeconds"])
    first = min(t[0] for t in task_times.values())
    last = max(t[-1] for t in task_times.values())
    out["pipeline (first task started to last ended)"] = last - first
    out["before the pipeline (process start to first task)"] = first - started
    out["_last"] = last
    return out


def _one_run(run_dir: Path, tree: str | None) -> dict[str, float]:
    """One ``kfp-spot run`` (this checkout's, or ``tree``'s kfp_spot): its wall, CPU and parts."""
    argv = [KFP_SPOT, "run", "--run-dir", str(run_dir)]
    env = None
    own = Path(tree or "", ".venv", "bin", "kfp-spot")
    if tree is not None and own.exists():  # the tree's own install: its kfp_spot.pipelines too
        argv = [str(own), *argv[1:]]
    elif tree is not None:  # python -c puts its working directory first on sys.path
        # kfp_spot.pipelines (pipelines/) still comes from this checkout's install
        argv = [PYTHON, "-c", "from kfp_spot.cli import main; main()", *argv[1:]]
        env = {**os.environ, "PYTHONPATH": tree}
    started = time.time()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tree
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"kfp-spot run failed; see {run_dir}/logs")
    row = parts(run_dir, started)
    row["after the pipeline (last task ended to exit)"] = started + wall - row.pop("_last")
    row["wall"] = wall
    row["cpu (process and descendants)"] = usage.ru_utime + usage.ru_stime
    return row


def _show(title: str, results: list[dict[str, float]]) -> None:
    print(title)
    keys = ["wall", "pipeline (first task started to last ended)", "cpu (process and descendants)"]
    keys += sorted((k for k in results[0] if k not in keys), key=_order)
    for key in keys:
        values = [r[key] for r in results if key in r]
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"{key:<52} {med(values):6.2f} s   (runs: {shown})")


_PHASES = (
    "",
    ": start",
    ": start to submitted",
    ": submitted to RUNNING",
    ": attempt 1 RUNNING",
    ": attempt 2 RUNNING",
    ": work",
    ": exit",
)


def _order(key: str) -> tuple[int, int, str]:
    """Parts in the order they happen: before, each task with its phases, after."""
    if key.startswith("before"):
        return (0, 0, "")
    for i, task in enumerate(TASKS):
        if task in key:
            phase = key.strip()[len(task) :]
            rank = _PHASES.index(phase) if phase in _PHASES else len(_PHASES)
            return (i + 1, rank, phase)
    return (len(TASKS) + 1, 0, key)


def demo_runs(runs: int, compare: str | None) -> None:
    """Part 2: ``kfp-spot run`` wall, CPU and parts (with ``compare``: interleaved with it)."""
    trees: list[str | None] = [compare, None] if compare else [None]
    results: dict[str | None, list[dict[str, float]]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory(prefix="kfp-spot-speed-") as tmp:
        for i in range(runs + 1):
            for j, tree in enumerate(trees):
                row = _one_run(Path(tmp) / f"run{i}-{j}", tree)
                if i:  # the first round warms the caches up
                    results[tree].append(row)
    print(f"\n== kfp-spot run: median of {runs} runs after a warm-up run; load {load()}")
    print("   method: a fresh `kfp-spot run --run-dir DIR` each; phases from its logs and ledger")
    for tree in trees:
        _show(f"-- {tree or 'this checkout'}", results[tree])


def jobs_list(runs: int) -> None:
    """Part 3: ``kfp-spot jobs list`` against a running emulator."""
    from kfp_spot.emulator import Emulator

    body = {
        "displayName": "speed",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "replicaCount": "1",
                    "pythonPackageSpec": {
                        "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6",
                        "packageUris": ["/nonexistent/missing.tar.gz"],
                        "pythonModule": "trainer.task",
                    },
                }
            ],
            "scheduling": {"strategy": "SPOT"},
        },
    }
    import urllib.request

    walls = []
    with tempfile.TemporaryDirectory() as tmp, Emulator(Path(tmp) / "state") as emu:
        for _ in range(5):
            request = urllib.request.Request(
                f"{emu.endpoint}/v1/projects/speed-project/locations/us-central1/customJobs",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            urllib.request.urlopen(request, timeout=30).close()
        # the project the jobs were created in: the emulator, as Vertex AI, refuses one it does
        # not know (403), and a refusal is not what this measures
        argv = [KFP_SPOT, "jobs", "list", "--project", "speed-project"]
        argv += ["--api-endpoint", emu.endpoint]
        for _ in range(runs):
            t0 = time.perf_counter()
            listed = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            walls.append(time.perf_counter() - t0)
            if listed.returncode != 0 or listed.stdout.count("speed") < 5:
                sys.exit(f"kfp-spot jobs list did not list the 5 jobs: {listed.stderr.strip()}")
    print(f"\n== kfp-spot jobs list: median of {runs} fresh processes; load {load()}")
    print("   method: wall time of `kfp-spot jobs list` against a running emulator with 5 jobs")
    print(f"{'kfp-spot jobs list':<52} {med(walls):6.2f} s   (max {max(walls):.2f})")


def main() -> None:
    """Run the three parts (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="kfp-spot run runs (after a warm-up)")
    parser.add_argument("--import-runs", type=int, default=5)
    parser.add_argument("--list-runs", type=int, default=5)
    parser.add_argument("--only", choices=("imports", "run", "list"), default=None)
    parser.add_argument(
        "--compare",
        metavar="TREE",
        help="also run kfp-spot run from another checkout, interleaved: its own "
        "TREE/.venv/bin/kfp-spot when it has one (`git worktree add TREE REV`, then "
        "`pip install -e .` in TREE/.venv), else TREE's kfp_spot on PYTHONPATH (e.g. "
        "`git archive REV | tar -x -C TREE`, with kfp_spot/components and kfp_spot/pipelines "
        "symlinked to TREE's components/ and pipelines/)",
    )
    args = parser.parse_args()
    print(f"{PYTHON}; load {load()}")
    print(hostref.line())
    if args.only in (None, "imports"):
        imports(args.import_runs)
    if args.only in (None, "run"):
        demo_runs(args.runs, args.compare)
    if args.only in (None, "list"):
        jobs_list(args.list_runs)
    print(f"load {load()}; {hostref.line()}")


if __name__ == "__main__":
    main()
