"""Python environments for training and evaluation packages, cached by the packages' content.

Two kinds, both venvs keyed by the sha256 of the package files and the host environment:

- **Executor-image environments** (``executor_image_uri`` given: the emulator's package jobs and
  prepare_package's import check) hold what the prebuilt image holds plus what the package URIs
  install, nothing else, as on Vertex AI. The image's documented libraries (its profile in
  :mod:`kfp_spot.executors`) and the packages' declared requirements come from this machine's
  site-packages through an allowlisted *view* (:mod:`kfp_spot.siteview`): a directory of symlinks
  to exactly those distributions and their own dependencies, named in the venv's ``.pth``.
  Everything else installed here (kfp, kfp_spot, the Google Cloud SDK, the other parts of the
  ``google`` namespace) is not importable, so a job that imports what its image and packages do
  not provide fails here as it would on the VM. A declared
  requirement this machine does not have (or not in a version that satisfies it) is installed by
  pip from the package index, as on the VM. The packages themselves are installed without their
  dependencies, whose markers pip here would read for this machine: their declared requirements
  are taken as pip on the VM reads them (:func:`requirements_on_vm`,
  :mod:`kfp_spot.vmmarkers`). Symlinks instead of installs keep environment creation under a
  few seconds with NumPy and scikit-learn in the image.
  The evaluator's environments are of this kind too, for the runtime image's profile
  (``kfp_spot.image.lock.runtime_profile``: kfp-spot and its dependencies); there the light
  ``kfp-spot-trainer`` wheel is skipped, as the full kfp-spot is a superset of it.
- **Host-view environments** (no image: tools and tests that need this machine's libraries)
  see all of this machine's site-packages through a ``.pth`` file; only the packages are
  installed into them (their sdists built into wheels as for the other kind). The light
  ``kfp-spot-trainer`` wheel is skipped there when the full kfp-spot is installed (both provide
  ``kfp_spot``; the full one is a superset).

Source distributions are built into wheels with this interpreter, then installed: without network
when their build backend is installed here, each hook seeing only the sdist's build requirements
(:class:`kfp_spot.buildview.Hooks`: a ``setup.py`` that imports an undeclared module fails here as
on the VM), else in an isolated environment with the backend from the package index, as pip on
the training VM builds them (a hatchling or poetry project too). A wheel built here is kept under
``<cache>/wheels`` by the sdist's sha256, this interpreter and the build requirements' versions:
the job's environment and the evaluation's install the same sdist, and prepare_package built its
wheel already (:func:`remember_wheel`).

Why one module: the two kinds of environment share the cache key, the wheel build and the install;
what goes into an executor-image environment's view is decided here, the view itself is made by
:mod:`kfp_spot.siteview`, which the build hooks' views (:mod:`kfp_spot.buildview`) share.
"""

from __future__ import annotations

import dataclasses
import email.message
import email.parser
import errno
import fcntl
import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import venv
import zipfile
from collections.abc import Mapping, Sequence
from importlib import metadata as importlib_metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from kfp_spot import archives, buildview, executors, fs, siteview, vmmarkers

if sys.version_info >= (3, 11):
    import tomllib
else:  # a dependency on Python 3.10
    import tomli as tomllib

log = logging.getLogger(__name__)

HOST_PYTHON_VARS = ("PYTHONPATH", "PYTHONHOME")
"""This machine's settings of where Python finds modules: never passed to a job's environment.

A ``PYTHONPATH`` pointing at the source tree made a module the package does not hold importable
here, and only here: on Vertex AI the job sees the installed package alone."""


def job_environ(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) without :data:`HOST_PYTHON_VARS`."""
    return {
        k: v for k, v in (os.environ if base is None else base).items() if k not in HOST_PYTHON_VARS
    }


_READY = ".kfp-spot-ready"
_VIEW = "view"
_WHEELS = "wheels"  # under the cache dir: wheels built here, by their sdist (build_wheels)
# 2: hooks see only the build requirements (1 saw this environment); 3: entries record what the
# backend asked for at build time (buildview.ASKED_RECORD)
_WHEEL_CACHE_FORMAT = "3"
# 2: the packages' requirements chosen by their markers for the VM (1: for this machine)
_IMAGE_ENV_FORMAT = "2"
PIP_TIMEOUT_S = 900
_LIGHT = "kfp-spot-trainer"  # kfp_spot.packaging.trainer_dist.LIGHT_DISTRIBUTION
_LIGHT_SKIPPED_BY = "kfp-spot"  # the full distribution, a superset of the light one
_WARNED: set[str] = set()

SAME_MODULE: dict[str, tuple[str, ...]] = {"xgboost": ("xgboost-cpu",)}
"""Distributions this machine may hold an image's library under, the same import package: an
image documents ``xgboost``, a machine (this project's test environment, a Linux laptop) may have
``xgboost-cpu``, XGBoost without its CUDA libraries. An image environment takes either."""


class PackageInstallError(RuntimeError):
    """Installing a package into its environment failed; the message holds pip's output."""


def fetch(uri: str, dest_dir: str | os.PathLike[str]) -> Path:
    """Copy ``uri`` (local path, ``file://`` or ``gs://``) into ``dest_dir``; return the local file.

    Raises:
        FileNotFoundError: naming the URI when there is nothing there.
        IsADirectoryError: naming the URI when it is a directory (the copy's own error named a
            folder of the download cache, not the URI given).
    """
    filesystem, path = fs.filesystem(uri)
    if not filesystem.exists(path):
        raise FileNotFoundError(f"package URI {uri!r} does not exist")
    if filesystem.isdir(path):
        raise IsADirectoryError(
            f"package URI {uri!r} is a directory: give the package file in it (an sdist "
            "NAME-VERSION.tar.gz or a wheel)"
        )
    dest = Path(dest_dir) / path.rstrip("/").rsplit("/", 1)[-1]
    dest.parent.mkdir(parents=True, exist_ok=True)
    filesystem.get(path, str(dest))
    return dest


def _env_python(env_dir: Path) -> Path:
    return env_dir / "bin" / "python"


def _distribution_of(path: Path) -> str:
    """The canonical distribution name in a wheel or sdist file name."""
    name = path.name
    for suffix in (".whl", ".tar.gz", ".tgz", ".tar.bz2", ".tar", ".zip", ".egg"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return canonicalize_name(name.split("-", 1)[0])


def _sdist_build_requires(sdist: Path) -> list[str]:
    """The ``[build-system] requires`` of an sdist (setuptools' when it declares none)."""
    default = ["setuptools>=40.8.0"]
    try:
        with tarfile.open(sdist) as tar:
            member = next(
                (
                    m
                    for m in tar.getmembers()
                    if m.name.count("/") == 1 and m.name.endswith("/pyproject.toml") and m.isfile()
                ),
                None,
            )
            handle = tar.extractfile(member) if member is not None else None
            text = handle.read().decode("utf-8") if handle is not None else ""
    except (tarfile.TarError, OSError, UnicodeDecodeError):
        return default
    try:
        build_system = tomllib.loads(text).get("build-system") or {}
    except tomllib.TOMLDecodeError:
        return default  # pip reports it, building
    requires = build_system.get("requires", default) if isinstance(build_system, dict) else default
    return [str(r) for r in requires] if isinstance(requires, list) else default


def _builds_here(sdist: Path) -> bool:
    """Whether this interpreter has every build requirement of ``sdist`` (no network needed).

    Otherwise pip builds it in an isolated environment with its backend from the package index,
    as pip on the training VM does: a hatchling, flit or poetry project is no error.
    """
    return not buildview.unmet(_sdist_build_requires(sdist))


def _host_has_full_kfp_spot() -> bool:
    return _has_full_kfp_spot(tuple(siteview.site_dirs()), _host_fingerprint())


@functools.lru_cache(maxsize=4)
def _has_full_kfp_spot(dirs: tuple[str, ...], fingerprint: tuple[int, ...]) -> bool:
    """Whether kfp-spot itself is installed in ``dirs``.

    Every distribution's metadata is read, so once per process and state of site-packages
    (``fingerprint``), not once per environment.
    """
    del fingerprint  # part of the cache key only
    return any(
        canonicalize_name(d.metadata["Name"] or "") == "kfp-spot"
        for d in importlib_metadata.distributions(path=list(dirs))
    )


def package_env(
    package_uris: Sequence[str],
    cache_dir: str | os.PathLike[str],
    *,
    executor_image_uri: str | None = None,
    profile: executors.ExecutorProfile | None = None,
    provided: Sequence[str] = (),
) -> Path:
    """Return the python executable of an environment with ``package_uris`` installed.

    The same packages (by sha256) for the same image and host environment are installed once;
    every later job or evaluation reuses the environment. Safe to call from several processes.

    Args:
        package_uris: archives (sdists or wheels) as local paths, ``file://`` or ``gs://`` URIs,
            installed with their declared dependencies.
        cache_dir: where downloads and environments are kept.
        executor_image_uri: the prebuilt training image the packages run in: the environment
            then holds only what that image and the packages provide (see the module docstring).
            None: a host-view environment that sees this machine's site-packages.
        profile: instead of ``executor_image_uri``, the profile of the image (e.g. a prediction
            image's, ``kfp_spot.executors.PredictionImage.profile``).
        provided: more requirements the image environment takes from this host (see
            :func:`create_image_env`).

    Returns:
        Absolute path of the environment's python (a relative ``cache_dir`` is resolved against
        the working directory now: the caller starts it in another one, a job's replica in its
        own working directory).

    Raises:
        FileNotFoundError: a package URI names nothing.
        kfp_spot.executors.ExecutorImageError: ``executor_image_uri`` is not a prebuilt image.
        PackageInstallError: a package does not install (pip's output, or the Python version the
            image has and the package refuses, is in the message).
    """
    if executor_image_uri is not None and profile is not None:
        raise ValueError("give executor_image_uri or profile, not both")
    image = executors.profile(executor_image_uri) if executor_image_uri is not None else profile
    cache = Path(cache_dir).absolute()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix="download-") as tmp:
        local = [fetch(uri, Path(tmp) / str(i)) for i, uri in enumerate(package_uris)]
        # Where the full kfp-spot is there (this host's view, the runtime image's profile), the
        # light wheel's ``kfp_spot`` would shadow it: the evaluation runner lives in the full one.
        full_here = image is None or _LIGHT_SKIPPED_BY in image.package_names
        if full_here and _host_has_full_kfp_spot():
            skipped = [p for p in local if _distribution_of(p) == _LIGHT]
            if skipped:
                log.info("using this host's kfp-spot instead of %s", skipped[0].name)
            local = [p for p in local if p not in skipped]
        # The environment links into this interpreter's site-packages, so it belongs to this
        # host environment as much as to the packages: another venv sharing the cache gets its own.
        identity = [sys.version, sys.prefix, *siteview.site_dirs()]
        if image is not None:
            identity += ["image", _IMAGE_ENV_FORMAT, image.uri, image.python, *image.packages]
            identity += provided
            identity += map(str, _host_fingerprint())
        identity += [fs.sha256_file(p) for p in local]
        key = hashlib.sha256("\n".join(identity).encode()).hexdigest()[:24]
        env_dir = cache / "envs" / key
        env_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(cache / f"envs/{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (env_dir / _READY).exists():
                return _env_python(env_dir)
            if env_dir.exists():  # a half-built environment from a crash
                shutil.rmtree(env_dir)
            if image is None:
                _create_host_view(env_dir, local, cache)
            else:
                create_image_env(env_dir, local, image, provided=provided, wheel_cache=cache)
    return _env_python(env_dir)


@functools.lru_cache(maxsize=64)
def site_packages_of(python: str | os.PathLike[str]) -> Path:
    """The purelib site-packages directory of the interpreter ``python`` (asked once a process)."""
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return Path(out)


@functools.cache
def _pip_runner() -> str | None:
    """This interpreter's pip's ``__pip-runner__.py`` (None: a pip without one), looked up once."""
    spec = importlib.util.find_spec("pip")
    runner = Path(spec.origin).parent / "__pip-runner__.py" if spec and spec.origin else None
    return str(runner) if runner is not None and runner.is_file() else None


def _pip_in(python: str) -> tuple[str, ...]:
    """How to run this interpreter's pip inside the environment of ``python``.

    What ``pip --python PYTHON`` does, without its first process: pip starts ``PYTHON
    .../pip/__pip-runner__.py`` (this very pip, imported from its own directory). Started
    directly, the same pip runs in the same environment; a pip without the runner is asked with
    ``--python``.
    """
    runner = _pip_runner()
    return (python, runner) if runner else (sys.executable, "-m", "pip", "--python", python)


def _pip(python: Path, args: Sequence[str], what: str, env_dir: Path | None = None) -> None:
    cmd = [*_pip_in(str(python)), "install", "--quiet", "--disable-pip-version-check", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise PackageInstallError(f"pip did not install {what} in {PIP_TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        if env_dir is not None:
            shutil.rmtree(env_dir, ignore_errors=True)
        raise PackageInstallError(
            f"pip could not install {what} (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )


def _create_host_view(env_dir: Path, packages: Sequence[Path], wheel_cache: Path) -> None:
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = _env_python(env_dir)
    purelib = site_packages_of(python)
    # addsitedir appends the host's site-packages after the env's own (the package's files win)
    # and also runs the .pth files there, which editable installs of the host rely on.
    lines = [f"import site; site.addsitedir({d!r})" for d in siteview.site_dirs()]
    Path(purelib, "_kfp_spot_host.pth").write_text("\n".join(lines) + "\n")
    # each sdist built into a wheel as for the image environments: as pip on the VM builds it
    packages = build_wheels(packages, env_dir / "wheels", wheel_cache)
    if packages:
        log.info("installing %s into %s", ", ".join(p.name for p in packages), env_dir)
        _pip(python, list(map(str, packages)), ", ".join(p.name for p in packages), env_dir)
    (env_dir / _READY).write_text(sys.version)


# ---------------------------------------------------------------------------------------------
# Executor-image environments


@dataclasses.dataclass(frozen=True)
class WheelMeta:
    """What a wheel's METADATA says."""

    path: Path
    name: str
    version: str
    requires_python: str
    requires: tuple[str, ...]


def wheel_meta(path: Path) -> WheelMeta:
    """Name, version, Requires-Python and Requires-Dist of a wheel.

    Raises:
        PackageInstallError: the file is not a readable wheel.
    """
    try:
        with zipfile.ZipFile(path) as zf:
            name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            meta: email.message.Message = email.parser.BytesParser().parsebytes(zf.read(name))
    except (zipfile.BadZipFile, StopIteration, OSError) as exc:
        raise PackageInstallError(f"{path.name} is not a readable wheel: {exc}") from exc
    return WheelMeta(
        path=path,
        name=str(meta["Name"]),
        version=str(meta["Version"]),
        requires_python=str(meta.get("Requires-Python") or ""),
        requires=tuple(str(r) for r in (meta.get_all("Requires-Dist") or [])),
    )


def _wheel_key(sdist: Path) -> str:
    """What the wheel built here from ``sdist`` depends on, as a digest.

    The sdist's bytes, this interpreter and the installed version of each of its build
    requirements. Only for an sdist that :func:`_builds_here`: one built isolated gets its
    backend from the package index at that moment, and is never cached.
    """
    parts = [_WHEEL_CACHE_FORMAT, sys.version, sys.executable, fs.sha256_file(sdist)]
    for text in sorted(_sdist_build_requires(sdist)):
        name = Requirement(text).name  # _builds_here parsed each
        try:
            parts.append(f"{name}=={importlib_metadata.version(name)}")
        except importlib_metadata.PackageNotFoundError:
            parts.append(f"{name} (not installed: its marker excludes this host)")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def remember_wheel(
    cache_dir: str | os.PathLike[str], sdist: Path, wheel: Path, asked: Mapping[str, str]
) -> None:
    """Keep ``wheel``, built here from ``sdist``, for :func:`build_wheels` under ``cache_dir``.

    prepare_package builds the wheel of the sdist it stages (to check it); the job's and the
    evaluation's environments, which install that sdist, then take the wheel from here instead
    of building it again. ``asked``: what the backend asked for at build time and the versions
    it got (:attr:`kfp_spot.buildview.Hooks.asked_for`). Storage errors leave the cache as it
    was (the wheel is built later).
    """
    if _builds_here(sdist):
        _store_wheel(Path(cache_dir) / _WHEELS, _wheel_key(sdist), wheel, asked)


def _store_wheel(wheels: Path, key: str, wheel: Path, asked: Mapping[str, str]) -> None:
    """``wheel`` and what its build asked for under ``wheels/key``; whole (a rename) or not."""
    try:
        with tempfile.TemporaryDirectory(prefix="kfp-spot-asked-") as tmp:
            record = buildview.record_asked(Path(tmp), asked)
            fs.keep_copies(wheels, key, [wheel, record])
    except OSError as exc:
        log.info("wheel %s not cached under %s: %s", wheel.name, wheels, exc)


def _cached_wheel(entry: Path, dest: Path) -> Path | None:
    """The wheel kept in ``entry``, copied into ``dest``; None: no (whole) entry there.

    A hit also needs what the backend asked for then installed here in the same versions now
    (:func:`kfp_spot.buildview.asked_unchanged`); an entry that fails it is dropped, so the
    wheel built instead takes its place.
    """
    try:
        found = sorted(entry.glob("*.whl"))
        if len(found) != 1:
            return None
        if buildview.asked_unchanged(entry) is None:
            shutil.rmtree(entry, ignore_errors=True)
            return None
        return Path(shutil.copyfile(found[0], dest / found[0].name))
    except OSError:
        return None


def build_wheels(
    packages: Sequence[Path], out_dir: Path, cache_dir: str | os.PathLike[str] | None = None
) -> list[Path]:
    """Wheels for ``packages``: wheels as they are, sdists built with this interpreter.

    An sdist whose build backend is installed here is built without network, each hook seeing
    only its build requirements (:class:`kfp_spot.buildview.Hooks`), as pip's isolated build on
    the VM does; any other by pip in an isolated environment from the package index. With
    ``cache_dir``, the wheel of an sdist built here before (by this function or
    :func:`remember_wheel`) with the same interpreter and build tools is taken from there.

    Raises:
        PackageInstallError: an sdist does not build (the build's output is in the message).
    """
    out: list[Path] = []
    sdists = [p for p in packages if not p.name.endswith(".whl")]
    built: dict[Path, Path] = {}
    for i, sdist in enumerate(sdists):
        dest = out_dir / str(i)
        dest.mkdir(parents=True, exist_ok=True)
        here = _builds_here(sdist)
        entry = (
            Path(cache_dir, _WHEELS, _wheel_key(sdist)) if cache_dir is not None and here else None
        )
        cached = _cached_wheel(entry, dest) if entry is not None else None
        if cached is not None:
            log.info("%s was built into %s before", sdist.name, cached.name)
            built[sdist] = cached
            continue
        wheel: Path | None = None
        asked: dict[str, str] = {}
        if here:
            try:
                wheel, asked = _build_here(sdist, dest)
            except buildview.UnmetBuildRequirementsError as exc:
                log.info("%s asks for %s at build time: building it isolated", sdist.name, exc)
                entry = None  # its environment came from the package index: never kept
        if wheel is None:
            wheel = _build_isolated(sdist, dest)
        built[sdist] = wheel
        if entry is not None:
            _store_wheel(entry.parent, entry.name, wheel, asked)
    for package in packages:
        out.append(built.get(package, package))
    return out


def _build_here(sdist: Path, dest: Path) -> tuple[Path, dict[str, str]]:
    """The wheel of ``sdist`` built into ``dest`` with the backend installed here.

    With what the backend asked for at build time (:attr:`kfp_spot.buildview.Hooks.asked_for`).
    """
    with tempfile.TemporaryDirectory(prefix="kfp-spot-wheel-") as tmp:
        try:
            project = archives.unpack_sdist(sdist, Path(tmp) / "sdist")
            hooks = buildview.Hooks(_sdist_build_requires(sdist), Path(tmp), {})
            return hooks.build(project, "wheel", dest), hooks.asked_for
        except archives.ArchiveError as exc:
            raise PackageInstallError(f"{sdist.name} cannot be unpacked: {exc}") from None
        except buildview.HookError as exc:
            raise PackageInstallError(f"{sdist.name} did not build into a wheel: {exc}") from None


def _build_isolated(sdist: Path, dest: Path) -> Path:
    """The wheel of ``sdist`` built into ``dest`` by pip, its backend from the package index."""
    cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check"]
    # Requires-Python is judged against the Python the package runs on, not this one's
    cmd += ["--ignore-requires-python", "--no-deps", "--wheel-dir", str(dest), str(sdist)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise PackageInstallError(f"{sdist.name} did not build in {PIP_TIMEOUT_S} s") from exc
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        raise PackageInstallError(
            f"pip could not install {sdist.name}: building it failed (exit "
            f"{proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    return wheels[0]


def _python_ok(requires_python: str, python: str) -> bool:
    """Whether some ``python``.x release satisfies ``requires_python`` (pip's check on the VM)."""
    if not requires_python:
        return True
    try:
        spec = SpecifierSet(requires_python)
    except InvalidSpecifier:
        return True  # pip ignores what it cannot parse
    return any(spec.contains(f"{python}.{patch}", prereleases=True) for patch in range(0, 30))


def python_refusal(meta: WheelMeta, image: executors.ExecutorProfile) -> str | None:
    """Why pip on ``image`` refuses the package ``meta`` describes for its Python, or None."""
    if _python_ok(meta.requires_python, image.python):
        return None
    return (
        f"package {meta.name!r} requires a different Python: {image.python} (the Python of "
        f"{image.image}) not in {meta.requires_python!r}"
    )


def local_file_refusal(meta: WheelMeta, image: executors.ExecutorProfile) -> str | None:
    """Why pip on ``image`` cannot install a requirement of ``meta`` on a file of this machine.

    ``mylib @ file:///Users/alice/mylib`` installs here, where the file is, and never on a
    training VM. A requirement whose marker is false on the VM is skipped there
    (:func:`requirements_on_vm`), so it is no refusal.
    """
    chosen = vmmarkers.for_vm(
        meta.requires, vmmarkers.image_environment(image.python), vmmarkers.host_environment()
    )
    for text in chosen.install:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        url = requirement.url or ""
        if url.lower().startswith("file:"):
            return (
                f"package {meta.name!r} requires {text!r}, a file of this machine, which "
                f"{image.image} on Vertex AI does not have: pass that package in the package "
                f"URIs and require {requirement.name!r} by name"
            )
    return None


def _host_fingerprint() -> tuple[int, ...]:
    # A site-packages directory's mtime changes when a distribution is added or removed.
    return tuple(os.stat(d).st_mtime_ns for d in siteview.site_dirs())


def _files_of(dist: importlib_metadata.Distribution) -> list[tuple[str, ...]]:
    """``dist``'s installed files, as :func:`kfp_spot.siteview.link` takes them.

    Without a ``RECORD`` (an old install), its top-level names and its metadata directory, each
    linked whole: the image has the distribution, whatever its files are.
    """
    files = siteview.recorded_files(dist)
    if files is not None:
        return files
    top = (dist.read_text("top_level.txt") or "").split()
    meta_dir = Path(str(getattr(dist, "_path", ""))).name
    return [(name,) for name in [*top, meta_dir] if name]


def create_image_env(
    env_dir: Path,
    packages: Sequence[Path],
    image: executors.ExecutorProfile,
    *,
    provided: Sequence[str] = (),
    wheel_cache: Path | None = None,
) -> Path:
    """Make a venv at ``env_dir`` holding ``image``'s profile and ``packages`` with their deps.

    Args:
        env_dir: where (must not exist).
        packages: wheels or sdists, installed with their declared dependencies.
        image: the executor image whose documented libraries the environment provides.
        provided: more requirements taken as provided by the image (linked from this host).
        wheel_cache: the cache dir whose wheels of sdists :func:`build_wheels` reuses, or None.

    Returns:
        The environment's python.

    Raises:
        PackageInstallError: a package does not build or install, or refuses the image's Python.
    """
    started = time.monotonic()
    if image.past_availability() and image.image not in _WARNED:
        _WARNED.add(image.image)  # once per process and image
        log.warning(
            "%s reached its documented end of availability on %s: Vertex AI may refuse it",
            image.image,
            image.end_of_availability,
        )
    with tempfile.TemporaryDirectory(prefix="kfp-spot-wheels-") as tmp:
        wheels = build_wheels(packages, Path(tmp), wheel_cache)
        metas = [wheel_meta(w) for w in wheels]
        for meta in metas:
            refused = python_refusal(meta, image) or local_file_refusal(meta, image)
            if refused:
                raise PackageInstallError(f"pip could not install {meta.path.name}: {refused}")
        own: dict[str, WheelMeta] = {canonicalize_name(m.name): m for m in metas}
        on_vm = requirements_on_vm([r for m in metas for r in m.requires], image, own)
        chosen = list(on_vm.install)
        installed = siteview.Installed()
        aliases = [
            a for n in image.package_names for a in SAME_MODULE.get(canonicalize_name(n), ())
        ]
        profile = [*image.package_names, *aliases, *provided]
        allowed = siteview.closure(profile, installed, check_versions=False).found
        needed = siteview.closure(chosen, installed)
        allowed.update(needed.found)
        for name in own:  # the packages' own files, never the host's copy
            allowed.pop(name, None)
        venv.EnvBuilder(with_pip=False, symlinks=True, system_site_packages=False).create(env_dir)
        python = _env_python(env_dir)
        view = env_dir / _VIEW
        missing = siteview.link(view, [(d, _files_of(d)) for d in allowed.values()])
        if missing:
            log.debug("not installed here, so not in the view: %s", ", ".join(map(str, missing)))
        # After the env's own site-packages: an installed package wins over the view's copy.
        Path(site_packages_of(python), "_kfp_spot_image.pth").write_text(
            f"import site; site.addsitedir({str(view)!r})\n"
        )
        if wheels:
            # the packages alone: pip here would read their requirements' markers for this
            # machine; those the VM installs are the view's, or pip's from the package index
            _pip(python, ["--no-deps", *map(str, wheels)], _names(packages), env_dir)
        if needed.missing or needed.unreadable:  # pip resolves them, as on the VM
            what = f"the requirements of {_names(packages)} ({', '.join(chosen)})"
            if on_vm.vm_only:  # pip here would skip them; on the VM it installs them
                what += (
                    f"; of them {', '.join(map(repr, on_vm.vm_only))} only because pip on "
                    f"Vertex AI's VMs ({image.image}) installs it, its marker holding there"
                )
            _pip(python, chosen, what, env_dir)
    (env_dir / _READY).write_text(f"{sys.version}\n{image.image}\n")
    log.info(
        "environment of %s with %s ready in %.1f s (%d libraries from the image profile)",
        image.image,
        _names(packages) or "no packages",
        time.monotonic() - started,
        len(allowed),
    )
    return python


def requirements_on_vm(
    requirements: Sequence[str],
    image: executors.ExecutorProfile,
    own: Mapping[str, WheelMeta],
    *,
    host: Mapping[str, str] | None = None,
) -> vmmarkers.VmRequirements:
    """What pip on ``image``'s VM installs of ``requirements`` besides the ``own`` packages.

    Markers are read for the VM (:func:`kfp_spot.vmmarkers.for_vm`), not for ``host`` (default:
    this interpreter): a requirement for a Mac only is left out, one for Linux only is kept. A
    requirement the VM installs that cannot install here fails the environment: the job is not
    run without what it would have on Vertex AI.

    Raises:
        PackageInstallError: a requirement on one of ``own`` (canonical name -> its wheel) that
            its version does not satisfy, which pip on the VM refuses.
    """
    here = vmmarkers.host_environment() if host is None else host
    vm = vmmarkers.image_environment(image.python)
    chosen = vmmarkers.for_vm(requirements, vm, here)
    for text in chosen.host_only:
        log.info("not installed: %r holds on this machine, not on %s", text, image.image)
    out: list[str] = []
    for text in chosen.install:
        meta = own.get(_requirement_name(text))
        if meta is None:
            out.append(text)
            continue
        requirement = Requirement(text)
        if not requirement.specifier.contains(meta.version, prereleases=True):
            raise PackageInstallError(
                f"pip could not install {_names([meta.path])}: {text!r} is required and "
                f"{meta.name} {meta.version} is given"
            )
        if requirement.extras:  # what that package requires for them, read for the VM too
            more = vmmarkers.for_vm(meta.requires, vm, here, extras=requirement.extras).install
            out += [t for t in more if _requirement_name(t) not in own]
    return dataclasses.replace(chosen, install=tuple(dict.fromkeys(out)))


def _requirement_name(text: str) -> str:
    try:
        return canonicalize_name(Requirement(text).name)
    except InvalidRequirement:
        return ""


def _names(paths: Sequence[Path]) -> str:
    return ", ".join(p.name for p in paths)


def writable_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``cache_dir`` (default: :func:`default_cache_dir`), made if missing, or a refusal.

    Raises:
        ValueError: naming the directory, the reason and the variables that choose it.
    """
    path = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(
            f"the package environment cache {path} cannot be made ({exc.strerror or exc}): point "
            "KFP_SPOT_CACHE_DIR (else XDG_CACHE_HOME) at a writable directory"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(
            f"the package environment cache {path} is not writable: point KFP_SPOT_CACHE_DIR "
            "(else XDG_CACHE_HOME) at a writable directory"
        )
    return path


def default_cache_dir() -> Path:
    """Where package environments are cached unless a caller says otherwise.

    ``$KFP_SPOT_CACHE_DIR``, else ``$XDG_CACHE_HOME/kfp-spot``, else ``~/.cache/kfp-spot``. Read at
    call time, never at import time.
    """
    explicit = os.environ.get("KFP_SPOT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kfp-spot"


def make_cache_dir(path: Path) -> None:
    """Create the cache directory ``path`` if need be and check that it can be written in.

    Raises:
        OSError: it cannot be made (a file in the way, a missing mount) or written.
    """
    path.mkdir(parents=True, exist_ok=True)
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "not writable", str(path))
