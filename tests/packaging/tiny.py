"""A tiny real training project, written into a temp dir, for packaging and evaluation tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "tiny-trainer"
version = "1.2.3"
dependencies = ["numpy>=1.20"]

[tool.setuptools]
packages = ["tinytrainer"]
"""

TASK = """\
import json
import sys


def main(argv):
    print(json.dumps({"trained": True, "args": argv}))


if __name__ == "__main__":
    main(sys.argv[1:])
"""

EVALUATE = '''\
"""Scores a checkpoint written by the tests: model.json holds {"accuracy": a, "step": n}."""

import json
import os

import numpy as np


def evaluate(checkpoint_dir, params):
    with open(os.path.join(checkpoint_dir, "model.json")) as handle:
        model = json.load(handle)
    print(f"evaluating step {model['step']} from {checkpoint_dir}")
    if params.get("wait_for"):  # a long evaluation: it ends when the file given appears
        import time

        print("still evaluating")  # no flush, as a script prints
        while not os.path.exists(params["wait_for"]):
            time.sleep(0.01)
    if params.get("bytes"):  # what no text holds, then more than a pipe's buffer
        import sys

        sys.stdout.buffer.write(b"\\xff\\xfe not text\\n" * 20000)
    if params.get("warn"):  # a library's warning, on stderr
        import warnings

        warnings.warn("the held-out split has 3 examples", stacklevel=1)
    if params.get("fail"):
        raise RuntimeError("the evaluation data set is missing")
    if "exit" in params:  # as a script's habit: sys.exit(status)
        raise SystemExit(params["exit"])
    if params.get("return") == "list":
        return [1, 2]
    if params.get("return") == "text":
        return {"accuracy": "high"}
    if params.get("return") == "unnamed":
        return {" ": 0.5}
    if params.get("return") == "bool":
        return {"accuracy": 0.9, "converged": True}
    if params.get("return") == "huge":
        return {"accuracy": 10**400}
    accuracy = np.float32(model["accuracy"] * params.get("scale", 1.0))
    out = {"accuracy": accuracy, "loss": 1.0 - float(accuracy), "seen_step": model["step"]}
    if params.get("env"):  # a setting read from the environment, by name
        out["env_set"] = float(os.getenv("TINY_EVAL_SETTING") is not None)
    if params.get("classification"):
        out["confusion_matrix"] = {
            "labels": ["cat", "dog"],
            "matrix": np.array([[5, 1], [2, 7]]),
        }
    return out


PASSING_ACCURACY = 0.5  # not a function: an entry point naming it is refused


def score_without_params():  # not callable as evaluate(checkpoint_dir, params)
    return {"accuracy": 1.0}
'''


def write_project(root: Path, *, task: str = TASK, evaluate: str = EVALUATE) -> Path:
    """Write the project under ``root`` (created) and return it."""
    package = root / "tinytrainer"
    package.mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "README.md").write_text("A tiny trainer for tests.\n")
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(textwrap.dedent(task))
    (package / "evaluate.py").write_text(textwrap.dedent(evaluate))
    return root
