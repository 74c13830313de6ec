"""Quality thresholds: ``{"accuracy": ">=0.9", "loss": "<=0.5", "f1": 0.8}``.

A bound is a finite number (meaning ``>=``) or a string ``OP NUMBER`` with OP one of ``>=``,
``>``, ``<=``, ``<``, ``==``; a string without OP also means ``>=``, but for a metric whose name
says smaller is better (:func:`smaller_is_better`: ``rmse``, ``val_loss``, ...) a bound without
OP is refused, as ``{"rmse": 0.2}`` would pass only models at least that bad. NaN never passes. An
infinite bound (``"<=inf"``, ``"<=1e400"``) is refused: it holds for every number or none, a gate
in name only.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kfp_spot.checkpoints.ranking import smaller_is_better
from kfp_spot.evaluation.errors import EvaluationInputError
from kfp_spot.vertex.values import show

_OPS = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
}
_BOUND_RE = re.compile(r"^\s*(>=|<=|==|>|<)?\s*([^<>=\s][^\s]*)\s*$")
_VALID = 'a number (meaning >=) or a string like ">=0.9", "<=0.5", ">0", "==1"'


@dataclass(frozen=True)
class Threshold:
    """One bound on one metric."""

    metric: str
    op: str
    bound: float

    def check(self, value: float) -> bool:
        """Whether ``value`` satisfies this bound (NaN never does)."""
        if value is None or math.isnan(value):
            return False
        return bool(_OPS[self.op](value, self.bound))

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"


def _implicit(field: str, metric: str, bound: object, value: float) -> Threshold:
    """A bound given without an operator: ``>=``, unless the metric is a smaller-is-better one."""
    if smaller_is_better(metric):
        raise EvaluationInputError(
            field,
            f"{show(bound)} has no operator, and a bound without one means >=, but a smaller "
            f'{metric} is better: write "<={value:g}" (or ">={value:g}" if at least that is meant)',
        )
    return Threshold(metric, ">=", value)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_thresholds(thresholds: Mapping[str, Any] | None) -> list[Threshold]:
    """Parse a thresholds mapping.

    Raises:
        EvaluationInputError: naming the metric whose bound is not valid.
    """
    if thresholds is None:
        return []
    if not isinstance(thresholds, Mapping):
        raise EvaluationInputError(
            "thresholds", f"must be a mapping of metric -> bound, got {type(thresholds).__name__}"
        )
    out: list[Threshold] = []
    problems: list[EvaluationInputError] = []
    for metric, bound in thresholds.items():
        try:
            out.append(_parse_one(metric, bound))
        except EvaluationInputError as exc:  # every bad bound named at once, not one per run
            problems.append(exc)
    if problems:
        raise EvaluationInputError.several("thresholds", problems)
    return out


def _parse_one(metric: Any, bound: Any) -> Threshold:
    """One metric's bound.

    Raises:
        EvaluationInputError: naming the metric, when its bound is not valid.
    """
    if not isinstance(metric, str) or not metric.strip():
        raise EvaluationInputError("thresholds", f"metric name {metric!r} is empty")
    field = f"thresholds[{metric!r}]"
    if isinstance(bound, bool):
        raise EvaluationInputError(field, f"{show(bound)} is not a bound; use {_VALID}")
    if isinstance(bound, (int, float)):
        if not math.isfinite(bound):
            raise EvaluationInputError(field, f"{bound} is not a bound; use {_VALID}")
        return _implicit(field, metric, bound, float(bound))
    if not isinstance(bound, str):
        raise EvaluationInputError(field, f"{show(bound)} is not a bound; use {_VALID}")
    match = _BOUND_RE.fullmatch(bound)
    value = _number(match.group(2)) if match else None
    if match is None or value is None:
        raise EvaluationInputError(field, f"{show(bound)} is not a bound; use {_VALID}")
    op = match.group(1)
    return Threshold(metric, op, value) if op else _implicit(field, metric, bound, value)
