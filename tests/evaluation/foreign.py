"""A trainer written like Google's public Vertex samples, with no kfp-spot import at all.

setup.py, ``trainer/task.py`` with argparse, ``$AIP_CHECKPOINT_DIR``, its own pickle checkpoints
(``ckpt-<n>.pkl`` plus ``checkpoint.json`` naming the newest) and its own SIGTERM handler.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

SETUP = """\
from setuptools import find_packages, setup

setup(
    name="foreign-trainer",
    version="0.3.0",
    packages=find_packages(),
    install_requires=["numpy"],
)
"""

TASK = """\
import argparse
import json
import os
import pickle
import signal
import sys
import time

import numpy as np

STOP = False


def _on_sigterm(signum, frame):
    global STOP
    STOP = True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    args = parser.parse_args()
    ckpt_dir = os.environ["AIP_CHECKPOINT_DIR"]
    os.makedirs(ckpt_dir, exist_ok=True)
    signal.signal(signal.SIGTERM, _on_sigterm)
    pointer = os.path.join(ckpt_dir, "checkpoint.json")
    step, w = 0, np.zeros(4)
    if os.path.exists(pointer):
        with open(pointer) as f:
            latest = json.load(f)["latest"]
        with open(os.path.join(ckpt_dir, latest), "rb") as f:
            step, w = pickle.load(f)
        print(f"restored {latest}", flush=True)
    while step < args.steps:
        time.sleep(args.step_seconds)
        w = w + 0.1
        step += 1
        name = f"ckpt-{step}.pkl"
        with open(os.path.join(ckpt_dir, name), "wb") as f:
            pickle.dump((step, w), f)
        with open(pointer + ".tmp", "w") as f:
            json.dump({"latest": name}, f)
        os.replace(pointer + ".tmp", pointer)
        if STOP:
            print(f"SIGTERM: saved {name}", flush=True)
            sys.exit(143)
    model_dir = os.environ["AIP_MODEL_DIR"]
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "model.pkl"), "wb") as f:
        pickle.dump(w, f)
    print("done", flush=True)


if __name__ == "__main__":
    main()
"""

EVALUATE = """\
import json
import os
import pickle


def evaluate(checkpoint_dir, params):
    with open(os.path.join(checkpoint_dir, "checkpoint.json")) as f:
        latest = json.load(f)["latest"]
    with open(os.path.join(checkpoint_dir, latest), "rb") as f:
        step, w = pickle.load(f)
    return {"accuracy": min(1.0, float(w.mean())), "trained_steps": step}
"""


def write_foreign_project(root: Path) -> Path:
    """Write the project under ``root`` (created) and return it."""
    package = root / "trainer"
    package.mkdir(parents=True)
    (root / "setup.py").write_text(SETUP)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(textwrap.dedent(TASK))
    (package / "evaluate.py").write_text(textwrap.dedent(EVALUATE))
    return root


def write_foreign_checkpoints(ckpt_dir: Path, steps: int = 18) -> None:
    """What the trainer leaves behind: ``checkpoint.json`` and ``ckpt-<n>.pkl`` files."""
    import pickle

    import numpy as np

    ckpt_dir.mkdir(parents=True, exist_ok=True)
    for step in range(1, steps + 1):
        (ckpt_dir / f"ckpt-{step}.pkl").write_bytes(pickle.dumps((step, np.full(4, step / 20))))
    (ckpt_dir / "checkpoint.json").write_text(f'{{"latest": "ckpt-{steps}.pkl"}}')
