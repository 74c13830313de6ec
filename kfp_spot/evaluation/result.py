"""What an evaluation entry point returned, read as metrics and a confusion matrix.

Every value that is no metric is named at once, each with what to return instead; a confusion
matrix must hold finite numbers only, as the ClassificationMetrics metadata on Vertex AI
Pipelines must.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

from kfp_spot.evaluation.errors import EvaluationError

CONFUSION_MATRIX_KEY = "confusion_matrix"
# Facts the evaluator adds to the Metrics artifact; a metric of the same name would be ambiguous.
RESERVED_METRICS = (
    "checkpoint_step",
    "checkpoint_manifest_sha256",
    "checkpoint_uri",
    "checkpoint_layout",
    "checkpoint_verified",
    "passed",
)


@dataclass(frozen=True)
class ConfusionMatrix:
    """A confusion matrix: ``matrix[i][j]`` counts true ``labels[i]`` predicted as ``labels[j]``."""

    labels: tuple[str, ...]
    matrix: tuple[tuple[float, ...], ...]


def _not_a_number(key: str, value: Any) -> str:
    """What to do instead of returning ``value`` as a metric (which is not a number)."""
    if isinstance(value, bool):
        return ": a bool; return float(...) of it (1.0 or 0.0) to report or gate on it"
    if value is None:
        return (
            ": None; return a number (float('nan') for one that could not be computed: it is "
            "reported, and fails any threshold on it)"
        )
    if isinstance(value, dict):
        inner = next(iter(value), "accuracy")
        return (
            ": a mapping; return each number in it as a metric of its own name "
            f"(e.g. '{key}/{inner}')"
        )
    if isinstance(value, list):
        return ": a list; return one number per metric (e.g. its mean, or one metric per item)"
    return ""


def _metric_problem(entry_point: str, key: str, value: Any) -> str:
    """Why ``key: value`` of the result is no metric; ``""`` when it is one."""
    if not key.strip():
        return f"{entry_point} returned a metric with an empty name ({key!r}); name each metric"
    if key in RESERVED_METRICS:
        return (
            f"{entry_point} returned a metric named {key!r}, which the evaluator reports itself; "
            "rename it"
        )
    huge = isinstance(value, int) and abs(value) > sys.float_info.max  # beyond a float
    if isinstance(value, bool) or not isinstance(value, (int, float)) or huge:
        shown = _shown_number(value) if huge else repr(value)
        return (
            f"{entry_point} returned metric {key!r} = {shown}, which is not a number"
            + (" a metric can hold (a float: at most about 1.8e308)" if huge else "")
            + _not_a_number(key, value)
        )
    return ""


def parse_result(entry_point: str, result: Any) -> tuple[dict[str, float], ConfusionMatrix | None]:
    """The metrics and confusion matrix of what the entry point returned.

    Raises:
        EvaluationError: naming every value that is no metric, one line each (the evaluation
            may have taken hours: one run shows them all).
    """
    if not isinstance(result, dict):
        what = "None (does it end without a return?)" if result is None else type(result).__name__
        raise EvaluationError(
            f"{entry_point} returned {what}; it must return a dict of metric "
            "name -> number (optionally with 'confusion_matrix')"
        )
    metrics: dict[str, float] = {}
    matrix = None
    problems: list[str] = []
    for key, value in result.items():
        if key == CONFUSION_MATRIX_KEY:
            try:
                matrix = _parse_confusion_matrix(entry_point, value)
            except EvaluationError as exc:
                problems.append(str(exc))
            continue
        problem = _metric_problem(entry_point, key, value)
        if problem:
            problems.append(problem)
        else:
            metrics[key] = float(value)
    if problems:
        raise EvaluationError("\n".join(problems))
    return metrics, matrix


def _shown_number(number: float) -> str:
    """``number`` as an error shows it: an integer no float holds by its length."""
    return (
        f"an integer of {len(str(abs(number)))} digits"
        if not _finite(number) and isinstance(number, int)
        else repr(number)
    )


def _finite(number: float) -> bool:
    """Whether ``number`` is a finite float, or an integer a float holds."""
    if isinstance(number, int):
        return abs(number) <= sys.float_info.max
    return math.isfinite(number)


def _parse_confusion_matrix(entry_point: str, value: Any) -> ConfusionMatrix:
    problem = (
        f"{entry_point} returned a malformed {CONFUSION_MATRIX_KEY!r}: expected "
        '{"labels": [n names], "matrix": [n rows of n numbers]}'
    )
    if not isinstance(value, dict) or "labels" not in value or "matrix" not in value:
        raise EvaluationError(problem)
    labels, rows = value["labels"], value["matrix"]
    if not isinstance(labels, list) or not isinstance(rows, list) or len(rows) != len(labels):
        raise EvaluationError(problem)
    if len(set(map(str, labels))) != len(labels):
        raise EvaluationError(f"{problem} (labels repeat)")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(labels):
            raise EvaluationError(problem)
        if any(isinstance(c, bool) or not isinstance(c, (int, float)) for c in row):
            raise EvaluationError(problem)
        # The ClassificationMetrics metadata is JSON: the KFP backend refuses a NaN or an
        # infinity there, after the task's work (and a number no float holds is none there).
        bad = next((j for j, c in enumerate(row) if not _finite(c)), None)
        if bad is not None:
            raise EvaluationError(
                f"{problem}: matrix[{i}][{bad}] (true {labels[i]!r}, predicted {labels[bad]!r}) "
                f"is {_shown_number(row[bad])}; every cell must be a finite number (a count, or "
                "a rate), as ClassificationMetrics metadata on Vertex AI Pipelines must hold"
            )
    return ConfusionMatrix(tuple(map(str, labels)), tuple(tuple(row) for row in rows))
