"""Evaluation entry point: score one checkpoint on the held-out split.

``evaluate(checkpoint_dir, params) -> dict`` as kfp-spot's evaluator calls it: ``checkpoint_dir``
is one verified ``step-<n>`` directory; the result maps metric names to floats plus a confusion
matrix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from kfp_spot.trainer import load_checkpoint
from trainer import data, model

_SPLITS = ("test", "train")


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` with 0 where ``den`` is 0 (a class never predicted or never present)."""
    return np.divide(num, den, out=np.zeros(len(num)), where=den > 0)


def evaluate(checkpoint_dir: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Score the checkpoint in ``checkpoint_dir``.

    Args:
        checkpoint_dir: a ``<root>/step-<n>`` directory written by ``trainer.task``.
        params: ``{"split": "test"}`` (default: the held-out rows the run never trained on) or
            ``{"split": "train"}``.

    Returns:
        ``accuracy``, ``macro_f1``, ``log_loss``, ``examples``, ``step`` (floats) and
        ``confusion_matrix`` ``{"labels": [0..9], "matrix": [[...]]}`` (rows: true labels).

    Raises:
        ValueError: naming the bad argument.
    """
    if not isinstance(checkpoint_dir, str) or not checkpoint_dir:
        raise ValueError(
            f"checkpoint_dir must be a step-<n> directory path, got {checkpoint_dir!r}"
        )
    if "://" not in checkpoint_dir and not os.path.isdir(checkpoint_dir):
        raise ValueError(f"checkpoint_dir {checkpoint_dir!r} is not a directory")
    params = dict(params or {})
    unknown = sorted(set(params) - {"split"})
    if unknown:
        raise ValueError(f"params: unknown key(s) {unknown}; the only parameter is 'split'")
    split = params.get("split", "test")
    if split not in _SPLITS:
        raise ValueError(f"params['split'] must be one of {_SPLITS}, got {split!r}")

    restored = load_checkpoint(checkpoint_dir)
    config = restored.state["config"]
    weights = restored.state["params"]
    X_train, y_train, X_test, y_test = data.split(int(config["split_seed"]))
    X, y = (X_test, y_test) if split == "test" else (X_train, y_train)

    probs = model.predict_proba(weights, X)
    predicted = probs.argmax(axis=1)
    labels = list(range(model.N_CLASSES))
    matrix = np.zeros((len(labels), len(labels)), dtype=np.int64)
    np.add.at(matrix, (y, predicted), 1)
    true_pos = np.diag(matrix).astype(np.float64)
    precision = np.divide(
        true_pos, matrix.sum(axis=0), out=np.zeros(len(labels)), where=matrix.sum(axis=0) > 0
    )
    recall = np.divide(
        true_pos, matrix.sum(axis=1), out=np.zeros(len(labels)), where=matrix.sum(axis=1) > 0
    )
    denom = precision + recall
    f1 = np.divide(2 * precision * recall, denom, out=np.zeros(len(labels)), where=denom > 0)
    return {
        "accuracy": float((predicted == y).mean()),
        "macro_f1": float(f1.mean()),
        "log_loss": float(-np.log(probs[np.arange(len(y)), y] + 1e-12).mean()),
        "examples": float(len(y)),
        "step": float(restored.step),
        "confusion_matrix": {"labels": labels, "matrix": matrix.tolist()},
    }
