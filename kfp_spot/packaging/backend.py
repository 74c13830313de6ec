"""Running the build backend for prepare_package: the sdist, then a wheel from it.

:func:`build_here` runs the hooks with the backend installed here (no network), each in a process
that sees only the build requirements (:class:`kfp_spot.buildview.Hooks`, as pip's isolated
build on the VM); :func:`build_isolated` leaves a backend that is not installed here to
``python -m build``, whose isolated environment comes from the package index.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from kfp_spot import archives, buildview
from kfp_spot.packaging.errors import BuildError


def build_isolated(project: Path, outdir: Path, env: dict[str, str], unmet: list[str]) -> None:
    """``python -m build``: an isolated environment with the backend from the package index."""
    what = (
        f"`python -m build`; the build backend needs {', '.join(unmet)}, which is not installed "
        "here, so the build ran isolated and needed the package index: install it to build "
        "offline"
    )
    cmd = [sys.executable, "-m", "build", "--outdir", str(outdir), str(project)]
    try:
        buildview.run_step(cmd, project, env, what)
    except buildview.HookError as exc:
        raise BuildError("source", str(exc)) from None


def build_here(
    project: Path, outdir: Path, env: dict[str, str], requires: list[str]
) -> dict[str, str]:
    """The sdist, then a wheel from it, with the backend installed here (no network).

    What ``python -m build --no-isolation`` does, without starting an interpreter for the
    frontend: each backend hook runs in a fresh process of its own (PEP 517) that sees only the
    build requirements (:class:`kfp_spot.buildview.Hooks`): ``requires``, then, for each step,
    what the backend's ``get_requires_for_build_*`` hook asks for.

    Returns:
        What the backend asked for beyond ``requires``: canonical name -> the version installed
        here ("" where none is; empty where no view was made and nothing was asked).
    """
    with tempfile.TemporaryDirectory(prefix="kfp-spot-build-") as tmp:
        hooks = buildview.Hooks(requires, Path(tmp), env)
        try:
            sdist = hooks.build(project, "sdist", outdir)
            hooks.build(unpack_sdist(sdist, Path(tmp) / "sdist"), "wheel", outdir)
        except buildview.HookError as exc:
            raise BuildError("source", str(exc)) from None
    return hooks.asked_for


def unpack_sdist(sdist: Path, into: Path) -> Path:
    """Unpack the built ``sdist`` into ``into``; returns its one top-level directory."""
    try:
        return archives.unpack_sdist(sdist, into)
    except archives.ArchiveError as exc:
        raise BuildError(
            "source", f"the built sdist {sdist.name} cannot be unpacked: {exc}"
        ) from None
