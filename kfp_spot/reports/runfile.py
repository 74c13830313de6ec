"""``run.json``, a run directory's record: its name, and the error that names a bad field of it."""

from __future__ import annotations

RUN_FILE = "run.json"


class ReportError(Exception):
    """A run directory cannot be reported on; the message names the file and field."""
