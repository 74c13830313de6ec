"""Running the build backend: PEP 517 hooks that see only the declared build requirements.

pip on the training VM builds the wheel from the sdist in an isolated environment that holds only
``[build-system] requires`` (and what those require). A build run in this interpreter's own
environment sees everything installed here instead: a ``setup.py`` that imports an undeclared
module builds here and fails on the VM, and any installed setuptools plugin (an ``egg_info``
writer, a file finder) shapes the archives, though the build cache's key knows nothing of it
(transformers' ``kernels`` dependency is one: a third of a second per hook, to write nothing).

:func:`make_view` links the files of the build requirements' installed distributions into one
directory; the hooks run with ``python -S`` and that directory as their only ``PYTHONPATH``, so
the standard library and the view are all they import from. Where a view cannot be made (a
requirement's distribution lists no files, installs a ``.pth`` file, or the file system refuses
symbolic links) the build sees this environment, as before, and says so in the log.

:func:`build_here` runs the hooks so (the backend is installed here: no network);
:func:`build_isolated` leaves a backend that is not installed here to ``python -m build``, whose
isolated environment comes from the package index.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from importlib import metadata as importlib_metadata
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from kfp_spot.packaging.archives import UnsafeMemberError, extract_member
from kfp_spot.packaging.errors import BuildError

log = logging.getLogger(__name__)

_BUILD_TIMEOUT_S = 600

# setuptools installs it to put its own distutils first; setuptools/__init__.py imports the same
# override itself, so the view (where .pth files are not read) does without it.
_HARMLESS_PTH = frozenset({"distutils-precedence.pth"})


def requirement_closure(requires: list[str]) -> list[importlib_metadata.Distribution] | None:
    """The installed distributions ``requires`` needs, their own requirements included.

    Markers are evaluated for this interpreter, extras as requested. None when a requirement is
    unreadable or not installed here (the build then runs as it would have without a view).
    """
    found: dict[str, importlib_metadata.Distribution] = {}
    extras_done: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(text, "") for text in requires]
    while todo:
        text, extra = todo.pop()
        try:
            req = Requirement(text)
        except InvalidRequirement:
            return None
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        if name not in found:
            try:
                found[name] = importlib_metadata.distribution(req.name)
            except importlib_metadata.PackageNotFoundError:
                return None
            todo.extend((dep, "") for dep in found[name].requires or [])
        for wanted in req.extras:
            if (name, wanted) not in extras_done:
                extras_done.add((name, wanted))
                todo.extend((dep, wanted) for dep in found[name].requires or [])
    return list(found.values())


def _top_level_entries(dist: importlib_metadata.Distribution) -> dict[str, Path] | None:
    """The first path components of ``dist``'s files under its install directory, located."""
    files = dist.files
    if files is None:
        return None
    entries: dict[str, Path] = {}
    for file in files:
        parts = PurePosixPath(str(file)).parts
        if not parts or parts[0] == "..":  # scripts, data installed outside the site dir
            continue
        top = parts[0]
        if top.endswith(".pth") and top not in _HARMLESS_PTH:
            return None  # it changes sys.path at start-up, which the view's hooks skip
        if top not in _HARMLESS_PTH:
            entries[top] = Path(str(dist.locate_file(top)))
    return entries


def make_view(requires: list[str], into: Path) -> Path | None:
    """Link the distributions ``requires`` needs into ``into``; returns it, or None (see module).

    Each top-level package, module and ``.dist-info`` directory of those distributions becomes a
    symbolic link in ``into`` (made if missing) to where it is installed.
    """
    closure = requirement_closure(requires)
    if closure is None:
        log.info("the build sees this environment: a build requirement's metadata is missing")
        return None
    links: dict[str, Path] = {}
    for dist in closure:
        entries = _top_level_entries(dist)
        if entries is None:
            log.info(
                "the build sees this environment: %s lists no files or installs a .pth file",
                dist.metadata["Name"],
            )
            return None
        for name, target in entries.items():
            if links.setdefault(name, target) != target:
                log.info("the build sees this environment: two requirements install %s", name)
                return None
    try:
        into.mkdir(parents=True, exist_ok=True)
        for name, target in sorted(links.items()):
            if target.exists():
                os.symlink(target, into / name, target_is_directory=target.is_dir())
    except OSError as exc:
        log.info("the build sees this environment: no view of its requirements (%s)", exc)
        return None
    return into


def hook_command(cmd: list[str], view: Path | None) -> tuple[list[str], dict[str, str]]:
    """A backend hook's command line and environment to run it with ``view`` as all it imports.

    ``cmd`` is ``[python, script, ...]`` as ``build`` gives it; without a view both stay as given.
    """
    if view is None:
        return cmd, {}
    return [cmd[0], "-S", *cmd[1:]], {"PYTHONPATH": str(view), "PYTHONNOUSERSITE": "1"}


def missing_module_hint(output: str, requires: list[str]) -> str:
    """A fix for a hook that failed importing a module not among the build requirements."""
    marker = "ModuleNotFoundError: No module named "
    for line in reversed(output.splitlines()):
        if marker in line:
            module = line.split(marker, 1)[1].strip().strip("'\"").split(".")[0]
            return (
                f"\nThe build imported {module!r}, which none of its build requirements "
                f"({', '.join(requires) or 'none declared'}) provides: pip on the training VM "
                "builds the wheel with only those installed. Add the distribution that provides "
                "it to [build-system] requires in pyproject.toml."
            )
    return ""


def _run_step(
    cmd: Sequence[str],
    cwd: Path | str | None,
    env: Mapping[str, str],
    what: str,
    view_of: Sequence[str] | None = None,
) -> None:
    """Run one step of a build with ``env`` added, bounded; a failure ends with its output.

    ``view_of``: the requirements a hook run in a view saw, for the fix its error
    gives when it could not import a module.

    Raises:
        BuildError: the step failed (``what`` says which, and its exit status) or timed out.
    """
    try:
        proc = subprocess.run(
            list(cmd),
            cwd=cwd,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=_BUILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise BuildError("source", f"the build did not finish in {_BUILD_TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        fix = missing_module_hint(output, list(view_of)) if view_of is not None else ""
        raise BuildError(
            "source",
            f"the build failed ({what}, exit {proc.returncode})\n"
            + "\n".join(output.splitlines()[-30:])
            + fix,
        )


def build_isolated(project: Path, outdir: Path, env: dict[str, str], unmet: list[str]) -> None:
    """``python -m build``: an isolated environment with the backend from the package index."""
    what = (
        f"`python -m build`; the build backend needs {', '.join(unmet)}, which is not installed "
        "here, so the build ran isolated and needed the package index: install it to build "
        "offline"
    )
    cmd = [sys.executable, "-m", "build", "--outdir", str(outdir), str(project)]
    _run_step(cmd, project, env, what)


def build_here(project: Path, outdir: Path, env: dict[str, str], requires: list[str]) -> None:
    """The sdist, then a wheel from it, with the backend installed here (no network).

    What ``python -m build --no-isolation --skip-dependency-check`` does, without starting an
    interpreter for the frontend: each backend hook still runs in a fresh process of its own
    (PEP 517), seeing only ``requires`` where :func:`make_view` can make a view
    of them, and no dependency-check hook runs (a backend missing something at build time still
    fails, with its own message in the error).
    """
    import build as pypa_build

    with tempfile.TemporaryDirectory(prefix="kfp-spot-build-") as tmp:
        view = make_view(requires, Path(tmp) / "view")

        def run_hook(
            cmd: Sequence[str],
            cwd: str | None = None,
            extra_environ: Mapping[str, str] | None = None,
        ) -> None:
            hook = Path(cmd[-2]).name if len(cmd) >= 2 else "hook"
            argv, view_env = hook_command(list(cmd), view)
            step_env = {**env, **(extra_environ or {}), **view_env}
            what = f"the build backend's {hook} hook"
            _run_step(argv, cwd, step_env, what, requires if view is not None else None)

        try:
            sdist = Path(pypa_build.ProjectBuilder(project, runner=run_hook).build("sdist", outdir))
            unpacked = unpack_sdist(sdist, Path(tmp) / "sdist")
            pypa_build.ProjectBuilder(unpacked, runner=run_hook).build("wheel", outdir)
        except pypa_build.BuildBackendException as exc:  # a hook failed; ours says how
            if isinstance(exc.exception, BuildError):
                raise exc.exception from None
            fix = ""
            if view is not None and type(exc.exception).__name__ == "BackendUnavailable":
                declared = ", ".join(requires) or "none declared"
                fix = (
                    f" It is not among the build requirements ({declared}), the only packages "
                    "pip on the training VM builds with: add its distribution to [build-system] "
                    "requires in pyproject.toml."
                )
            raise BuildError("source", f"the build failed: {exc}{fix}") from None
        except pypa_build.BuildException as exc:  # the frontend's: e.g. an unreadable build table
            raise BuildError("source", f"the build failed: {exc}") from None


def unpack_sdist(sdist: Path, into: Path) -> Path:
    """Unpack ``sdist`` into ``into`` (made if missing); returns its one top-level directory."""
    try:
        into.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as archive:
            for member in archive:
                extract_member(archive, member, into)
    except (tarfile.TarError, OSError, UnsafeMemberError) as exc:
        raise BuildError(
            "source", f"the built sdist {sdist.name} cannot be unpacked: {exc}"
        ) from None
    tops = [p for p in into.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise BuildError(
            "source", f"the built sdist {sdist.name} does not hold one top-level directory"
        )
    return tops[0]
