"""Evaluation entry point: score one checkpoint step on the held-out split.

``evaluate(checkpoint_dir, params)`` as kfp-spot's evaluator calls it: ``checkpoint_dir`` is a
verified ``step-<n>`` directory; ``booster.ubj`` in it is XGBoost's own model format.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import xgboost as xgb

from trainer import data


def evaluate(checkpoint_dir: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Accuracy, log loss, examples, step (rounds) and the confusion matrix of the booster.

    Args:
        checkpoint_dir: a ``step-<n>`` directory written by ``trainer.task``.
        params: ``split_seed`` (default 0, as in training).

    Raises:
        ValueError: naming the bad argument.
    """
    params = dict(params or {})
    unknown = sorted(set(params) - {"split_seed"})
    if unknown:
        raise ValueError(f"params: unknown key(s) {unknown}; the only parameter is 'split_seed'")
    path = os.path.join(checkpoint_dir, "booster.ubj")
    if not os.path.isfile(path):
        raise ValueError(f"{checkpoint_dir} has no booster.ubj: not a step of trainer.task")
    booster = xgb.Booster(model_file=path)
    _, _, X_test, y_test = data.split(int(params.get("split_seed", 0)))
    out = data.scores(booster.predict(xgb.DMatrix(X_test)), y_test)
    with open(os.path.join(checkpoint_dir, "rounds.json")) as handle:
        out["step"] = float(json.load(handle)["rounds"])
    return out
