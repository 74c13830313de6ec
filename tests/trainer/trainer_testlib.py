"""Helpers for the trainer tests: run the example trainer as a subprocess, read its model."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from kfp_spot.trainer.writer import StepWriter
from tests.shared import once_per_run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "trainer"


@dataclass
class TrainerRun:
    """The result of one ``python -m trainer.task`` process."""

    returncode: int
    output: str
    resume_expected: int | None = None  # the step the next attempt should resume from


def example_env(
    example: Path, checkpoint_dir: str | None, model_dir: str | None, **extra: str
) -> dict[str, str]:
    """This process's environment for a run of ``example`` (a directory under examples/).

    The example's package and this checkout come first on ``PYTHONPATH``; ``AIP_CHECKPOINT_DIR``
    and ``AIP_MODEL_DIR`` are set as Vertex AI sets them (left out where None); no failpoints.
    """
    env = dict(os.environ)
    for name in ("KFP_SPOT_FAILPOINTS", "AIP_CHECKPOINT_DIR", "AIP_MODEL_DIR"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(example), str(REPO), *filter(None, [env.get("PYTHONPATH")])]
    )
    for name, value in (("AIP_CHECKPOINT_DIR", checkpoint_dir), ("AIP_MODEL_DIR", model_dir)):
        if value is not None:
            env[name] = str(value)
    env.update(extra)
    return env


def trainer_env(checkpoint_dir: str, model_dir: str, **extra: str) -> dict[str, str]:
    return example_env(EXAMPLE, checkpoint_dir, model_dir, **extra)


def run_example_module(
    example: Path,
    checkpoint_dir: str | None,
    model_dir: str | None,
    args: Sequence[str],
    *,
    module: str = "trainer.task",
    failpoints: str | None = None,
    timeout: float = 120,
    wrapper: str | None = None,
    **extra_env: str,
) -> TrainerRun:
    """Run ``python -m <module> <args>`` of ``example`` as the emulator would; wait for it.

    ``wrapper``: Python source run instead (``python -c wrapper <module> <args>``), which runs
    the module its own way.
    """
    env = example_env(example, checkpoint_dir, model_dir, **extra_env)
    if failpoints:
        env["KFP_SPOT_FAILPOINTS"] = failpoints
    launch = ["-m"] if wrapper is None else ["-c", wrapper]
    proc = subprocess.run(
        [sys.executable, *launch, module, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    return TrainerRun(proc.returncode, proc.stdout)


def run_trainer(
    checkpoint_dir: str,
    model_dir: str,
    args: Sequence[str],
    *,
    failpoints: str | None = None,
    timeout: float = 120,
    **extra_env: str,
) -> TrainerRun:
    return run_example_module(
        EXAMPLE,
        checkpoint_dir,
        model_dir,
        args,
        failpoints=failpoints,
        timeout=timeout,
        **extra_env,
    )


# Two epochs of a step per minibatch (86 steps), seed 0, no scikit-learn export.
TWO_EPOCHS = ["--epochs", "2", "--steps-per-epoch", "43", "--no-sklearn-model"]


def two_epoch_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An uninterrupted run of TWO_EPOCHS with a checkpoint every 20 steps, made once per test
    run: ``checkpoints`` and ``model`` (its directories, which nobody may change) and ``output``.

    One test asserts what this run writes; others compare their interrupted runs' weights with
    its model (the checkpoint interval does not change the weights).
    """

    def train(base: Path) -> dict[str, str]:
        ck, model = str(base / "ck"), str(base / "model")
        run = run_trainer(ck, model, [*TWO_EPOCHS, "--checkpoint-every", "20"])
        assert run.returncode == 0, run.output
        return {"checkpoints": ck, "model": model, "output": run.output}

    result: dict[str, str] = once_per_run(tmp_path_factory, "trainer-two-epochs", train)
    return result


def load_model(model_dir: str) -> dict[str, bytes]:
    """The final weights as raw bytes per array (bitwise comparison)."""
    from kfp_spot import fs

    filesystem, base = fs.filesystem(model_dir)
    with filesystem.open(f"{base}/model.npz", "rb") as handle:
        import io

        with np.load(io.BytesIO(handle.read()), allow_pickle=False) as npz:
            return {k: npz[k].tobytes() + str(npz[k].dtype).encode() for k in npz.files}


def step_writer(
    root: Path,
    retain: Callable[[], None] = lambda: None,
    *,
    clock: Callable[[], float] = time.monotonic,
    cpu_clock: Callable[[], float] = time.process_time,
) -> StepWriter:
    """A StepWriter under ``root`` as the manager makes one (no retries, no attempt record)."""
    return StepWriter(
        str(root),
        save_retries=0,
        grace_period=30.0,
        recorder=None,
        retain=retain,
        clock=clock,
        cpu_clock=cpu_clock,
    )
