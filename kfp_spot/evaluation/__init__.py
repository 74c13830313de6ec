"""Trustworthy evaluation from a checkpoint: verify, score with the package, gate on thresholds.

Runtime of the ``evaluate_checkpoint`` component (no kfp import). ``evaluate`` works without
KFP; ``component_entry`` adapts it to the component's artifacts.

The names below load on first use (PEP 562): the evaluation itself runs as
``python -m kfp_spot.evaluation.runner`` in the package's environment, which imports this package
first and needs none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kfp_spot.evaluation.component import component_entry
    from kfp_spot.evaluation.core import EvaluationResult, ThresholdCheck, evaluate
    from kfp_spot.evaluation.errors import EvaluationError, EvaluationInputError
    from kfp_spot.evaluation.report import render as render_report
    from kfp_spot.evaluation.result import ConfusionMatrix
    from kfp_spot.evaluation.selection import StepRequest, parse_step
    from kfp_spot.evaluation.thresholds import Threshold, parse_thresholds

__all__ = [
    "ConfusionMatrix",
    "EvaluationError",
    "EvaluationInputError",
    "EvaluationResult",
    "StepRequest",
    "Threshold",
    "ThresholdCheck",
    "component_entry",
    "evaluate",
    "parse_step",
    "parse_thresholds",
    "render_report",
]

# name -> (module, attribute)
_HOMES = {
    "component_entry": ("component", "component_entry"),
    "ConfusionMatrix": ("result", "ConfusionMatrix"),
    "EvaluationResult": ("core", "EvaluationResult"),
    "ThresholdCheck": ("core", "ThresholdCheck"),
    "evaluate": ("core", "evaluate"),
    "EvaluationError": ("errors", "EvaluationError"),
    "EvaluationInputError": ("errors", "EvaluationInputError"),
    "render_report": ("report", "render"),
    "StepRequest": ("selection", "StepRequest"),
    "parse_step": ("selection", "parse_step"),
    "Threshold": ("thresholds", "Threshold"),
    "parse_thresholds": ("thresholds", "parse_thresholds"),
}


def __getattr__(name: str) -> Any:
    """The public name ``name``, imported from its module on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home[0]}"), home[1])
    globals()[name] = value  # the next use is a plain attribute
    return value
