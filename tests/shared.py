"""What the test processes of one run share: with pytest-xdist every worker is its own process
with its own session fixtures, so something expensive (a package environment, the container
images) is made once per run in a directory all workers see, under a file lock.

Without xdist the directory is the session's own base temp directory; with xdist it is the run's
(the parent of every worker's), so nothing is shared between runs.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


def worker_id() -> str:
    """``gw0``, ``gw1``, ... under pytest-xdist; ``main`` without it."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def run_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """The directory ``name`` shared by every worker of this run (created if missing)."""
    base = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        base = base.parent
    path = base / name
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (other processes of the run wait for it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Any]
) -> Any:
    """``make(directory)``'s JSON result, computed by the first worker that asks and read back by
    the others; ``directory`` is shared, so what ``make`` writes there is theirs too.

    A failure is not remembered: the next worker to ask tries again (and fails the same way).
    """
    directory = run_dir(tmp_path_factory, name)
    done = directory / "result.json"
    with file_lock(directory / ".lock"):
        if done.exists():
            return json.loads(done.read_text())
        result = make(directory)
        done.write_text(json.dumps(result))
        return result


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path -> text) below ``root``; return ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def write_sdist(path: Path, files: dict[str, str]) -> Path:
    """A ``.tar.gz`` of ``files`` (name -> text) that is the same bytes in every process.

    Package environments are cached by the archive's sha256, so a test package written by each
    worker must not differ in a timestamp (tar members' or gzip's own) to share one environment.
    """
    import gzip
    import io
    import tarfile

    with (
        open(path, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return path


class _CommittedComponents(dict[str, Any]):
    """The committed component YAMLs (``components/NAME/component.yaml``) as a user loads them
    with ``kfp.components.load_component_from_file``, each loaded when a test first asks for it
    and kept for the worker: collection (every xdist worker collects every module) loads none."""

    def __missing__(self, name: str) -> Any:
        from kfp import components

        path = Path(__file__).resolve().parents[1] / "components" / name / "component.yaml"
        self[name] = loaded = components.load_component_from_file(str(path))
        return loaded


COMMITTED_COMPONENTS: dict[str, Any] = _CommittedComponents()
"""The committed component YAMLs by component name, loaded as a user loads them, on first use."""
