"""The entry point called in the package's environment: a subprocess, its timeout, its failures.

The function runs as ``python -m kfp_spot.evaluation.runner`` in an environment holding the
package (never this process: the package's dependencies are not ours), from an empty directory,
with the job's environment, and answers through a JSON file.
"""

from __future__ import annotations

import json
import logging
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kfp_spot import envcache
from kfp_spot.evaluation import runner
from kfp_spot.evaluation.entry_point import environ_for
from kfp_spot.evaluation.errors import EvaluationError, EvaluationInputError
from kfp_spot.vertex.signals import cancel_on_signals

log = logging.getLogger(__name__)


def _stopped(signum: int) -> SystemExit:
    """What SIGTERM/SIGINT raise while the entry point runs: ``subprocess.run`` then kills it.

    SIGTERM's default ended this process at once and left the entry point running, an orphan,
    after the task was stopped (a local run interrupted with ``kill`` or ``timeout``).
    """
    log.warning("signal %d: stopping the evaluation's process", signum)
    return SystemExit(128 + signum)


def run_entry_point(
    python: Path,
    entry_point: str,
    checkpoint_dir: Path,
    params: Mapping[str, Any],
    timeout_s: float | None,
    hint: str = "",
) -> Any:
    """What the entry point returned (JSON); ``hint`` ends a failure to load it.

    Raises:
        EvaluationInputError: naming ``entry_point``, when it cannot be loaded or called.
        EvaluationError: it failed, or did not finish in ``timeout_s`` seconds.
    """
    with tempfile.TemporaryDirectory(prefix="kfp-spot-eval-") as tmp:
        params_path = Path(tmp, "params.json")
        result_path = Path(tmp, "result.json")
        params_path.write_text(json.dumps(dict(params)))
        cwd = Path(tmp, "cwd")
        cwd.mkdir()  # empty: imports come from the installed package, not a stray local file
        cmd = [str(python), "-m", runner.__name__, entry_point, str(checkpoint_dir)]
        cmd += [str(params_path), str(result_path)]
        # the installed packages only, as in the image; not this machine's own settings
        env = environ_for(python, entry_point, envcache.job_environ())
        try:
            with cancel_on_signals(_stopped):  # the process must not outlive the task
                proc = subprocess.run(
                    cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s
                )
        except subprocess.TimeoutExpired as exc:
            raise EvaluationError(f"{entry_point} did not finish in {timeout_s} s") from exc
        for line in proc.stdout.splitlines():
            log.info("evaluate: %s", line)
        # Its warnings (a library's, warnings.warn, logging) go to stderr: kept in the task's
        # log whatever the outcome, not only the last lines of a failure.
        for line in proc.stderr.splitlines():
            log.info("evaluate (stderr): %s", line)
        tail = "\n".join(proc.stderr.strip().splitlines()[-30:])
        if proc.returncode == runner.EXIT_ENTRY_POINT:  # the runner's line names the field
            raise EvaluationInputError("entry_point", tail.removeprefix("entry_point: ") + hint)
        if proc.returncode != 0:
            raise EvaluationError(
                f"evaluation with {entry_point} failed (exit {proc.returncode}):\n{tail}"
            )
        return json.loads(result_path.read_text())
