"""Evaluation entry point: score one checkpoint step on the held-out split.

``evaluate(checkpoint_dir, params)`` as kfp-spot's evaluator calls it: ``checkpoint_dir`` is a
verified ``step-<n>`` directory; ``model.weights.h5`` in it is Keras' own format.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from trainer import data
from trainer.model import build


def evaluate(checkpoint_dir: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Accuracy, log loss, examples, step and the confusion matrix of the step's model.

    Args:
        checkpoint_dir: a ``step-<n>`` directory written by ``trainer.task``.
        params: ``split_seed`` (default 0, as in training), ``hidden``, ``dropout``.

    Raises:
        ValueError: naming the bad argument.
    """
    params = dict(params or {})
    unknown = sorted(set(params) - {"split_seed", "hidden", "dropout"})
    if unknown:
        raise ValueError(f"params: unknown key(s) {unknown}; known: split_seed, hidden, dropout")
    weights = os.path.join(checkpoint_dir, "model.weights.h5")
    if not os.path.isfile(weights):
        raise ValueError(f"{checkpoint_dir} has no model.weights.h5: not a step of trainer.task")
    model = build(hidden=int(params.get("hidden", 64)), dropout=float(params.get("dropout", 0.2)))
    model.optimizer.build(model.trainable_variables)  # the file holds the optimizer's state too
    model.load_weights(weights)
    _, _, X_test, y_test = data.split(int(params.get("split_seed", 0)))
    out = data.scores(model.predict(X_test, verbose=0), y_test)
    with open(os.path.join(checkpoint_dir, "position.json")) as handle:
        out["step"] = float(json.load(handle)["step"])
    return out
