"""How an evaluation's metric value is kept in artifact metadata, and read back from it.

Artifact metadata is JSON (a protobuf Struct on the KFP backend): NaN and infinities are no
numbers there (the backend's launcher refuses an executor output holding one), so an evaluation
keeps them as the text ``"nan"``, ``"inf"`` and ``"-inf"``. Every reader of the evaluation's
metrics (``report.md``, the run's printout) reads them back through :func:`as_number`, so a NaN
loss, the reason a gate failed, is shown, not dropped. Light: no import beyond the standard
library.
"""

from __future__ import annotations

import math

NON_FINITE_TEXT = ("nan", "inf", "-inf")
"""The text a non-finite metric value is kept as."""


def as_metadata(value: float) -> float | str:
    """``value`` as artifact metadata holds it: a finite number as it is, else its text."""
    return value if math.isfinite(value) else str(value)


def as_number(value: object) -> float | None:
    """A metric value read back from metadata: a number (no bool), or a non-finite one's text.

    None for anything else (a checkpoint URI, the ``passed`` verdict).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return float(value) if isinstance(value, str) and value in NON_FINITE_TEXT else None
