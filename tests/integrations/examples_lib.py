"""Run the example trainers (examples/keras, examples/xgboost) as the emulator would, or on a VM."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from kfp_spot import checkpoints
from tests.trainer.trainer_testlib import REPO, TrainerRun, run_example_module


def run_example(
    name: str, ckpt: Path, model: Path, args: list[str], failpoints: str | None = None
) -> TrainerRun:
    return run_example_module(
        REPO / "examples" / name,
        str(ckpt),
        str(model),
        args,
        failpoints=failpoints,
        timeout=300,
        KERAS_BACKEND="jax",
    )


# A Vertex AI VM: Cloud Storage mounted at (here) $FAKE_GCS_MOUNT, no gcsfs installed.
ON_A_VM = """
import os, runpy, sys
sys.modules["gcsfs"] = None
from kfp_spot import fs
fs.GCS_MOUNT_ROOT = os.environ["FAKE_GCS_MOUNT"]
module = sys.argv.pop(1)
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
BUCKET = "my-bucket"

# The never-preempted runs of tests/integrations/conftest.py (one per test run each).
KERAS_ARGS = ["--epochs", "3", "--checkpoint-every", "10", "--seed", "4"]
XGBOOST_ARGS = ["--rounds", "30", "--checkpoint-every", "4"]


def run_on_a_vm(
    name: str, mount: Path, args: list[str], module: str = "trainer.task", **extra_env: str
) -> tuple[TrainerRun, Path]:
    """Run example ``name`` as on a Vertex AI VM: its directories are ``gs://`` URIs of a bucket
    mounted (here) at ``mount``, and gcsfs cannot be imported (the light kfp-spot-trainer wheel
    does not bring it). Returns the run and the job's directory below the mount, which holds the
    checkpoints (``ckpt``) and the model (``model``)."""
    (mount / BUCKET).mkdir(parents=True, exist_ok=True)
    run = run_example_module(
        REPO / "examples" / name,
        f"gs://{BUCKET}/job/ckpt/",
        f"gs://{BUCKET}/job/model/",
        args,
        module=module,
        wrapper=ON_A_VM,
        timeout=300,
        FAKE_GCS_MOUNT=str(mount),
        **{"KERAS_BACKEND": "jax", **extra_env},
    )
    return run, mount / BUCKET / "job"


def uninterrupted_run(name: str, base: Path, args: list[str]) -> Path:
    """Run example ``name`` once, never preempted, as on a VM (:func:`run_on_a_vm`, below
    ``base``) with an empty Keras home (:func:`keras_home_of`); returns the job's directory
    (``ckpt``, ``model``).

    The preemption tests compare their runs with it, and test_example_output_dirs takes it as
    the example's run through the mount: one process where there were two. Where the files go
    does not change the weights (their bytes are compared across directories anyway).
    """
    run, job = run_on_a_vm(name, base / "gcs", args, KERAS_HOME=str(base / "keras-home"))
    assert run.returncode == 0, run.output[-3000:]
    return job


def keras_home_of(job: Path) -> Path:
    """The ``KERAS_HOME`` the :func:`uninterrupted_run` whose job directory is ``job`` ran with:
    empty before it (no ``keras.json`` choosing a backend); Keras writes its config there."""
    return job.parents[2] / "keras-home"


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
    runs: list[TrainerRun] | None = None,
) -> list[tuple[str, int, int | None]]:
    """Preempt one attempt per kind (in a seeded random order, at random steps), then finish.

    ``term@step`` is SIGTERM with the grace period (the run saves that step and exits 143),
    ``kill@step`` SIGKILL without notice, ``kill@save-mid`` SIGKILL in the middle of a periodic
    save (that step is left torn). A ``term@step`` attempt must have committed its step (saved on
    the notice: nothing lost). Returns ``(failpoint, exit status, step resumed next)``; ``runs``,
    when given, gets every attempt (the final one last), for what a caller asserts of its output.
    Starts from what ``root`` holds: a caller can preempt the run at set points first.
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
        if runs is not None:
            runs.append(run)
        expected = 143 if kind.startswith("term") else -9
        assert run.returncode == expected, (kind, step, run.output[-3000:])
        resumed = newest(root)
        if kind == "term@step":
            assert resumed == step, (kind, step, resumed)
        events.append((f"{kind}:{step}", run.returncode, resumed))
    final = run_example(name, root, model, args)
    if runs is not None:
        runs.append(final)
    assert final.returncode == 0, final.output[-3000:]
    return events


RANDOM_KINDS = ("kill@step",)
"""The kind of preemption :func:`preempt_three_ways` leaves to chance (the other two are set)."""


@dataclass
class Preempted:
    """One run of an example preempted three times, once by each kind of preemption."""

    root: Path
    model: Path
    noticed: TrainerRun  # term@step at a set step
    at_notice: dict[str, int]  # that step's record (RECORD_FILE), read before newer steps retire it
    torn: TrainerRun  # kill@save-mid at a set step
    newest_after_torn: int | None
    events: list[tuple[str, int, int | None]]  # preempt_randomly's: kill@step at a random step
    runs: list[TrainerRun]  # preempt_randomly's attempts: the randomly killed one, the final one


def preempt_three_ways(
    name: str,
    base: Path,
    args: list[str],
    *,
    notice: int,
    torn: int,
    record: str,
    total: int,
    every: int,
    seed: int,
) -> Preempted:
    """Noticed at step ``notice``, killed while saving step ``torn``, killed at a random step
    (``seed``), then run to the end: every kind of preemption in one run of four attempts.

    What later attempts overwrite (step ``notice``'s ``record`` file, the newest step after the
    torn save) is read as it happens, for the tests that assert their parts of the run.
    """
    root, model = base / "ckpt", base / "model"
    noticed = run_example(name, root, model, args, failpoints=f"term@step:{notice}")
    record_file = root / f"step-{notice}" / record
    at_notice = json.loads(record_file.read_text()) if record_file.exists() else {}
    torn_run = run_example(name, root, model, args, failpoints=f"kill@save-mid:{torn}")
    newest_after_torn = newest(root)
    runs: list[TrainerRun] = []
    events = preempt_randomly(
        name, root, model, args, total=total, every=every, seed=seed, kinds=RANDOM_KINDS, runs=runs
    )
    return Preempted(root, model, noticed, at_notice, torn_run, newest_after_torn, events, runs)
