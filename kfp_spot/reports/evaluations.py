"""What ``run.json`` says of a run's evaluations: the checkpoint scored, a sweep's evaluations.

A run with one evaluation keeps its metrics as ``metrics``; a run whose tasks wrote several
(evaluations in a ``dsl.ParallelFor``) keeps each as ``evaluations`` (``task``, ``metrics``),
which ``report.md`` lists as the printed summary does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kfp_spot.reports.runfile import RUN_FILE, ReportError


@dataclass(frozen=True)
class Evaluation:
    """One task's evaluation: its path in the run and its Metrics output's metadata."""

    task: str
    metrics: dict[str, Any]

    @property
    def passed(self) -> bool | None:
        """Its quality gate's verdict; None when its metrics hold none."""
        value = self.metrics.get("passed")
        return value if isinstance(value, bool) else None


def gate_count(evaluations: Sequence[Evaluation]) -> str:
    """A sweep's quality gate, as the printout and ``report.md`` say it: ``N of M passed``."""
    return f"{sum(e.passed is True for e in evaluations)} of {len(evaluations)} passed"


def evaluations_of(doc: Mapping[str, Any]) -> list[Evaluation]:
    """``run.json``'s ``evaluations``; empty when it has none.

    Raises:
        ReportError: naming the field, when it is not a list of ``{"task", "metrics"}`` objects.
    """
    raw = doc.get("evaluations") or []
    ok = isinstance(raw, list) and all(
        isinstance(e, dict)
        and isinstance(e.get("task"), str)
        and isinstance(e.get("metrics"), dict)
        for e in raw
    )
    if not ok:
        raise ReportError(
            f"{RUN_FILE}: 'evaluations' must be a list of objects with 'task' (a string) and "
            "'metrics' (an object)"
        )
    return [Evaluation(e["task"], dict(e["metrics"])) for e in raw]


def evaluated_text(doc: Mapping[str, Any]) -> str:
    """The checkpoint ``run.json``'s ``evaluated_checkpoint`` names, as reports say it ("": none).

    Its ``step`` null: a directory scored whole, or unknown when the evaluation gave no metrics.
    """
    raw = doc.get("evaluated_checkpoint")
    if raw is None:
        return ""
    uri, step = (raw.get("uri"), raw.get("step")) if isinstance(raw, dict) else (None, None)
    if not uri or not isinstance(uri, str) or type(step) not in (int, type(None)):
        raise ReportError(
            f"{RUN_FILE}: 'evaluated_checkpoint' must be an object with 'uri' (a non-empty "
            f"string) and 'step' (an integer or null), got {raw!r}"
        )
    if step is not None:
        return f"step {step} of {uri}"
    scored = isinstance(doc.get("metrics"), dict) and "checkpoint_step" in doc["metrics"]
    if scored:
        return f"the whole directory of {uri}"
    return f"{uri}, step unknown (the evaluation gave no metrics)"
