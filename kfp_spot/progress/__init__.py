"""What a long local run shows on the terminal, and where everything else it prints goes.

- :mod:`~kfp_spot.progress.capture`: everything printed or logged goes to log files.
- :mod:`~kfp_spot.progress.kfplocal`: kfp.local's task events, read from its log records.
- :mod:`~kfp_spot.progress.taskoutput`: what a task printed: its error, its warnings, its last
  line.
- :mod:`~kfp_spot.progress.monitor`: task and attempt events, the live status, failures.
- :mod:`~kfp_spot.progress.console`: event lines and a live status line on a terminal.
- :mod:`~kfp_spot.progress.localrun`: all of it wired up for ``run_local``.
"""

from kfp_spot.progress.capture import OutputCapture
from kfp_spot.progress.console import Console
from kfp_spot.progress.localrun import (
    LocalRunProgress,
    emulator_jobs,
    latest_step,
    replica_output,
)
from kfp_spot.progress.monitor import JobView, RunMonitor

__all__ = [
    "Console",
    "JobView",
    "LocalRunProgress",
    "OutputCapture",
    "RunMonitor",
    "emulator_jobs",
    "latest_step",
    "replica_output",
]
