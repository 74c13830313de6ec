"""A local run's directory: the default one, claimed as the run starts, and one a run may use.

Everything a run writes goes there (kept after it); a directory an earlier run wrote into, or
holding files of the names a run writes, is refused.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kfp_spot.packaging.sources import LOCAL_RUNS_DIR
from kfp_spot.pipelines.local_arguments import LocalRunError

RUN_DIR_ENTRIES = ("run.json", "emulator", "job/checkpoints", "pipeline_root")
"""What only a run writes into its directory: a directory holding one already holds a run."""
RUN_DIR_WRITES = ("job", "logs", "staging", "report.md", "report.png")
"""What else a run writes into its directory: files of these names there would be overwritten."""


def default_run_dir() -> Path:
    """``kfp-spot-runs/<YYYYmmdd-HHMMSS>``, with ``-2``, ``-3``, ... when that one exists."""
    base = Path(LOCAL_RUNS_DIR) / time.strftime("%Y%m%d-%H%M%S")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def claim_default_run_dir() -> Path:
    """:func:`default_run_dir`, created at once: the directory is this run's alone.

    Two runs started in the same second (a shell loop, a CI matrix) both found
    ``kfp-spot-runs/<time>`` free; the second was then refused for the first one's files, naming
    a directory it was never given, or, checked before the first wrote any, shared it. ``mkdir``
    claims one atomically; the next free ``-2``, ``-3``, ... otherwise.
    """
    while True:
        path = default_run_dir()
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            continue  # another run took it since: the next name
        return path


def check_unused(run_dir: Path) -> None:
    """Refuse a directory an earlier run wrote into, or holding files a run would overwrite.

    Its emulator would list the earlier jobs as this run's and its checkpoint directory would
    make this run's training resume from the earlier run's step (other code, other arguments).
    """
    used = [name for name in RUN_DIR_ENTRIES if (run_dir / name).exists()]
    if used:
        raise LocalRunError(
            f"run_dir: {run_dir} already holds a run (its {', '.join(used)}); a run starts in "
            f"a new or empty directory: give another run directory (--run-dir) or remove it"
        )
    taken = [name for name in RUN_DIR_WRITES if (run_dir / name).exists()]
    if taken:
        raise LocalRunError(
            f"run_dir: {run_dir} holds {', '.join(taken)}, which a run writes (yours would be "
            f"overwritten); a run starts in a new or empty directory: give another (--run-dir)"
        )


def given_run_dir(run_dir: Any) -> Path | None:
    """A Python caller's ``run_dir`` as a path (None: the default), refusing empty text.

    ``run_dir=""`` (an unset variable's value) was read as ``.``: the run wrote its emulator,
    logs and pipeline root into the working directory, the project's own folder. ``kfp-spot run
    --run-dir ""`` is refused alike (``cli.pairs.GivenPath``).
    """
    if run_dir is None:
        return None
    if isinstance(run_dir, str) and not run_dir.strip():
        raise LocalRunError(
            f"run_dir: {run_dir!r} is empty: give a directory, or None for the default "
            f"({LOCAL_RUNS_DIR}/<time>)"
        )
    if not isinstance(run_dir, (str, os.PathLike)):
        raise LocalRunError(
            f"run_dir: expected a directory's path, got {type(run_dir).__name__} {run_dir!r}"
        )
    return Path(run_dir)


@contextlib.contextmanager
def run_dir_or_default(run_dir: Path | None) -> Iterator[Path]:
    """``run_dir``, or a default one claimed now (:func:`claim_default_run_dir`).

    A claimed directory still empty when the block raises (the run was refused before it
    started) is removed, and ``kfp-spot-runs/`` with it when it holds no other run.
    """
    path = run_dir if run_dir is not None else claim_default_run_dir()
    done = False
    try:
        yield path
        done = True
    finally:
        if run_dir is None and not done:
            with contextlib.suppress(OSError):  # not empty: the run started there
                path.rmdir()
                path.parent.rmdir()
