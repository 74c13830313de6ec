"""Build the runtime image from a source checkout with podman or docker, and push it.

The image is always linux/amd64 with CPython 3.11 (what Vertex AI runs), whatever the host's CPU
and Python are. The build needs no registry inside the image build: the host downloads every
package :data:`~kfp_spot.image.lock.LOCK_FILE` pins, as the wheel for the image's platform
(``pip download --platform ... --python-version 3.11``; a package with only a source distribution
is built on the host and must be pure Python) into ``build/image/``, the build context of the
top-level ``Dockerfile``; the image installs exactly the lock with ``--no-index``. With podman and
no base image given, the base is a Debian ``bookworm`` root made with ``debootstrap`` and imported
once (:data:`DEBIAN_BASE`, on an x86_64 host only), so nothing is pulled either. With docker the
Dockerfile's default base ``python:3.11-slim`` is pulled for linux/amd64.

A build is skipped when the image already carries the digest of its inputs (the Dockerfile, the
kfp-spot wheel's file list and hashes, the locked dependency wheels and the base image ID), so a
second ``make image`` costs seconds. The built image is inspected: one that is not linux/amd64 is
an error, and its platform and digest go into the build record.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kfp_spot.image.lock import IMAGE_PLATFORM, LOCK_FILE, LockError, check_lock
from kfp_spot.image.records import ImageKind, ImageRecord, remember
from kfp_spot.image.wheels import (
    ImageBuildError,
    build_dependency_wheels,
    build_wheel,
    run_step,
    wheel_content_digest,
    wheel_requirements,
)
from kfp_spot.version import (
    RUNTIME_IMAGE,
    RuntimeImageError,
    __version__,
    check_image_reference,
    image_host_problem,
)

log = logging.getLogger(__name__)

DEBIAN_BASE = "localhost/kfp-spot-base:bookworm"
# The runtime image plus the example trainer's dependencies (the ``examples`` extra): what the
# container test evaluates the example trainer in. Local only; never published.
EXAMPLES_IMAGE = f"localhost/kfp-spot-examples:{__version__}"
INPUTS_LABEL = "io.kfp-spot.inputs"
VERSION_LABEL = "org.opencontainers.image.version"
_DEBOOTSTRAP_INCLUDE = "--include=python3,python3-venv,ca-certificates"


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

    def platform(self, reference: str) -> str:
        """The image's ``OS/ARCHITECTURE``, such as ``linux/amd64``."""
        return self.inspect(reference, "{{.Os}}/{{.Architecture}}")

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


def ensure_debian_base(engine: Engine, progress: Callable[[str], None]) -> str:
    """Import a Debian bookworm root with Python 3.11 as :data:`DEBIAN_BASE`, once.

    debootstrap makes a root of the host's own CPU, so this base is made on x86_64 hosts only.
    """
    if engine.image_exists(DEBIAN_BASE) and engine.platform(DEBIAN_BASE) == IMAGE_PLATFORM:
        return DEBIAN_BASE
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise ImageBuildError(
            f"this machine is {platform.machine()}, and the debootstrap base would be too; "
            f"pass --base-image python:3.11-slim (the engine pulls its {IMAGE_PLATFORM} variant) "
            "or --engine docker"
        )
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "debootstrap is not installed (`apt-get install -y debootstrap`); or pass "
            "--base-image with a Python 3.11 image your engine can pull, e.g. python:3.11-slim"
        )
    progress(f"making the base image {DEBIAN_BASE} with debootstrap (once, about a minute)")
    with tempfile.TemporaryDirectory(prefix="kfp-spot-base-") as tmp:
        root = Path(tmp) / "root"
        run_step(
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
        base_image: a Python 3.11 image to build on (its linux/amd64 variant); default: with
            podman the debootstrap base (:data:`DEBIAN_BASE`), with docker the Dockerfile's
            ``python:3.11-slim``.
        examples: also build the ``examples`` stage (the example trainer's dependencies).
        progress: where progress lines go.

    Returns:
        The images (reference -> image ID) and whether they were reused unchanged.

    Raises:
        ImageBuildError: naming the step that failed; also when the lock file is missing or out
            of date, or the image built is not linux/amd64.
    """
    source = Path(source).resolve()
    engine = engine or detect_engine()
    dockerfile = source / "Dockerfile"
    if not dockerfile.is_file():
        raise ImageBuildError(f"{dockerfile} does not exist: build from a kfp-spot checkout")
    context = source / "build" / "image"
    try:
        check_lock(source)
    except LockError as exc:
        raise ImageBuildError(str(exc)) from None
    wheel = build_wheel(source, context / "dist")
    _runtime, example_reqs = wheel_requirements(wheel)
    if build_dependency_wheels(context / "wheels", source / LOCK_FILE, example_reqs):
        progress(f"fetched the {IMAGE_PLATFORM} wheels of {LOCK_FILE} into {context / 'wheels'}")
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
                    *images.values(),  # the examples image is built on the runtime image
                    dockerfile.read_text(),
                    wheel_content_digest(wheel),
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
            args = ["build", "--network=none", "--platform", IMAGE_PLATFORM]
            args += ["-f", str(dockerfile), "--target", target]
            args += ["--label", f"{INPUTS_LABEL}={digest}"]
            args += ["--label", f"{VERSION_LABEL}={__version__}"]
            if base_image:
                args += ["--build-arg", f"BASE_IMAGE={base_image}"]
            if target == "examples":
                args += ["--build-arg", f"EXAMPLES_BASE={tag}"]
            engine.run(*args, "-t", reference, str(context))
        built_platform = engine.platform(reference)
        if built_platform != IMAGE_PLATFORM:
            raise ImageBuildError(
                f"{reference} was built as {built_platform}, but Vertex AI runs {IMAGE_PLATFORM}: "
                f"give a --base-image that has a {IMAGE_PLATFORM} variant"
            )
        images[reference] = engine.inspect(reference, "{{.Id}}")
    digest = engine.inspect(tag, "{{.Digest}}") if engine.name == "podman" else ""
    remember(
        ImageRecord(tag, ImageKind.BUILT, __version__, images[tag], digest, platform=IMAGE_PLATFORM)
    )
    return BuildResult(images, reused)


def check_push_destination(destination: str) -> str:
    """``destination`` when an image can be pushed there and compiled against: ``HOST/PATH:TAG``.

    The rule ``kfp-spot compile --base-image`` and ``KFP_SPOT_RUNTIME_IMAGE`` apply
    (:func:`kfp_spot.version.check_image_reference`): a push to a reference they refuse (an
    upper-case path, a tag without a path) left an image no template could name. A digest is
    what a push answers, not where it goes.

    Raises:
        ImageBuildError: naming the destination and an example.
    """
    example = f"'us-central1-docker.pkg.dev/PROJECT/REPO/kfp-spot:{__version__}'"
    problem = image_host_problem(destination)
    if problem is not None:  # a template repository's host, say: the push would fail there
        raise ImageBuildError(f"destination {destination!r}: {problem}")
    try:
        check_image_reference(destination, "destination")
    except RuntimeImageError:
        raise ImageBuildError(
            f"destination {destination!r} is not a registry reference HOST/PATH:TAG (lowercase "
            f"host and path), such as {example}"
        ) from None
    if "@" in destination:
        raise ImageBuildError(
            f"destination {destination!r} names a digest: push to a tag, HOST/PATH:TAG, such as "
            f"{example} (the push records the digest the registry answers)"
        )
    return destination


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
            built from this kfp-spot version or is not linux/amd64, or the push failed.
    """
    check_push_destination(destination)
    engine = engine or detect_engine()
    version = engine.label(source, VERSION_LABEL)
    if version is None:
        raise ImageBuildError(f"{source} is not built: run `make image` first")
    if version != __version__:
        raise ImageBuildError(
            f"{source} holds kfp-spot {version}, not {__version__}: run `make image` again"
        )
    source_platform = engine.platform(source)
    if source_platform != IMAGE_PLATFORM:
        raise ImageBuildError(
            f"{source} is a {source_platform} image and Vertex AI runs {IMAGE_PLATFORM} only: "
            "rebuild it with `kfp-spot image build`"
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
        destination,
        ImageKind.PUSHED,
        version,
        engine.inspect(destination, "{{.Id}}"),
        digest,
        platform=source_platform,
    )
    remember(record)
    return record
