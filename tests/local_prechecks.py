"""What a local run says before it starts, without running anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def warnings_before_the_run(tmp_path: Path, source: Path, parameters: dict[str, Any]) -> list[str]:
    """The ``warning:`` lines ``run_local`` shows for ``source`` before its tasks would start.

    The run directory is one an earlier run used, which the run refuses once its own checks (and
    their warnings) are done: nothing is packaged or trained.
    """
    from kfp_spot.pipelines.local_run import LocalRunError, run_local

    used = tmp_path / "used-run"
    used.mkdir()
    (used / "report.md").write_text("an earlier run\n")
    lines: list[str] = []
    with pytest.raises(LocalRunError, match="run_dir"):
        run_local(used, source=source, parameters=parameters, progress=lines.append)
    return [line for line in lines if line.startswith("warning: ")]
