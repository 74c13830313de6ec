"""Python environments for training and evaluation packages, cached by the packages' content.

The emulator installs a job's ``packageUris`` here before it runs ``python -m MODULE``, and the
evaluator installs the package it scores. An environment is a venv whose ``.pth`` file names the
host's site-packages, so large frameworks already installed (numpy, scikit-learn, torch) are seen
and not reinstalled; only the packages themselves are installed into it, without network when
their build backend is already installed.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
import venv
from collections.abc import Sequence
from pathlib import Path

from kfp_spot import fs

log = logging.getLogger(__name__)

_READY = ".kfp-spot-ready"


class PackageInstallError(RuntimeError):
    """Installing a package into its environment failed; the message holds pip's output."""


def fetch(uri: str, dest_dir: str | os.PathLike[str]) -> Path:
    """Copy ``uri`` (local path, ``file://`` or ``gs://``) into ``dest_dir``; return the local file.

    Raises:
        FileNotFoundError: naming the URI when there is nothing there.
    """
    filesystem, path = fs.filesystem(uri)
    if not filesystem.exists(path):
        raise FileNotFoundError(f"package URI {uri!r} does not exist")
    dest = Path(dest_dir) / path.rstrip("/").rsplit("/", 1)[-1]
    dest.parent.mkdir(parents=True, exist_ok=True)
    filesystem.get(path, str(dest))
    return dest


def _host_site_dirs() -> list[str]:
    dirs = list(site.getsitepackages())
    purelib = sysconfig.get_paths()["purelib"]
    if purelib not in dirs:
        dirs.append(purelib)
    return [d for d in dirs if os.path.isdir(d)]


def _env_python(env_dir: Path) -> Path:
    return env_dir / "bin" / "python"


def package_env(package_uris: Sequence[str], cache_dir: str | os.PathLike[str]) -> Path:
    """Return the python executable of an environment with ``package_uris`` installed.

    Environments are keyed by the sha256 of the package files and by the host environment they
    see (interpreter, prefix, site-packages), so the same packages are installed once per host
    environment and every later job or evaluation reuses them. Safe to call from several
    processes.

    Args:
        package_uris: archives (sdists or wheels) as local paths, ``file://`` or ``gs://`` URIs.
        cache_dir: where downloads and environments are kept.

    Returns:
        Path of the environment's python.

    Raises:
        FileNotFoundError: a package URI names nothing.
        PackageInstallError: pip could not install a package (its output is in the message).
    """
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix="download-") as tmp:
        local = [fetch(uri, Path(tmp) / str(i)) for i, uri in enumerate(package_uris)]
        # The environment sees this interpreter's site-packages, so it belongs to this host
        # environment as much as to the packages: another venv sharing the cache gets its own.
        identity = [sys.version, sys.prefix, *_host_site_dirs()]
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
            _create(env_dir, local)
    return _env_python(env_dir)


def site_packages_of(python: str | os.PathLike[str]) -> Path:
    """The purelib site-packages directory of the interpreter ``python``."""
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return Path(out)


def _create(env_dir: Path, packages: Sequence[Path]) -> None:
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = _env_python(env_dir)
    purelib = site_packages_of(python)
    # addsitedir appends the host's site-packages after the env's own (the package's files win)
    # and also runs the .pth files there, which editable installs of the host rely on.
    lines = [f"import site; site.addsitedir({d!r})" for d in _host_site_dirs()]
    Path(purelib, "_kfp_spot_host.pth").write_text("\n".join(lines) + "\n")
    if packages:
        cmd = [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-build-isolation",
            *map(str, packages),
        ]
        log.info("installing %s into %s", ", ".join(p.name for p in packages), env_dir)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(env_dir, ignore_errors=True)
            raise PackageInstallError(
                "pip could not install "
                + ", ".join(p.name for p in packages)
                + f" (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
            )
    (env_dir / _READY).write_text(sys.version)


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
