"""Run the example trainers (examples/keras, examples/xgboost) as the emulator would."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kfp_spot import checkpoints

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    returncode: int
    output: str


def run_example(
    name: str, ckpt: Path, model: Path, args: list[str], failpoints: str | None = None
) -> Run:
    env = dict(os.environ)
    env.pop("KFP_SPOT_FAILPOINTS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "examples" / name), str(REPO)])
    env.update(AIP_CHECKPOINT_DIR=str(ckpt), AIP_MODEL_DIR=str(model), KERAS_BACKEND="jax")
    if failpoints:
        env["KFP_SPOT_FAILPOINTS"] = failpoints
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.task", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    return Run(proc.returncode, proc.stdout)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def newest(root: Path) -> int | None:
    latest = checkpoints.latest(str(root))
    return None if latest is None else latest.step


def preempt_randomly(
    name: str,
    root: Path,
    model: Path,
    args: list[str],
    *,
    total: int,
    every: int,
    seed: int,
    kinds: tuple[str, ...] = ("term@step", "kill@step", "kill@save-mid"),
) -> list[tuple[str, int, int | None]]:
    """Preempt one attempt per kind (in a seeded random order, at random steps), then finish.

    ``term@step`` is SIGTERM with the grace period (the run saves that step and exits 143),
    ``kill@step`` SIGKILL without notice, ``kill@save-mid`` SIGKILL in the middle of a periodic
    save (that step is left torn). Returns ``(failpoint, exit status, step resumed next)``.
    """
    rng = random.Random(seed)
    order = list(kinds)
    rng.shuffle(order)
    events = []
    for kind in order:
        start = newest(root) or 0
        if kind.endswith("save-mid"):  # only periodic saves have a middle to die in
            choices = [s for s in range(start + 1, total) if s % every == 0]
        else:
            choices = list(range(start + 1, total))
        step = rng.choice(choices)
        run = run_example(name, root, model, args, failpoints=f"{kind}:{step}")
        expected = 143 if kind.startswith("term") else -9
        assert run.returncode == expected, (kind, step, run.output[-3000:])
        events.append((f"{kind}:{step}", run.returncode, newest(root)))
    final = run_example(name, root, model, args)
    assert final.returncode == 0, final.output[-3000:]
    return events
