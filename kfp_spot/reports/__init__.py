"""Run reports: a timeline PNG and a Markdown summary from a run directory.

A run directory holds ``run.json`` (schema: docs/reports.md) whose ``checkpoint_uri`` names the
checkpoint root with its ``step-<n>/manifest.json`` files and ``_attempts/*.json`` records.
:func:`write_report` turns it into ``report.png`` and ``report.md`` next to ``run.json``. Every
count, cost and goodput figure is :mod:`kfp_spot.accounting`'s, as in the launcher's job report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kfp_spot import fs
from kfp_spot.reports.run import CheckpointSave, ReportError, RunData, load_run, run_from_json
from kfp_spot.reports.summary import RunSummary, render_markdown, summarize
from kfp_spot.reports.timeline import (
    failover_marks,
    lane_label,
    render_timeline,
    timeline_figure,
)

PNG_NAME = "report.png"
MARKDOWN_NAME = "report.md"

__all__ = [
    "MARKDOWN_NAME",
    "PNG_NAME",
    "CheckpointSave",
    "Report",
    "ReportError",
    "RunData",
    "RunSummary",
    "failover_marks",
    "lane_label",
    "load_run",
    "render_markdown",
    "render_timeline",
    "run_from_json",
    "summarize",
    "timeline_figure",
    "write_report",
]


@dataclass(frozen=True)
class Report:
    """The files :func:`write_report` wrote and the numbers in them."""

    png: Path
    markdown: Path
    summary: RunSummary


def write_report(run_dir: str | os.PathLike[str]) -> Report:
    """Write ``report.png`` and ``report.md`` into ``run_dir``.

    Args:
        run_dir: a run directory with ``run.json``.

    Returns:
        The paths written and the summary numbers.

    Raises:
        ReportError: when the run directory cannot be read (the message names the problem).
    """
    run = load_run(run_dir)
    summary = summarize(run)
    png = render_timeline(
        run, run.run_dir / PNG_NAME, summary=summary.accounting, regions=summary.regions
    )
    markdown = run.run_dir / MARKDOWN_NAME
    fs.atomic_write(str(markdown), render_markdown(run, summary, timeline=PNG_NAME))
    return Report(png=png, markdown=markdown, summary=summary)
