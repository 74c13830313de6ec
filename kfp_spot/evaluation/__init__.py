"""Trustworthy evaluation from a checkpoint: verify, score with the package, gate on thresholds.

Runtime of the ``evaluate_checkpoint`` component (no kfp import). ``evaluate`` works without
KFP; ``component_entry`` adapts it to the component's artifacts.
"""

from kfp_spot.evaluation.component import component_entry
from kfp_spot.evaluation.core import (
    ConfusionMatrix,
    EvaluationResult,
    ThresholdCheck,
    evaluate,
)
from kfp_spot.evaluation.errors import EvaluationError, EvaluationInputError
from kfp_spot.evaluation.report import render as render_report
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
