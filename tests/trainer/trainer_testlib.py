"""Helpers for the trainer tests: run the example trainer as a subprocess, read its model."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "trainer"


@dataclass
class TrainerRun:
    """The result of one ``python -m trainer.task`` process."""

    returncode: int
    output: str
    resume_expected: int | None = None  # the step the next attempt should resume from


def trainer_env(checkpoint_dir: str, model_dir: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KFP_SPOT_FAILPOINTS", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(EXAMPLE), str(REPO), *filter(None, [env.get("PYTHONPATH")])]
    )
    env["AIP_CHECKPOINT_DIR"] = checkpoint_dir
    env["AIP_MODEL_DIR"] = model_dir
    env.update(extra)
    return env


def run_trainer(
    checkpoint_dir: str,
    model_dir: str,
    args: Sequence[str],
    *,
    failpoints: str | None = None,
    timeout: float = 120,
    **extra_env: str,
) -> TrainerRun:
    env = trainer_env(checkpoint_dir, model_dir, **extra_env)
    if failpoints:
        env["KFP_SPOT_FAILPOINTS"] = failpoints
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.task", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    return TrainerRun(proc.returncode, proc.stdout)


def load_model(model_dir: str) -> dict[str, bytes]:
    """The final weights as raw bytes per array (bitwise comparison)."""
    from kfp_spot import fs

    filesystem, base = fs.filesystem(model_dir)
    with filesystem.open(f"{base}/model.npz", "rb") as handle:
        import io

        with np.load(io.BytesIO(handle.read()), allow_pickle=False) as npz:
            return {k: npz[k].tobytes() + str(npz[k].dtype).encode() for k in npz.files}
