"""The wheels the runtime image installs, made on the host for the image's platform.

:func:`build_wheel` builds kfp-spot's own wheel from a clean copy of the sources;
:func:`build_dependency_wheels` downloads every package the lock file pins as the wheel for
linux/x86_64 and CPython 3.11 (whatever the host is), building on the host only the pure-Python
packages that publish no wheel. ``kfp_spot.image.build`` then builds the image from them.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from kfp_spot.image.lock import IMAGE_PLATFORM, IMAGE_PYTHON, LOCK_FILE

_PIP_WHEEL = (sys.executable, "-m", "pip", "wheel", "--quiet")
# Wheel platforms the image runs: Debian bookworm's glibc 2.36 and every older manylinux.
_WHEEL_PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)),
    "manylinux2014_x86_64",
)
# What setuptools needs to build the kfp-spot wheel (pyproject.toml, setup.py, package-dir map).
_WHEEL_SOURCES = (
    "pyproject.toml",
    "setup.py",
    "README.md",
    "kfp_spot",
    "components",
    "pipelines",
    "examples/trainer",  # shipped as kfp_spot.examples.trainer (pyproject.toml's package-dir)
)


class ImageBuildError(RuntimeError):
    """The image could not be built or pushed; the message says which step and why."""


def run_step(cmd: Sequence[str], what: str) -> subprocess.CompletedProcess[str]:
    """Run one host command of the build; on failure raise :class:`ImageBuildError` naming it."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise ImageBuildError(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return proc


def wheel_requirements(wheel: Path) -> tuple[list[str], list[str]]:
    """The kfp-spot wheel's runtime requirements and those its ``examples`` extra adds."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as archive:
        meta_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        meta = archive.read(meta_name).decode()
    runtime, examples = [], []
    for line in meta.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        plain = f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}"
        plain += str(req.specifier)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            runtime.append(plain)
        elif req.marker.evaluate({"extra": "examples"}):
            examples.append(plain)
    return runtime, examples


def wheel_content_digest(wheel: Path) -> str:
    """sha256 of the wheel's RECORD (every file's path and hash), which ignores zip timestamps."""
    with zipfile.ZipFile(wheel) as archive:
        record = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        return hashlib.sha256(archive.read(record)).hexdigest()


def build_wheel(source: Path, dist_dir: Path) -> Path:
    """Build the kfp-spot wheel from ``source`` into ``dist_dir`` (emptied first); returns it.

    The wheel is built from a copy of the package sources, so build leftovers of the checkout
    (``build/lib``) never reach it.
    """
    missing = [name for name in _WHEEL_SOURCES if not (source / name).exists()]
    if missing:
        raise ImageBuildError(
            f"{source} is not a kfp-spot source checkout (missing {', '.join(missing)})"
        )
    shutil.rmtree(dist_dir, ignore_errors=True)
    dist_dir.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    with tempfile.TemporaryDirectory(prefix="kfp-spot-wheel-") as tmp:
        for name in _WHEEL_SOURCES:
            src, dst = source / name, Path(tmp) / name
            if src.is_dir():
                shutil.copytree(src, dst, ignore=ignore)
            else:
                shutil.copy2(src, dst)
        run_step(
            [*_PIP_WHEEL, "--no-deps", "--no-build-isolation", "--wheel-dir", str(dist_dir), tmp],
            "building the kfp-spot wheel",
        )
    (wheel,) = dist_dir.glob("kfp_spot-*.whl")
    return wheel


def _platform_flags() -> list[str]:
    """The flags that make pip pick wheels for the image (CPython 3.11, linux/x86_64)."""
    flags = ["--python-version", IMAGE_PYTHON, "--implementation", "cp"]
    flags += ["--abi", f"cp{IMAGE_PYTHON.replace('.', '')}"]
    for platform_tag in _WHEEL_PLATFORMS:
        flags += ["--platform", platform_tag]
    return flags


def _is_pure(wheel: Path) -> bool:
    """Whether a wheel's tags fit any platform and Python 3 (``py3-none-any``)."""
    from packaging.utils import parse_wheel_filename

    _name, _version, _build, tags = parse_wheel_filename(wheel.name)
    return all(tag.abi == "none" and tag.platform == "any" for tag in tags)


def build_dependency_wheels(
    wheels_dir: Path, lock: Path, examples: list[str], python: str = sys.executable
) -> bool:
    """Fetch the image's wheels into ``wheels_dir``; returns whether pip ran.

    Every package :data:`LOCK_FILE` pins is downloaded as the wheel for the image's platform
    (:func:`_platform_flags`: linux/x86_64, CPython 3.11, whatever the host is); a package that
    publishes only a source distribution is built here, and must then be pure Python. The
    ``examples`` extra is resolved for the same platform, binary wheels only, within the lock's
    pins. ``requirements.txt`` there is the lock itself. The folder is refilled only when the lock
    or the examples' requirements change.

    ``python`` is the host interpreter whose pip does it; its version does not matter.
    """
    pip_download = (python, "-m", "pip", "download", "--quiet")
    stamp = "\n".join([lock.read_text(), "# examples", *examples, *_platform_flags()]) + "\n"
    if (wheels_dir / ".complete").is_file() and (wheels_dir / ".complete").read_text() == stamp:
        return False
    shutil.rmtree(wheels_dir, ignore_errors=True)
    wheels_dir.mkdir(parents=True)
    shutil.copyfile(lock, wheels_dir / "requirements.txt")
    (wheels_dir / "examples.txt").write_text("\n".join(examples) + "\n")
    with tempfile.TemporaryDirectory(prefix="kfp-spot-sdists-") as tmp:
        downloads = Path(tmp)
        run_step(
            [
                *pip_download,
                *("--no-deps", *_platform_flags(), "--dest", str(downloads)),
                *("-r", str(lock)),
            ],
            f"downloading the wheels {LOCK_FILE} pins for {IMAGE_PLATFORM} (pip download)",
        )
        for sdist in sorted(downloads.glob("*.tar.gz")) + sorted(downloads.glob("*.zip")):
            before = set(downloads.glob("*.whl"))
            run_step(
                [
                    python,
                    "-m",
                    "pip",
                    "wheel",
                    "--quiet",
                    "--no-deps",
                    "-w",
                    str(downloads),
                    str(sdist),
                ],
                f"building a wheel of {sdist.name} (it publishes no wheel)",
            )
            for built in set(downloads.glob("*.whl")) - before:
                if not _is_pure(built):
                    raise ImageBuildError(
                        f"{sdist.name} publishes no wheel for {IMAGE_PLATFORM} and Python "
                        f"{IMAGE_PYTHON}, and is not pure Python: the host cannot build it for "
                        f"the image (pin a version of it with wheels in {LOCK_FILE})"
                    )
        for wheel in downloads.glob("*.whl"):
            shutil.move(str(wheel), wheels_dir / wheel.name)
    if examples:
        run_step(
            [
                *pip_download,
                *("--only-binary=:all:", *_platform_flags(), "--dest", str(wheels_dir)),
                *("-c", str(lock), *examples),
            ],
            f"downloading the examples' wheels for {IMAGE_PLATFORM} (pip download)",
        )
    (wheels_dir / ".complete").write_text(stamp)
    return True
