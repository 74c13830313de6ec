"""The runtime image's lock file: every package the image installs, at one exact version.

``requirements-image.lock`` at the top of the checkout pins the whole dependency closure of
kfp-spot's runtime requirements for the image's platform (:data:`IMAGE_PLATFORM`, CPython
:data:`IMAGE_PYTHON`), with kfp at the version that compiled the committed YAMLs (their
``sdkVersion``). pyproject.toml keeps ranges; the lock is the one place for exact pins, so the
same image tag always holds the same packages.

``kfp-spot image lock`` regenerates it (with ``uv pip compile``, which resolves for another
platform and Python than the host's); :func:`lock_problems` is what the build and a test check:
every runtime requirement of pyproject.toml satisfied by its pin, and kfp equal to the YAMLs'
``sdkVersion``.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from kfp_spot.executors import ExecutorProfile
from kfp_spot.version import __version__

LOCK_FILE = "requirements-image.lock"
IMAGE_PLATFORM = "linux/amd64"  # what Vertex AI Pipelines runs a task's container on
IMAGE_PYTHON = "3.11"
RUNTIME_DISTRIBUTION = "kfp-spot"  # what the image installs over the lock's pins
# uv's name of the image's platform: Debian bookworm's glibc is 2.36, manylinux_2_28 is what the
# scientific wheels ship for.
_UV_PLATFORM = "x86_64-manylinux_2_28"
# Where the committed YAMLs name the kfp that compiled them.
_SDK_YAML = Path("components") / "prepare_package" / "component.yaml"
_SDK_LINE = re.compile(r"^sdkVersion: kfp-(?P<version>\S+)$", re.MULTILINE)
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#]+)\s*$")


class LockError(ValueError):
    """The lock file is missing, unreadable or out of date (the message says how to fix it)."""


def runtime_profile() -> ExecutorProfile:
    """The runtime image as an environment profile: kfp-spot and its dependencies.

    On Python :data:`IMAGE_PYTHON`, nothing else: what ``evaluate_checkpoint`` runs a package's
    evaluation in (kfp_spot.envcache links the closure from this host). An import the package
    neither declares nor gets from kfp-spot fails locally as it does in the image on Vertex AI.
    """
    return ExecutorProfile(
        image="kfp-spot-runtime",
        framework="kfp-spot",
        version=__version__,
        python=IMAGE_PYTHON,
        accelerator="CPU",
        end_of_availability=datetime.date.max,
        packages=(RUNTIME_DISTRIBUTION,),
        repository="kfp-spot",
    )


def canonical(name: str) -> str:
    """A distribution name in PEP 503 normal form (``Google_Cloud.X`` -> ``google-cloud-x``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def image_environment() -> dict[str, str]:
    """PEP 508 marker values of the image's interpreter (not the host's)."""
    from kfp_spot.vmmarkers import image_environment as environment_of

    return environment_of(IMAGE_PYTHON)


def read_lock(path: str | os.PathLike[str]) -> dict[str, str]:
    """The pins of a lock file: canonical name -> exact version.

    Raises:
        LockError: the file is missing or a line is not ``name==version`` (names the line).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LockError(f"{path} does not exist: run `kfp-spot image lock`") from None
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.fullmatch(line)
        if match is None:
            raise LockError(f"{path}:{number}: {raw.strip()!r} is not an exact pin NAME==VERSION")
        pins[canonical(match["name"])] = match["version"]
    return pins


def sdk_version(source: str | os.PathLike[str]) -> str:
    """The kfp version that compiled the committed YAMLs of the checkout ``source``."""
    path = Path(source) / _SDK_YAML
    match = _SDK_LINE.search(path.read_text(encoding="utf-8"))
    if match is None:
        raise LockError(f"{path} names no sdkVersion: recompile it (`kfp-spot compile`)")
    return match["version"]


def lock_problems(pins: dict[str, str], requirements: Iterable[str], kfp_version: str) -> list[str]:
    """What is wrong with ``pins`` for these requirements; empty when the lock is current.

    Args:
        pins: :func:`read_lock`'s result.
        requirements: PEP 508 requirements (pyproject.toml's ``dependencies``); those whose
            marker is false in the image (:func:`image_environment`) are skipped.
        kfp_version: the ``sdkVersion`` of the committed YAMLs (:func:`sdk_version`).
    """
    from packaging.requirements import Requirement

    problems = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(image_environment()):
            continue
        pinned = pins.get(canonical(req.name))
        if pinned is None:
            problems.append(f"{req.name} is not pinned")
        elif not req.specifier.contains(pinned, prereleases=True):
            problems.append(f"{req.name}=={pinned} is outside {req.name}{req.specifier}")
    if pins.get("kfp") not in (None, kfp_version):
        problems.append(
            f"kfp=={pins['kfp']} is not the kfp that compiled the YAMLs (sdkVersion: "
            f"kfp-{kfp_version})"
        )
    return problems


def pyproject_requirements(source: str | os.PathLike[str]) -> list[str]:
    """``[project] dependencies`` of the checkout's pyproject.toml."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # a dependency on Python 3.10
        import tomli as tomllib

    with open(Path(source) / "pyproject.toml", "rb") as handle:
        deps: list[str] = tomllib.load(handle)["project"]["dependencies"]
    return deps


def check_lock(source: str | os.PathLike[str]) -> dict[str, str]:
    """The checkout's lock pins, after checking them against pyproject.toml and the YAMLs.

    Raises:
        LockError: missing or out of date, listing every problem and the fix.
    """
    path = Path(source) / LOCK_FILE
    pins = read_lock(path)
    problems = lock_problems(pins, pyproject_requirements(source), sdk_version(source))
    if problems:
        raise LockError(
            f"{path} is out of date: {'; '.join(problems)}. Run `kfp-spot image lock` "
            "and commit the result"
        )
    return pins


def write_lock(source: str | os.PathLike[str], uv: str | None = None) -> Path:
    """Resolve the image's packages again and write :data:`LOCK_FILE` in the checkout.

    Runs ``uv pip compile`` for CPython :data:`IMAGE_PYTHON` on linux/x86_64 (whatever the host
    is), with kfp held at the YAMLs' ``sdkVersion``.

    Raises:
        LockError: uv is not installed, or the resolution failed (with uv's message).
    """
    source = Path(source)
    uv = uv or shutil.which("uv")
    if uv is None:
        raise LockError("`kfp-spot image lock` needs uv: `pip install uv` (or pipx install uv)")
    inputs = [*pyproject_requirements(source), f"kfp=={sdk_version(source)}"]
    with tempfile.TemporaryDirectory(prefix="kfp-spot-lock-") as tmp:
        requirements = Path(tmp) / "requirements.in"
        requirements.write_text("\n".join(inputs) + "\n")
        output = Path(tmp) / LOCK_FILE
        proc = subprocess.run(
            [
                uv,
                *("pip", "compile", str(requirements), "--quiet", "--no-header"),
                *("--python-version", IMAGE_PYTHON, "--python-platform", _UV_PLATFORM),
                *("--no-annotate", "--output-file", str(output)),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise LockError(f"uv pip compile failed:\n{proc.stderr.strip()}")
        header = (
            "# The runtime image's packages (docs/image.md), resolved for CPython "
            f"{IMAGE_PYTHON} on {IMAGE_PLATFORM}\n"
            "# from pyproject.toml's dependencies with kfp at the YAMLs' sdkVersion.\n"
            "# Regenerate with `kfp-spot image lock` (needs uv); do not edit by hand.\n"
        )
        target = source / LOCK_FILE
        target.write_text(header + output.read_text())
    return target
