"""A user's own training package, not the example: a NumPy linear regression.

Its module names are its own (``regressor.train``, ``regressor.metrics:evaluate``, declared in
its pyproject.toml's ``[tool.kfp-spot]``), it checkpoints with kfp_spot.trainer's
CheckpointManager and its ``evaluate()`` returns ``mse`` and ``r2``, no ``accuracy``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "regressor"
version = "0.3.0"
requires-python = ">=3.10"
dependencies = ["numpy>=1.26"]

[tool.setuptools]
packages = ["regressor"]

[tool.kfp-spot]
python-module = "regressor.train"
evaluation-entry-point = "regressor.metrics:evaluate"
"""

DATA = '''\
"""A fixed synthetic regression problem: y = X @ w_true + noise."""

import numpy as np


def dataset(seed=7, rows=256, features=5):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features))
    w_true = np.arange(1.0, features + 1.0)
    y = x @ w_true + 0.05 * rng.normal(size=rows)
    return x, y
'''

TRAIN = '''\
"""python -m regressor.train --steps N [--step-seconds S]: gradient descent, checkpointed."""

import argparse
import sys

import numpy as np

from kfp_spot.trainer import PREEMPTED_EXIT_CODE, CheckpointManager, add_output_dir_arguments
from kfp_spot.trainer import resolve_output_dirs
from regressor.data import dataset


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m regressor.train")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-seconds", type=float, default=0.15)
    add_output_dir_arguments(parser)
    args = parser.parse_args(argv)
    resolve_output_dirs(parser, args)
    x, y = dataset()
    with CheckpointManager(args.checkpoint_dir, interval=2, grace_period=5.0) as ckpt:
        restored = ckpt.restore()
        if restored is None:
            w, step = np.zeros(x.shape[1]), 0
        else:
            w, step = restored.state["w"], int(restored.state["step"])
            print(f"regressor resuming from step {step}", flush=True)
        while step < args.steps:
            grad = 2.0 * x.T @ (x @ w - y) / len(y)
            w = w - 0.1 * grad
            step += 1
            ckpt.notice.sleep(args.step_seconds)
            ckpt.maybe_save(step, lambda: {"w": w, "step": step})
            if ckpt.should_stop:
                return PREEMPTED_EXIT_CODE
        if ckpt.last_committed_step != step:
            ckpt.save(step, {"w": w, "step": step}, blocking=True)
    if args.model_dir:
        import os

        os.makedirs(args.model_dir, exist_ok=True)
        np.save(os.path.join(args.model_dir, "weights.npy"), w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

METRICS = '''\
"""evaluate(checkpoint_dir, params) -> {"mse": ..., "r2": ...}"""

import numpy as np

from kfp_spot.trainer import load_checkpoint
from regressor.data import dataset


def evaluate(checkpoint_dir, params=None):
    w = load_checkpoint(checkpoint_dir).state["w"]
    x, y = dataset()
    mse = float(np.mean((x @ w - y) ** 2))
    return {"mse": mse, "r2": 1.0 - mse / float(np.var(y))}
'''


def write_regressor(root: Path) -> Path:
    """Write the package's project directory under ``root``; returns it."""
    project = root / "regressor-project"
    package = project / "regressor"
    package.mkdir(parents=True)
    (project / "pyproject.toml").write_text(PYPROJECT)
    (package / "__init__.py").write_text("")
    for name, text in (("data", DATA), ("train", TRAIN), ("metrics", METRICS)):
        (package / f"{name}.py").write_text(textwrap.dedent(text))
    return project
