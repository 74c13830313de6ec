"""Errors of evaluate_checkpoint: each names the input at fault and what would be valid."""

from __future__ import annotations


class EvaluationInputError(ValueError):
    """An input of the evaluation is invalid.

    Attributes:
        field: the input at fault (``step``, ``thresholds``, ``entry_point``, ...).
    """

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


class EvaluationError(RuntimeError):
    """The package's evaluation entry point failed or returned something unusable."""
