"""Evaluation entry point: score one checkpoint step on the held-out split.

``evaluate(checkpoint_dir, params)`` as kfp-spot's evaluator calls it: ``checkpoint_dir`` is a
verified ``step-<n>`` directory; ``model.weights.h5`` in it is Keras' own format.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from kfp_spot.trainer.integrations.keras import load_step
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
    model = build(hidden=int(params.get("hidden", 64)), dropout=float(params.get("dropout", 0.2)))
    # The step's model.weights.h5 holds the optimizer's state too: load_step builds the optimizer
    # first, so nothing is skipped (and Keras warns about nothing).
    load_step(model, checkpoint_dir)
    _, _, X_test, y_test = data.split(int(params.get("split_seed", 0)))
    out = data.scores(model.predict(X_test, verbose=0), y_test)
    with open(os.path.join(checkpoint_dir, "position.json")) as handle:
        out["step"] = float(json.load(handle)["step"])
    return out
