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
import threading
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from kfp_spot import envcache
from kfp_spot.evaluation import runner
from kfp_spot.evaluation.entry_point import environ_for
from kfp_spot.evaluation.errors import EvaluationError, EvaluationInputError
from kfp_spot.vertex.signals import cancel_on_signals, held

log = logging.getLogger(__name__)


def _stopped(signum: int) -> SystemExit:
    """What SIGTERM/SIGINT raise while the entry point runs: ``subprocess.run`` then kills it.

    SIGTERM's default ended this process at once and left the entry point running, an orphan,
    after the task was stopped (a local run interrupted with ``kill`` or ``timeout``).
    """
    log.warning("signal %d: stopping the evaluation's process", signum)
    return SystemExit(128 + signum)


def _pump(stream: IO[str], form: str, kept: deque[str] | None = None) -> None:
    """Log each line of ``stream`` as it comes (``form`` % line); the last ones go in ``kept``."""
    for line in stream:
        line = line.rstrip("\n")
        log.info(form, line)
        if kept is not None:
            kept.append(line)


def _run_logged(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout_s: float | None, entry_point: str
) -> tuple[int, list[str]]:
    """Run ``cmd``, logging its stdout and stderr lines as they come: its status and stderr.

    A long evaluation's progress is in the task's log while it runs, not only once it ended;
    stderr (a library's warnings, ``warnings.warn``, logging) is logged whatever the outcome.
    The process is killed when this is interrupted (SIGTERM, SIGINT) or times out.

    Raises:
        EvaluationError: it did not finish in ``timeout_s`` seconds.
    """
    stderr: deque[str] = deque(maxlen=30)  # what a failure shows: its traceback's end
    pumps: list[threading.Thread] = []
    proc: subprocess.Popen[str] | None = None
    try:  # from here on a signal kills the process: it may come before the pumps run
        with held():  # one that comes as it starts is raised once the process is ours to kill
            proc = subprocess.Popen(  # bytes no text holds replaced: a pump must always read
                cmd,
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
            )
        assert proc.stdout is not None and proc.stderr is not None
        for stream, form, kept in (
            (proc.stdout, "evaluate: %s", None),
            (proc.stderr, "evaluate (stderr): %s", stderr),
        ):
            pumps.append(threading.Thread(target=_pump, args=(stream, form, kept), daemon=True))
            pumps[-1].start()
        returncode = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        assert proc is not None
        proc.kill()
        raise EvaluationError(f"{entry_point} did not finish in {timeout_s} s") from exc
    except BaseException:
        if proc is not None:
            proc.kill()
        raise
    finally:
        for pump in pumps:
            if pump.ident is not None:  # started
                pump.join()
        if proc is not None:
            with proc:  # closes its pipes and reaps it
                pass
    return returncode, list(stderr)


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
        env["PYTHONUNBUFFERED"] = "1"  # its prints reach the log as it makes them
        with cancel_on_signals(_stopped):  # the process must not outlive the task
            returncode, stderr = _run_logged(cmd, cwd, env, timeout_s, entry_point)
        tail = "\n".join(stderr).strip()
        if returncode == runner.EXIT_ENTRY_POINT:  # the runner's line names the field
            raise EvaluationInputError("entry_point", tail.removeprefix("entry_point: ") + hint)
        if returncode != 0:
            raise EvaluationError(
                f"evaluation with {entry_point} failed (exit {returncode}):\n{tail}"
            )
        return json.loads(result_path.read_text())
