"""The evaluation entry point's form: ``module:function``, checked before anything is imported.

Its own module so that what checks arguments before a run (``kfp-spot run``) reads the rule
without loading the evaluator.
"""

from __future__ import annotations

from typing import Any

from kfp_spot.evaluation.errors import EvaluationInputError
from kfp_spot.packaging.sources import is_module_name


def check_entry_point(entry_point: Any) -> None:
    """Check that ``entry_point`` reads as ``module:function`` (it is imported later).

    Raises:
        EvaluationInputError: naming ``entry_point`` and the form it must have.
    """
    module, sep, function = (entry_point if isinstance(entry_point, str) else "").partition(":")
    if not sep or not is_module_name(module) or not function.isidentifier():
        raise EvaluationInputError(
            "entry_point",
            f"{entry_point!r} is not module:function (e.g. trainer.evaluate:evaluate)",
        )
