"""Import the job's module in a clean environment: the package plus what it declares, nothing else.

The environment is a fresh venv without this machine's site-packages. The built wheel is installed
into it, and of the packages installed here only those in the closure of the wheel's
requirements (and of what the executor image provides, kfp-spot by default) are linked in. So an
import the package needs but does not declare fails here, before a paid job starts, instead of on
the training VM. Works offline: declared requirements come from this machine; one that is not
installed here is fetched with pip from the configured index, and the error says so when that
fails.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import venv
from collections.abc import Iterable, Sequence
from importlib import metadata as importlib_metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from kfp_spot import envcache
from kfp_spot.packaging.errors import ImportCheckError

log = logging.getLogger(__name__)

IMPORT_TIMEOUT_S = 300
DEFAULT_PROVIDED = ("kfp-spot",)


def _marker_ok(req: Requirement, extras: Iterable[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({"extra": e}) for e in (*extras, ""))


def requirement_closure(
    requirements: Iterable[str],
) -> tuple[list[importlib_metadata.Distribution], list[str]]:
    """Installed distributions that ``requirements`` need, transitively, and those missing here.

    Returns:
        ``(distributions, missing)``; ``missing`` holds requirement strings not installed here.
    """
    queue: list[tuple[str, tuple[str, ...]]] = []
    for text in requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if _marker_ok(req, ()):
            queue.append((text, tuple(sorted(req.extras))))
    seen: dict[str, importlib_metadata.Distribution] = {}
    done: set[tuple[str, tuple[str, ...]]] = set()
    missing: list[str] = []
    while queue:
        text, extras = queue.pop()
        name = canonicalize_name(Requirement(text).name)
        if (name, extras) in done:
            continue
        done.add((name, extras))
        try:
            dist = seen.get(name) or importlib_metadata.distribution(name)
        except importlib_metadata.PackageNotFoundError:
            missing.append(text)
            continue
        seen[name] = dist
        for sub in dist.requires or []:
            try:
                req = Requirement(sub)
            except InvalidRequirement:
                continue
            if _marker_ok(req, extras):
                queue.append((sub, tuple(sorted(req.extras))))
    return list(seen.values()), sorted(set(missing))


def _top_level_entries(dist: importlib_metadata.Distribution) -> set[str]:
    # Packages, modules, dist-info, and .pth files (editable installs point at their sources).
    parts = (Path(str(file)).parts for file in dist.files or [])
    return {p[0] for p in parts if p and p[0] not in ("..", "__pycache__")}


def _link(dists: Sequence[importlib_metadata.Distribution], site_dir: Path) -> None:
    for dist in dists:
        base = Path(str(dist.locate_file("")))
        for entry in sorted(_top_level_entries(dist)):
            source, target = base / entry, site_dir / entry
            if source.exists() and not os.path.lexists(target):
                target.symlink_to(source)


def _site_dir(python: Path) -> Path:
    return envcache.site_packages_of(python)


def _pip(python: Path, args: Sequence[str], what: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    proc = subprocess.run(
        [*cmd, "--disable-pip-version-check", *args], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise ImportCheckError(
            "check_import",
            f"cannot install {what} into the clean environment:\n"
            + (proc.stdout + proc.stderr).strip()[-2000:],
        )


def check_import_clean(
    wheel: Path,
    requirements: Sequence[str],
    python_module: str,
    *,
    extra_packages: Sequence[Path] = (),
    provided: Sequence[str] = DEFAULT_PROVIDED,
    work_dir: str | os.PathLike[str] | None = None,
) -> None:
    """Import ``python_module`` from ``wheel`` in a clean environment.

    Args:
        wheel: the built wheel.
        requirements: its declared requirements (Requires-Dist).
        python_module: the module to import (its top-level code runs, as a library import).
        extra_packages: local files of the extra packages, installed without their dependencies.
        provided: requirements the executor image provides besides the declared ones.
        work_dir: where the environment is made (removed after); default: the system's temp dir.

    Raises:
        ImportCheckError: the import fails (the traceback names the missing module) or a
            requirement cannot be installed.
    """
    dists, missing = requirement_closure([*requirements, *provided])
    missing = [
        m
        for m in missing
        if canonicalize_name(Requirement(m).name)
        not in {canonicalize_name(Requirement(p).name) for p in provided}
    ]
    if work_dir is not None:
        os.makedirs(work_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kfp-spot-clean-env-", dir=work_dir) as tmp:
        env_dir = Path(tmp, "env")
        venv.EnvBuilder(with_pip=False, symlinks=True, system_site_packages=False).create(env_dir)
        python = env_dir / "bin" / "python"
        site_dir = _site_dir(python)
        _link(dists, site_dir)
        if missing:
            log.info("fetching %s (not installed here) for the import check", ", ".join(missing))
            _pip(python, list(missing), "the requirements " + ", ".join(missing))
        _pip(python, ["--no-deps", "--no-index", str(wheel)], wheel.name)
        if extra_packages:
            _pip(
                python,
                ["--no-deps", "--no-index", "--no-build-isolation", *map(str, extra_packages)],
                "the extra packages",
            )
        cwd = Path(tmp, "cwd")
        cwd.mkdir()  # empty: the import must come from the installed package
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        code = f"import importlib; importlib.import_module({python_module!r})"
        try:
            proc = subprocess.run(
                [str(python), "-c", code],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=IMPORT_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise ImportCheckError(
                "check_import",
                f"importing {python_module} did not finish in {IMPORT_TIMEOUT_S} s (does it "
                "train at import time? guard that with `if __name__ == '__main__':`)",
            ) from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        hint = ""
        if "ModuleNotFoundError" in tail:
            hint = (
                "\nA module that is not part of the package must be declared in its "
                "dependencies (or be provided by the executor image)."
            )
        raise ImportCheckError(
            "python_module",
            f"{python_module} does not import in a clean environment with only the package and "
            f"its declared dependencies:\n{tail}{hint}",
        )
