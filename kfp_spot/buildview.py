"""Build hooks that see only the declared build requirements, as pip's isolated build on the VM.

pip on the training VM builds a wheel from an sdist in an isolated environment that holds only
``[build-system] requires`` (and what those require). A build run in this interpreter's own
environment sees everything installed here instead: a ``setup.py`` that imports an undeclared
module builds here and fails on the VM, and any installed setuptools plugin (an ``egg_info``
writer, a file finder) shapes the archives.

:func:`make_view` links the files the build requirements' installed distributions list in their
``RECORD`` into one directory (:mod:`kfp_spot.siteview`: of a namespace such as ``google/`` only
the requirements' parts); each hook starts with a ``sitecustomize`` that takes this interpreter's
site directories off ``sys.path`` and puts the view on it (pip's isolated builds do the same with
their own environment), so the standard library and the view are all it imports from. What the
backend asks for at build time (``get_requires_for_build_*``) joins the view. :func:`unmet` is the
one rule for what pip would install instead (not installed here, or not in a version that
satisfies the requirement): a declared requirement so is the caller's to see before it builds
here, an asked-for one ends the build (:class:`UnmetBuildRequirementsError`); either way the build
then runs isolated, from the package index, as pip's does. Where a view cannot be made (a
distribution has no ``RECORD`` or lists a file that is not there, the file system refuses
symbolic links) the build sees this environment and a warning says that it is laxer there than
pip on the VM.

:class:`Hooks` runs a project's hooks so, each in a fresh process (PEP 517), through PyPA build's
API: prepare_package's builds (:mod:`kfp_spot.packaging.backend`) and the wheels the emulator's
job environments build from sdists (:mod:`kfp_spot.envcache`) alike. A failed or timed-out hook
raises :class:`HookError`, which each caller turns into its own error.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from kfp_spot import siteview

log = logging.getLogger(__name__)

HOOK_TIMEOUT_S = 600
"""Seconds one hook (or ``python -m build``) may take."""

ASKED_RECORD = "asked.json"
"""In a build cache's entry: what the backend asked for at build time -> the version it got."""


class HookError(Exception):
    """A build step failed or timed out; the message says which, with the end of its output."""


class UnmetBuildRequirementsError(Exception):
    """The backend asked at build time for what is not installed here, as pip would install it.

    The build must run isolated, its environment from the package index (as pip's on the VM).

    Attributes:
        requirements: what is not satisfied here (see :func:`unmet`).
    """

    def __init__(self, requirements: list[str]):
        super().__init__(", ".join(requirements))
        self.requirements = requirements


def unmet(requirements: Iterable[str]) -> list[str]:
    """The build requirements this interpreter does not satisfy, which pip would install.

    One that is not PEP 508, is not installed, is installed in a version its specifier refuses,
    or needs (through the requirements of what is installed) a distribution that is not
    installed; a requirement whose marker excludes this interpreter is left out.
    """
    needed = siteview.closure(requirements, siteview.Installed(sys.path), check_versions=True)
    return sorted({*needed.unreadable, *needed.missing})


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


def run_step(
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
        HookError: the step failed (``what`` says which, and its exit status) or timed out.
    """
    try:
        proc = subprocess.run(
            list(cmd),
            cwd=cwd,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=HOOK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise HookError(f"the build did not finish in {HOOK_TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        fix = missing_module_hint(output, list(view_of)) if view_of is not None else ""
        raise HookError(
            f"the build failed ({what}, exit {proc.returncode})\n"
            + "\n".join(output.splitlines()[-30:])
            + fix
        )


class Hooks:
    """A project's PEP 517 hooks, each run in a fresh process that sees the build requirements.

    Only those, where :func:`make_view` can make a view of them: ``requires``, then, for each
    distribution built, what the backend's ``get_requires_for_build_*`` hook asks for
    (:func:`widened_view`). The backend must be installed here (no network).

    Args:
        requires: the project's ``[build-system] requires``.
        workdir: an empty directory the views are made in (the caller removes it).
        env: what every hook's environment adds to this process's.

    Attributes:
        asked_for: what the backend asked for beyond ``requires``: canonical name -> the version
            installed here ("" where none is; empty where no view was made and nothing was asked).
        view: the view the last hook ran in (None: it saw this whole environment).
    """

    def __init__(self, requires: list[str], workdir: Path, env: Mapping[str, str]):
        self.requires = list(requires)
        self.env = dict(env)
        self.workdir = workdir
        self.static = make_view(self.requires, workdir / "view")
        self.view: Path | None = self.static
        self.asked_for: dict[str, str] = {}

    def _run(
        self,
        cmd: Sequence[str],
        cwd: str | None = None,
        extra_environ: Mapping[str, str] | None = None,
    ) -> None:
        hook = Path(cmd[-2]).name if len(cmd) >= 2 else "hook"
        step_env = {**self.env, **(extra_environ or {}), **hook_env(self.view)}
        what = f"the build backend's {hook} hook"
        run_step(cmd, cwd, step_env, what, self.requires if self.view is not None else None)

    def build(self, source: Path, distribution: Literal["sdist", "wheel"], outdir: Path) -> Path:
        """Build ``distribution`` of the project in ``source`` into ``outdir``; returns its path.

        Raises:
            HookError: a hook failed (the fix is in the message where it is a missing module or
                backend), or the frontend refused the project (an unreadable build table).
            UnmetBuildRequirementsError: the backend asked for a requirement :func:`unmet`
                finds unsatisfied here (the hooks of the view are not run then).
        """
        import build as pypa_build

        builder = pypa_build.ProjectBuilder(source, runner=self._run)
        self.view = self.static
        try:
            if self.static is not None:
                asked = builder.get_requires_for_build(distribution)
                lacking = unmet(asked)
                if lacking:
                    raise UnmetBuildRequirementsError(lacking)
                self.asked_for.update(installed_versions(asked - set(self.requires)))
                self.view = widened_view(
                    self.requires,
                    asked,
                    self.static,
                    self.workdir / f"view-{distribution}",
                )
            return Path(builder.build(distribution, outdir))
        except pypa_build.BuildBackendException as exc:  # a hook failed; ours says how
            if isinstance(exc.exception, HookError):
                raise exc.exception from None
            fix = _unavailable_backend_fix(exc.exception, self.view, self.requires)
            raise HookError(f"the build failed: {exc}{fix}") from None
        except pypa_build.BuildException as exc:  # the frontend's: e.g. an unreadable build table
            raise HookError(f"the build failed: {exc}") from None


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


def record_asked(directory: Path, asked: Mapping[str, str]) -> Path:
    """Write :data:`ASKED_RECORD` (``asked``: :attr:`Hooks.asked_for`) into ``directory``."""
    record = directory / ASKED_RECORD
    record.write_text(json.dumps(dict(asked), sort_keys=True))
    return record


def asked_unchanged(entry: Path) -> dict[str, str] | None:
    """What the backend asked for in the build kept in ``entry``, if installed the same now.

    The record (:data:`ASKED_RECORD`) when every version in it is the one installed here now;
    None where one differs, or the record is missing or unreadable. A cache's key is made before
    the build, so it cannot hold these: a build cache checks them on every hit (an upgraded
    setuptools plugin writes other archives).
    """
    try:
        asked = json.loads((entry / ASKED_RECORD).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(asked, dict):
        return None
    now = installed_versions(set(asked))
    if now != asked:
        log.info("%s was built with %s, which is now %s: building again", entry, asked, now)
        return None
    return now
