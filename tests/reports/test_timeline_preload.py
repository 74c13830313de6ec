"""A run's report imports: loaded in the background while the run's tasks run, not after them."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys

from kfp_spot.reports import timeline

PROGRAM = """
import sys
import kfp_spot.reports as reports
from kfp_spot.pipelines import local  # the local runner, which starts the preload
from kfp_spot.reports.timeline import MATPLOTLIB_MODULES
assert "matplotlib.figure" not in sys.modules, "imported before the run asked for it"
thread = reports.preload_timeline()
assert thread.daemon  # never keeps a finished run's process alive
thread.join(timeout=120)
loaded = set(MATPLOTLIB_MODULES)
assert loaded <= set(sys.modules), loaded - set(sys.modules)
print("ok")
"""


def test_the_timeline_imports_load_in_a_daemon_thread_and_not_before():
    run = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=180
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"


def test_the_preloaded_modules_are_the_ones_the_timeline_imports():
    tree = ast.parse(inspect.getsource(timeline.timeline_figure))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {
        a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
    }
    assert imported == set(timeline.MATPLOTLIB_MODULES)
