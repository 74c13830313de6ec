"""Running the build backend: PEP 517 hooks that see only the declared build requirements.

pip on the training VM builds the wheel from the sdist in an isolated environment that holds only
``[build-system] requires`` (and what those require). A build run in this interpreter's own
environment sees everything installed here instead: a ``setup.py`` that imports an undeclared
module builds here and fails on the VM, and any installed setuptools plugin (an ``egg_info``
writer, a file finder) shapes the archives, though the build cache's key knows nothing of it
(transformers' ``kernels`` dependency is one: a third of a second per hook, to write nothing).

:func:`make_view` links the files the build requirements' installed distributions list in their
``RECORD`` into one directory (:mod:`kfp_spot.siteview`, as the emulator's job environments do:
of a namespace such as ``google/`` only the requirements' parts); each hook starts with a
``sitecustomize`` that takes this interpreter's site directories off ``sys.path`` and puts the
view on it (pip's isolated builds do the same with their own environment), so the standard
library and the view are all it imports from. What the backend asks for at build time
(``get_requires_for_build_*``) joins the view when it is installed here. Where a view cannot be
made (a requirement or what the backend asks for is not installed, a distribution has no
``RECORD`` or lists a file that is not there, the file system refuses symbolic links) the build
sees this environment, as before, and warns that it is laxer there than pip on the VM.

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
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from kfp_spot import siteview
from kfp_spot.packaging.archives import UnsafeMemberError, extract_member
from kfp_spot.packaging.errors import BuildError

log = logging.getLogger(__name__)

_BUILD_TIMEOUT_S = 600

# Run by every hook in a view (first on its PYTHONPATH), as pip's isolated builds do: out go this
# interpreter's site directories and what their .pth files put on sys.path, and, unlike pip, what
# those .pth files imported or hooked into the import system (editable installs' finders, the
# namespace packages of -nspkg.pth files), which the VM does not have either; in goes the view,
# its own .pth files read. The interpreter, sys.prefix and sysconfig stay this environment's.
_SITECUSTOMIZE = """\
import os, site, sys

_view = os.environ.get("KFP_SPOT_BUILD_VIEW")
if _view:
    _before, _sites = list(sys.path), list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        _sites.append(site.getusersitepackages())
    for _dir in _sites:
        site.addsitedir(_dir, known_paths=set())
    _gone = {os.path.normcase(p) for p in sys.path[len(_before):] + _sites}
    _roots = tuple(g.rstrip(os.sep) + os.sep for g in _gone)

    def _outside(path):
        path = os.path.normcase(str(path))
        return path not in _gone and not path.startswith(_roots)

    sys.path[:] = [p for p in _before if _outside(p) and (os.path.isdir(p) or os.path.isfile(p))]
    _drop = []
    for _name, _module in list(sys.modules.items()):
        try:
            _where = [getattr(_module, "__file__", None) or "", *getattr(_module, "__path__", ())]
        except (KeyError, TypeError, AttributeError):
            _where = []
        if any(w and not _outside(w) for w in _where):
            _drop.append(_name)
    for _name in _drop:
        del sys.modules[_name]
    _std = ("_frozen_importlib", "_frozen_importlib_external", "zipimport")
    sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "__module__", "") in _std]
    sys.path_hooks[:] = [h for h in sys.path_hooks if getattr(h, "__module__", "") in _std]
    sys.path_importer_cache.clear()
    site.addsitedir(_view)
"""


def make_view(requires: list[str], into: Path) -> Path | None:
    """Link the distributions ``requires`` needs into ``into``; returns it, or None (see module).

    The installed files of those distributions, as their ``RECORD`` lists them, are linked by
    :func:`kfp_spot.siteview.link`, looked up on this interpreter's ``sys.path``.
    """
    needed = siteview.closure(requires, siteview.Installed(sys.path), check_versions=False)
    if needed.missing or needed.unreadable:
        _no_view(f"{', '.join(needed.unreadable + needed.missing)} not installed here")
        return None
    listed = []
    for dist in needed.found.values():
        files = siteview.recorded_files(dist)
        if files is None:
            _no_view(f"no RECORD of what {dist.metadata['Name']} installed")
            return None
        listed.append((dist, files))
    try:
        missing = siteview.link(into, listed)
        if missing:
            _no_view(f"{missing[0]} is listed in a RECORD but not installed")
            return None
        _site_dir(into).mkdir()
        (_site_dir(into) / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    except OSError as exc:
        _no_view(f"no view of its requirements: {exc}")
        return None
    return into


def _no_view(reason: str) -> None:
    """Say that a build step sees this whole environment (a warning: it is laxer than the VM)."""
    log.warning(
        "the build sees this whole environment, not only its build requirements (%s): a module "
        "it imports without declaring it is found here, but not by pip's build on the training VM",
        reason,
    )


def _site_dir(view: Path) -> Path:
    """Where ``view``'s ``sitecustomize.py`` is: beside it, so the view itself holds none."""
    return view.with_name(f"{view.name}-site")


def hook_env(view: Path | None) -> dict[str, str]:
    """What a backend hook's environment adds to see only ``view`` (nothing without one)."""
    if view is None:
        return {}
    return {
        "PYTHONPATH": str(_site_dir(view)),
        "PYTHONNOUSERSITE": "1",
        "KFP_SPOT_BUILD_VIEW": str(view),
    }


def widened_view(requires: list[str], asked: set[str], static: Path, into: Path) -> Path | None:
    """The view for a build step whose backend asked for ``asked`` beyond ``requires``.

    pip on the VM installs what ``get_requires_for_build_*`` returns before it builds: the view
    holds those too when they are installed here; when one is not, the step sees this whole
    environment (as before views), never fewer packages than pip would give it.
    """
    if not asked - set(requires):
        return static
    return make_view(sorted(set(requires) | asked), into)


def _declared(requires: list[str]) -> str:
    return ", ".join(requires) or "none declared"


def missing_module_hint(output: str, requires: list[str]) -> str:
    """A fix for a hook that failed importing a module not among the build requirements."""
    marker = "ModuleNotFoundError: No module named "
    for line in reversed(output.splitlines()):
        if marker in line:
            module = line.split(marker, 1)[1].strip().strip("'\"").split(".")[0]
            return (
                f"\nThe build imported {module!r}, which none of its build requirements "
                f"({_declared(requires)}) provides: pip on the training VM "
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


def build_here(
    project: Path, outdir: Path, env: dict[str, str], requires: list[str]
) -> dict[str, str]:
    """The sdist, then a wheel from it, with the backend installed here (no network).

    What ``python -m build --no-isolation`` does, without starting an interpreter for the
    frontend: each backend hook runs in a fresh process of its own (PEP 517) that sees only the
    build requirements where :func:`make_view` can make a view of them: ``requires``, then, for
    each step, what the backend's ``get_requires_for_build_*`` hook asks for (:func:`widened_view`).

    Returns:
        What the backend asked for beyond ``requires``: canonical name -> the version installed
        here ("" where none is; empty where no view was made and nothing was asked).
    """
    import build as pypa_build

    with tempfile.TemporaryDirectory(prefix="kfp-spot-build-") as tmp:
        static = make_view(requires, Path(tmp) / "view")
        current = [static]
        asked_for: dict[str, str] = {}

        def run_hook(
            cmd: Sequence[str],
            cwd: str | None = None,
            extra_environ: Mapping[str, str] | None = None,
        ) -> None:
            hook = Path(cmd[-2]).name if len(cmd) >= 2 else "hook"
            step_env = {**env, **(extra_environ or {}), **hook_env(current[0])}
            what = f"the build backend's {hook} hook"
            _run_step(cmd, cwd, step_env, what, requires if current[0] is not None else None)

        def step(source: Path, distribution: Literal["sdist", "wheel"]) -> Path:
            builder = pypa_build.ProjectBuilder(source, runner=run_hook)
            current[0] = static
            if static is not None:
                asked = builder.get_requires_for_build(distribution)
                asked_for.update(installed_versions(asked - set(requires)))
                current[0] = widened_view(
                    requires, asked, static, static.with_name(f"view-{distribution}")
                )
            return Path(builder.build(distribution, outdir))

        try:
            sdist = step(project, "sdist")
            step(unpack_sdist(sdist, Path(tmp) / "sdist"), "wheel")
        except pypa_build.BuildBackendException as exc:  # a hook failed; ours says how
            if isinstance(exc.exception, BuildError):
                raise exc.exception from None
            fix = _unavailable_backend_fix(exc.exception, current[0], requires)
            raise BuildError("source", f"the build failed: {exc}{fix}") from None
        except pypa_build.BuildException as exc:  # the frontend's: e.g. an unreadable build table
            raise BuildError("source", f"the build failed: {exc}") from None
    return asked_for


def installed_versions(requirements: set[str]) -> dict[str, str]:
    """Canonical name -> the version installed here ("" where none is) of each requirement."""
    installed = siteview.Installed(sys.path)
    out = {}
    for text in requirements:
        try:
            name = Requirement(text).name
        except InvalidRequirement:
            out[text] = ""  # not a requirement pip could install either
            continue
        dist = installed.get(name)
        out[canonicalize_name(name)] = "" if dist is None else dist.version
    return out


def _unavailable_backend_fix(error: BaseException, view: Path | None, requires: list[str]) -> str:
    """The fix for a backend a view's hook could not import (empty when it is not that)."""
    if view is None or type(error).__name__ != "BackendUnavailable":
        return ""
    backend = getattr(error, "backend_name", None) or ""
    top = backend.split(":")[0].split(".")[0]
    in_tree = bool(getattr(error, "backend_path", None))
    if in_tree or not top or (view / top).exists() or (view / f"{top}.py").exists():
        # the backend is there: something it imports is not
        return missing_module_hint(getattr(error, "traceback", "") or "", requires)
    return (
        f" It is not among the build requirements ({_declared(requires)}), "
        "the only packages pip on the training VM builds with: add its distribution to "
        "[build-system] requires in pyproject.toml."
    )


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
