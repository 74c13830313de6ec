"""The evaluation entry point's form: ``module:function``, checked before anything is imported.

Its own module so that what checks arguments before a run (``kfp-spot run``) reads the rule
without loading the evaluator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kfp_spot.evaluation.errors import EvaluationInputError
from kfp_spot.packaging.sources import ENTRY_POINT_FORM, is_entry_point

DEFAULT_ENTRY_POINT = "trainer.evaluate:evaluate"
"""The evaluation entry point of a package that names none (the bundled example's)."""


def resolve_entry_point(given: str, package_metadata: Mapping[str, Any]) -> str:
    """The entry point an evaluation calls: ``given``, else the package's, else the default.

    The package's is its ``[tool.kfp-spot] evaluation-entry-point``, which prepare_package
    records in the package artifact's metadata as ``evaluation_entry_point``.
    """
    named = package_metadata.get("evaluation_entry_point")
    return given or (named if isinstance(named, str) and named else DEFAULT_ENTRY_POINT)


def check_entry_point(entry_point: Any) -> None:
    """Check that ``entry_point`` reads as ``module:function`` (it is imported later).

    Raises:
        EvaluationInputError: naming ``entry_point`` and the form it must have.
    """
    if not is_entry_point(entry_point):
        raise EvaluationInputError("entry_point", f"{entry_point!r} is not {ENTRY_POINT_FORM}")
