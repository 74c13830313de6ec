"""Build the runtime image from a source checkout with podman or docker, and push it.

The build needs no registry inside the image build: every Python wheel is built on the host first
(``pip wheel``, with the host's own index and certificates) into ``build/image/``, which is the
build context of the top-level ``Dockerfile``; the image installs them with ``--no-index``. With
podman and no base image given, the base is a Debian ``bookworm`` root made with ``debootstrap``
and imported once (:data:`DEBIAN_BASE`), so nothing is pulled either. With docker the Dockerfile's
default base ``python:3.11-slim`` is pulled as usual.

A build is skipped when the image already carries the digest of its inputs (the Dockerfile, the
kfp-spot wheel's file list and hashes, the pinned dependency wheels and the base image ID), so a
second ``make image`` costs seconds.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kfp_spot.image.records import ImageKind, ImageRecord, remember
from kfp_spot.version import RUNTIME_IMAGE, __version__

log = logging.getLogger(__name__)

DEBIAN_BASE = "localhost/kfp-spot-base:bookworm"
# The runtime image plus the example trainer's dependencies (the ``examples`` extra): what the
# container test evaluates the example trainer in. Local only; never published.
EXAMPLES_IMAGE = f"localhost/kfp-spot-examples:{__version__}"
INPUTS_LABEL = "io.kfp-spot.inputs"
VERSION_LABEL = "org.opencontainers.image.version"
_DEBOOTSTRAP_INCLUDE = "--include=python3,python3-venv,ca-certificates"
# What setuptools needs to build the kfp-spot wheel (pyproject.toml, setup.py, package-dir map).
_PIP_WHEEL = (sys.executable, "-m", "pip", "wheel", "--quiet")
_WHEEL_SOURCES = ("pyproject.toml", "setup.py", "README.md", "kfp_spot", "components", "pipelines")


class ImageBuildError(RuntimeError):
    """The image could not be built or pushed; the message says which step and why."""


@dataclass(frozen=True)
class Engine:
    """A container engine command line: ``podman`` or ``docker``."""

    name: str

    def run(
        self, *args: str, capture: bool = True, stdin: bytes | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``<engine> ARGS``; raise :class:`ImageBuildError` with its output on failure."""
        proc = subprocess.run(
            [self.name, *args],
            input=stdin,
            capture_output=capture,
        )
        if check and proc.returncode != 0:
            out = b"" if not capture else (proc.stdout or b"") + (proc.stderr or b"")
            tail = "\n".join(out.decode(errors="replace").strip().splitlines()[-20:])
            raise ImageBuildError(
                f"`{self.name} {' '.join(args[:2])} ...` failed (exit {proc.returncode})"
                + (f":\n{tail}" if tail else "")
            )
        return proc

    def image_exists(self, reference: str) -> bool:
        """Whether the engine's store holds ``reference``."""
        return self.run("image", "inspect", reference, check=False).returncode == 0

    def inspect(self, reference: str, template: str) -> str:
        """``image inspect --format TEMPLATE`` of ``reference``."""
        out = self.run("image", "inspect", "--format", template, reference).stdout
        return out.decode().strip()

    def label(self, reference: str, name: str) -> str | None:
        """The image's label ``name`` (None when the image or the label is missing)."""
        if not self.image_exists(reference):
            return None
        value = self.inspect(reference, f'{{{{ index .Config.Labels "{name}" }}}}')
        return value if value and value != "<no value>" else None


def detect_engine(name: str | None = None) -> Engine:
    """The container engine to use.

    ``name``, else ``$KFP_SPOT_CONTAINER_ENGINE``, else podman when installed, else docker.

    Raises:
        ImageBuildError: the engine is unknown or not installed (says how to install one).
    """
    name = name or os.environ.get("KFP_SPOT_CONTAINER_ENGINE") or None
    if name is None:
        name = next((n for n in ("podman", "docker") if shutil.which(n)), None)
        if name is None:
            raise ImageBuildError(
                "no container engine: install podman (`apt-get install -y podman runc "
                "debootstrap`, as `make image` does) or docker"
            )
    if name not in ("podman", "docker"):
        raise ImageBuildError(f"container engine {name!r} is not 'podman' or 'docker'")
    if shutil.which(name) is None:
        raise ImageBuildError(f"container engine {name!r} is not installed")
    return Engine(name)


@dataclass(frozen=True)
class BuildResult:
    """What :func:`build_image` made: image references, their IDs, and whether they were reused."""

    images: dict[str, str]
    reused: bool


def _run(cmd: Sequence[str], what: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise ImageBuildError(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return proc


def _requirements(wheel: Path) -> tuple[list[str], list[str]]:
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


def _wheel_content_digest(wheel: Path) -> str:
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
        _run(
            [*_PIP_WHEEL, "--no-deps", "--no-build-isolation", "--wheel-dir", str(dist_dir), tmp],
            "building the kfp-spot wheel",
        )
    (wheel,) = dist_dir.glob("kfp_spot-*.whl")
    return wheel


def build_dependency_wheels(wheels_dir: Path, runtime: list[str], examples: list[str]) -> bool:
    """Build (or keep) every dependency's wheel in ``wheels_dir``; returns whether pip ran.

    ``requirements.txt`` there pins nothing itself: it lists kfp-spot's requirements, and the
    wheels pip resolved for them are what the image installs. The folder is rebuilt only when the
    requirements change.
    """
    wanted = "\n".join(runtime) + "\n"
    stamp = "\n".join([*runtime, "# examples", *examples]) + "\n"
    if (wheels_dir / ".complete").is_file() and (wheels_dir / ".complete").read_text() == stamp:
        return False
    shutil.rmtree(wheels_dir, ignore_errors=True)
    wheels_dir.mkdir(parents=True)
    (wheels_dir / "requirements.txt").write_text(wanted)
    (wheels_dir / "examples.txt").write_text("\n".join(examples) + "\n")
    _run(
        [
            *_PIP_WHEEL,
            *("--wheel-dir", str(wheels_dir)),
            *("-r", str(wheels_dir / "requirements.txt"), "-r", str(wheels_dir / "examples.txt")),
        ],
        "building the dependency wheels (pip wheel)",
    )
    (wheels_dir / ".complete").write_text(stamp)
    return True


def ensure_debian_base(engine: Engine, progress: Callable[[str], None]) -> str:
    """Import a Debian bookworm root with Python 3.11 as :data:`DEBIAN_BASE`, once."""
    if engine.image_exists(DEBIAN_BASE):
        return DEBIAN_BASE
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "debootstrap is not installed (`apt-get install -y debootstrap`); or pass "
            "--base-image with a Python 3.11 image your engine can pull, e.g. python:3.11-slim"
        )
    progress(f"making the base image {DEBIAN_BASE} with debootstrap (once, about a minute)")
    with tempfile.TemporaryDirectory(prefix="kfp-spot-base-") as tmp:
        root = Path(tmp) / "root"
        _run(
            ["debootstrap", "--variant=minbase", _DEBOOTSTRAP_INCLUDE, "bookworm", str(root)],
            "debootstrap",
        )
        # What a slim image leaves out: downloaded packages, package lists, docs.
        for pattern in (
            "var/cache/apt/archives/*.deb",
            "var/cache/apt/*.bin",
            "var/lib/apt/lists/*",
            "usr/share/doc/*",
            "usr/share/man/*",
            "usr/share/locale/*",
        ):
            for path in root.glob(pattern):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE
        )
        try:
            engine_proc = subprocess.run(
                [engine.name, "import", "-", DEBIAN_BASE], stdin=tar.stdout, capture_output=True
            )
        finally:
            if tar.stdout is not None:  # always, with stdout=PIPE
                tar.stdout.close()
            tar.wait()
        if engine_proc.returncode != 0 or tar.returncode != 0:
            raise ImageBuildError(
                f"importing the base image failed: {engine_proc.stderr.decode(errors='replace')}"
            )
    return DEBIAN_BASE


def build_image(
    source: str | os.PathLike[str] = ".",
    *,
    engine: Engine | None = None,
    tag: str = RUNTIME_IMAGE,
    base_image: str | None = None,
    examples: bool = False,
    progress: Callable[[str], None] = print,
) -> BuildResult:
    """Build the runtime image (and optionally :data:`EXAMPLES_IMAGE`) from a source checkout.

    Args:
        source: the kfp-spot checkout (holds ``Dockerfile`` and ``pyproject.toml``).
        engine: podman or docker (default: :func:`detect_engine`).
        tag: the runtime image's reference.
        base_image: a Python 3.11 image to build on; default: with podman the debootstrap base
            (:data:`DEBIAN_BASE`), with docker the Dockerfile's ``python:3.11-slim``.
        examples: also build the ``examples`` stage (the example trainer's dependencies).
        progress: where progress lines go.

    Returns:
        The images (reference -> image ID) and whether they were reused unchanged.

    Raises:
        ImageBuildError: naming the step that failed.
    """
    source = Path(source).resolve()
    engine = engine or detect_engine()
    dockerfile = source / "Dockerfile"
    if not dockerfile.is_file():
        raise ImageBuildError(f"{dockerfile} does not exist: build from a kfp-spot checkout")
    context = source / "build" / "image"
    wheel = build_wheel(source, context / "dist")
    runtime_reqs, example_reqs = _requirements(wheel)
    if build_dependency_wheels(context / "wheels", runtime_reqs, example_reqs):
        progress(f"built the dependency wheels in {context / 'wheels'}")
    if base_image is None and engine.name == "podman":
        base_image = ensure_debian_base(engine, progress)
    base_id = engine.inspect(base_image, "{{.Id}}") if base_image else "python:3.11-slim"
    wheels = sorted(p.name for p in (context / "wheels").glob("*.whl"))
    targets = [("runtime", tag)] + ([("examples", EXAMPLES_IMAGE)] if examples else [])
    images: dict[str, str] = {}
    reused = True
    for target, reference in targets:
        digest = hashlib.sha256(
            "\n".join(
                [
                    target,
                    dockerfile.read_text(),
                    _wheel_content_digest(wheel),
                    base_id,
                    (context / "wheels" / ".complete").read_text(),
                    *wheels,
                ]
            ).encode()
        ).hexdigest()
        if engine.label(reference, INPUTS_LABEL) == digest:
            progress(f"{reference} is up to date")
        else:
            reused = False
            progress(f"building {reference} with {engine.name} (target {target})")
            args = ["build", "--network=none", "-f", str(dockerfile), "--target", target]
            args += ["--label", f"{INPUTS_LABEL}={digest}"]
            args += ["--label", f"{VERSION_LABEL}={__version__}"]
            if base_image:
                args += ["--build-arg", f"BASE_IMAGE={base_image}"]
            engine.run(*args, "-t", reference, str(context))
        images[reference] = engine.inspect(reference, "{{.Id}}")
    remember(ImageRecord(tag, ImageKind.BUILT, __version__, images[tag]))
    return BuildResult(images, reused)


def push_image(
    destination: str,
    *,
    engine: Engine | None = None,
    source: str = RUNTIME_IMAGE,
    tls_verify: bool = True,
) -> ImageRecord:
    """Tag the built runtime image as ``destination``, push it, and record the push.

    Args:
        destination: ``HOST/PATH:TAG``, such as
            ``us-central1-docker.pkg.dev/PROJECT/REPO/kfp-spot:0.1.0``.
        engine: podman or docker (default: :func:`detect_engine`).
        source: the local image to push (default: this version's runtime image).
        tls_verify: False for a plain-HTTP registry on loopback (podman only).

    Returns:
        The record written (with the digest the registry answered).

    Raises:
        ImageBuildError: the destination is not a registry reference, the source image was not
            built from this kfp-spot version, or the push failed.
    """
    _host, slash, rest = destination.partition("/")
    if not slash or ":" not in rest or any(c.isspace() for c in destination):
        raise ImageBuildError(
            f"destination {destination!r} is not a registry reference HOST/PATH:TAG, such as "
            f"'us-central1-docker.pkg.dev/PROJECT/REPO/kfp-spot:{__version__}'"
        )
    engine = engine or detect_engine()
    version = engine.label(source, VERSION_LABEL)
    if version is None:
        raise ImageBuildError(f"{source} is not built: run `make image` first")
    if version != __version__:
        raise ImageBuildError(
            f"{source} holds kfp-spot {version}, not {__version__}: run `make image` again"
        )
    engine.run("tag", source, destination)
    with tempfile.TemporaryDirectory() as tmp:
        if engine.name == "podman":
            digest_file = Path(tmp) / "digest"
            flags = [] if tls_verify else ["--tls-verify=false"]
            engine.run("push", *flags, "--digestfile", str(digest_file), destination, capture=False)
            digest = digest_file.read_text().strip()
        else:
            engine.run("push", destination, capture=False)
            repo_digests = engine.inspect(destination, '{{join .RepoDigests "\\n"}}')
            digest = next((d.split("@", 1)[1] for d in repo_digests.splitlines() if "@" in d), "")
    record = ImageRecord(
        destination, ImageKind.PUSHED, version, engine.inspect(destination, "{{.Id}}"), digest
    )
    remember(record)
    return record
