"""Run reports: a timeline PNG and a Markdown summary from a run directory.

A run directory holds ``run.json`` (schema: docs/reports.md) whose ``checkpoint_uri`` names the
checkpoint root with its ``step-<n>/manifest.json`` files and ``_attempts/*.json`` records.
:func:`write_report` turns it into ``report.png`` and ``report.md`` next to ``run.json``. Every
count, cost and goodput figure is :mod:`kfp_spot.accounting`'s, as in the launcher's job report.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from kfp_spot import fs
from kfp_spot.reports.run import CheckpointSave, RunData, load_run, run_from_json
from kfp_spot.reports.runfile import ReportError
from kfp_spot.reports.summary import RunSummary, render_markdown, summarize
from kfp_spot.reports.timeline import (
    MATPLOTLIB_MODULES,
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
    "preload_timeline",
    "render_markdown",
    "render_timeline",
    "run_from_json",
    "summarize",
    "timeline_figure",
    "write_report",
]


def preload_timeline() -> threading.Thread:
    """Import the matplotlib modules :func:`write_report`'s timeline draws with, in a thread.

    A run that writes its report when it ends (``kfp-spot run``, ``local.run``) starts this as
    it starts, so the ~0.5 s import happens while the run waits on its tasks rather than after
    them. A missing matplotlib is left for the report itself to raise. Returns the (daemon)
    thread.
    """

    def load() -> None:
        with contextlib.suppress(ImportError):
            for module in MATPLOTLIB_MODULES:
                importlib.import_module(module)

    thread = threading.Thread(target=load, name="preload-timeline", daemon=True)
    thread.start()
    return thread


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
    markdown = run.run_dir / MARKDOWN_NAME
    try:
        png = render_timeline(
            run, run.run_dir / PNG_NAME, summary=summary.accounting, regions=summary.regions
        )
        fs.atomic_write(str(markdown), render_markdown(run, summary, timeline=PNG_NAME))
    except OSError as exc:  # e.g. report.md is a directory, or the run dir is read-only
        raise ReportError(
            f"cannot write the report into {run.run_dir}: {exc.strerror or exc} "
            f"({exc.filename2 or exc.filename}); {PNG_NAME} and {MARKDOWN_NAME} there must be "
            "writable files"
        ) from exc
    return Report(png=png, markdown=markdown, summary=summary)
