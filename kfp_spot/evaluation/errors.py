"""Errors of evaluate_checkpoint: each names the input at fault and what would be valid."""

from __future__ import annotations

from collections.abc import Sequence


class EvaluationInputError(ValueError):
    """An input of the evaluation is invalid.

    Attributes:
        field: the input at fault (``step``, ``thresholds``, ``entry_point``, ...).
    """

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field

    @classmethod
    def several(cls, field: str, errors: Sequence[EvaluationInputError]) -> EvaluationInputError:
        """One error for every problem found in ``field``: a line each, naming its own field."""
        if len(errors) == 1:
            return errors[0]
        error = cls(field, "")
        error.args = ("\n".join(map(str, errors)),)
        return error


class EvaluationError(RuntimeError):
    """The package's evaluation entry point failed or returned something unusable."""
