"""The Markdown report of an evaluation (the component's ``report`` output)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kfp_spot.evaluation.core import EvaluationResult


def _cell(value: Any) -> str:
    text = f"{value:.6g}" if isinstance(value, float) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def render(result: EvaluationResult, package: Mapping[str, Any] | None = None) -> str:
    """Render ``result`` as Markdown.

    Args:
        result: the evaluation.
        package: the package artifact's metadata (name, version, sha256), when known.

    Returns:
        The report text.
    """
    verdict = "PASSED" if result.passed else "FAILED"
    lines = [
        f"# Checkpoint evaluation: {verdict}",
        "",
        "| | |",
        "| --- | --- |",
        f"| checkpoint | `{_cell(result.checkpoint_uri)}` |",
    ]
    if result.verified:
        lines += [
            f"| step | {result.step} ({_cell(result.selection)}) |",
            f"| committed at | {result.manifest_time} |",
            f"| manifest sha256 | `{result.manifest_digest}` |",
        ]
    else:
        lines += [
            f"| layout | {_cell(result.layout)}: {_cell(result.selection)} |",
            "| verified | **no**: no kfp-spot manifest (allow_foreign_layout) |",
        ]
    lines += [
        f"| entry point | `{_cell(result.entry_point)}` |",
    ]
    if package:
        lines.append(
            f"| package | {_cell(package.get('name', '?'))} {_cell(package.get('version', ''))} "
            f"(sha256 `{_cell(package.get('sha256', '?'))}`) |"
        )
    lines.append(f"| package URIs | {', '.join(f'`{_cell(u)}`' for u in result.package_uris)} |")
    if result.params:
        lines.append(f"| params | `{_cell(json.dumps(result.params, sort_keys=True))}` |")
    lines.append(f"| evaluation time | {result.seconds:.2f} s |")
    if result.skipped:
        lines += ["", "## Steps passed over", ""]
        lines += [f"- step {step}: {_cell(reason)}" for step, reason in result.skipped]
    lines += ["", "## Metrics", "", "| metric | value |", "| --- | --- |"]
    lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in sorted(result.metrics.items())]
    if result.checks:
        lines += ["", "## Quality thresholds", "", "| threshold | value | result |"]
        lines.append("| --- | --- | --- |")
        lines += [
            f"| {_cell(str(c.threshold))} | {_cell(c.value)} | {'pass' if c.passed else 'FAIL'} |"
            for c in result.checks
        ]
    else:
        lines += ["", "No quality thresholds were set: the gate passes."]
    matrix = result.confusion_matrix
    if matrix is not None:
        lines += ["", "## Confusion matrix", "", "rows: true label, columns: predicted", ""]
        lines.append("| | " + " | ".join(_cell(label) for label in matrix.labels) + " |")
        lines.append("| --- " * (len(matrix.labels) + 1) + "|")
        for label, row in zip(matrix.labels, matrix.matrix, strict=True):
            lines.append(f"| **{_cell(label)}** | " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"
