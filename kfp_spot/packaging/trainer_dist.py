"""The light ``kfp-spot-trainer`` wheel: what training code imports from kfp-spot, for the VM.

A ``pythonPackageSpec`` job runs in one of Google's prebuilt images, which hold no kfp-spot; only
the package URIs are pip-installed. So that ``import kfp_spot.trainer`` works there,
:func:`build_trainer_wheel` packs the part of the installed ``kfp_spot`` that the trainer needs
into a pure-Python wheel, and prepare_package stages it next to the training package and appends
it to ``package_uris``.

What goes in is computed, not listed: every module of ``kfp_spot.trainer`` and, transitively, every
``kfp_spot`` module they import (at any depth, also inside functions), with the parent packages.

Its requirements are **declared, not discovered**: :data:`REQUIREMENTS` (what the trainer's core
needs on every VM), pinned as the full ``kfp-spot`` pins them, and the ``gcs`` extra. Nothing else,
whatever is installed where the wheel is built, so its bytes and METADATA depend only on kfp-spot's
own files. Every other third-party import of the shipped modules must be optional (under
``if TYPE_CHECKING:`` or guarded by ``except ImportError``) or a :data:`BRING_YOUR_OWN` framework:
the framework integrations and the state adapters import their framework only when used, and the
training package (or its executor image) brings it, at the version it chose. A new import that is
neither is a kfp-spot bug, refused when the wheel is built (and by its tests).

The wheel is built once per content: :func:`cached_trainer_wheel` keeps it under a key made of the
digest of the files it ships, its METADATA and the code that builds it.

Both distributions provide the import package ``kfp_spot``, so they never share an environment:
on the VM only the light one exists; wherever the full ``kfp-spot`` is installed (the component
image, the emulator host) the light one is skipped (:func:`is_light_distribution_file` tells it
apart; ``kfp_spot.envcache`` skips it in host-view environments, and prepare_package does not add
it to a package that declares ``kfp-spot`` itself).

Why one module: it is one artifact, and its parts are facts about each other: the import closure
decides the files, the files and the declared requirements make the METADATA, both make the
bytes, and the cache key is the digest of exactly those; split, each part would have to re-derive
what the others decided.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

import kfp_spot
from kfp_spot.packaging import build as _build
from kfp_spot.packaging import imports
from kfp_spot.packaging.errors import PackagingError

log = logging.getLogger(__name__)

LIGHT_DISTRIBUTION = "kfp-spot-trainer"
FULL_DISTRIBUTION = "kfp-spot"
PACKAGE = "kfp_spot"
ROOT_PACKAGES = ("kfp_spot.trainer",)
# What kfp_spot.trainer's core needs on every training VM: import name -> distribution. These are
# the wheel's only unconditional requirements (pinned as the full kfp-spot pins them). fsspec is
# pure Python and serves gs:// where no /gcs mount exists; google-crc32c checksums every file.
REQUIREMENTS = {"fsspec": "fsspec", "google_crc32c": "google-crc32c"}
# Imported by shipped modules only when a user's code needs them: the framework integrations'
# frameworks, and what the state adapters encode (code that checkpoints a NumPy array or a torch
# tensor already has NumPy or torch). The wheel never declares them: the training package or its
# executor image brings them, at the version it chose (Keras 3 on a TensorFlow <= 2.15 image
# breaks tf.keras; xgboost-cpu would replace the GPU build of an accelerator image).
BRING_YOUR_OWN = frozenset(
    {
        "numpy",
        "torch",
        "safetensors",
        "sklearn",
        "joblib",
        "tensorflow",
        "jax",
        "pandas",
        "scipy",
        "keras",
        "xgboost",
        "transformers",
        "lightning",
        "pytorch_lightning",
    }
)
# Optional features: extra name -> distributions (pinned as the full kfp-spot pins them).
EXTRAS = {"gcs": ("gcsfs",)}
# Never imported by code that runs on a training VM (import prefix -> distribution): a trainer
# module importing one is a kfp-spot bug (it would need the whole pipeline stack on the VM).
FORBIDDEN = {
    "kfp": "kfp",
    "google.cloud.aiplatform": "google-cloud-aiplatform",
    "google_cloud_pipeline_components": "google-cloud-pipeline-components",
}


@dataclass(frozen=True)
class TrainerContents:
    """What the light wheel holds.

    Attributes:
        version: its version (the installed kfp-spot's).
        files: paths inside the wheel (``kfp_spot/...``) -> local source file.
        requirements: its Requires-Dist lines (extras marked with ``extra == "..."``).
        requires_python: its Requires-Python.
    """

    version: str
    files: dict[str, Path]
    requirements: tuple[str, ...]
    requires_python: str


def package_dir() -> Path:
    """The directory of the ``kfp_spot`` package this interpreter imports."""
    return Path(kfp_spot.__file__).resolve().parent


def imports_of(source: str, module: str = "", is_package: bool = False) -> list[tuple[str, bool]]:
    """Every module ``source`` imports, as ``(absolute dotted name, optional)``.

    ``optional`` marks imports under ``if TYPE_CHECKING:`` or inside a ``try`` that catches
    ImportError (:mod:`kfp_spot.packaging.imports`). ``from a import b`` yields ``a`` and ``a.b``
    (``b`` may be a module).
    """
    return [
        (i.name, i.optional) for i in imports.imported(imports.parse(source), module, is_package)
    ]


def _closure(root: Path) -> tuple[dict[str, Path], dict[str, bool]]:
    """The kfp_spot modules the trainer needs (name -> file), third-party imports -> optional."""
    pending = [PACKAGE]
    for package in ROOT_PACKAGES:
        pkg_root = root.joinpath(*package.split(".")[1:])
        for path in sorted(pkg_root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("").parts
            name = ".".join([PACKAGE, *rel])
            pending.append(name[: -len(".__init__")] if name.endswith(".__init__") else name)
    modules: dict[str, Path] = {}
    external: dict[str, bool] = {}
    while pending:
        name = pending.pop()
        if name in modules:
            continue
        found = imports.module_file(root, name.split(".")[1:])  # root: kfp_spot's dir
        if found is None:
            continue  # ``from kfp_spot.x import attr``: attr is not a module
        modules[name] = found
        parts = name.split(".")
        pending.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages
        for imported, optional in imports_of(
            found.read_text("utf-8"), name, found.stem == "__init__"
        ):
            top = imported.split(".")[0]
            if top == PACKAGE:
                if not optional:  # a TYPE_CHECKING or guarded import is not needed to run
                    pending.append(imported)
            elif top not in sys.stdlib_module_names and top != "__future__":
                external[imported] = external.get(imported, True) and optional
    return modules, external


def _full_pins() -> tuple[dict[str, Requirement], str]:
    """The full kfp-spot's own requirements by canonical name (extras too), and Requires-Python."""
    try:
        dist = importlib_metadata.distribution(FULL_DISTRIBUTION)
    except importlib_metadata.PackageNotFoundError:
        return {}, ">=3.10"
    pins: dict[str, Requirement] = {}
    for text in dist.requires or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        pins.setdefault(canonicalize_name(req.name), req)
    meta = dist.metadata
    # PackageMetadata has no .get() before Python 3.12 (its Message does; the protocol does not).
    requires_python = meta["Requires-Python"] if "Requires-Python" in meta else ""  # noqa: SIM401
    return pins, requires_python or ">=3.10"


def _pinned(name: str, pins: dict[str, Requirement], extra: str = "") -> str:
    known = pins.get(canonicalize_name(name))
    text = f"{name}{known.specifier}" if known is not None else name
    return f'{text}; extra == "{extra}"' if extra else text


def trainer_version() -> str:
    """The version of the light wheel: the installed kfp-spot's (the pipeline's) version."""
    try:
        return importlib_metadata.version(FULL_DISTRIBUTION)
    except importlib_metadata.PackageNotFoundError:
        return kfp_spot.__version__


def _forbidden(module: str) -> str | None:
    for prefix, dist in FORBIDDEN.items():
        if module == prefix or module.startswith(prefix + "."):
            return dist
    return None


def contents(root: Path | None = None) -> TrainerContents:
    """What the light wheel holds: the trainer's import closure and the declared requirements.

    Consults no installed distribution but kfp-spot itself (its version and pins): the result is
    the same whatever else is installed.

    Raises:
        PackagingError: a shipped module imports, unguarded, a distribution that is neither
            declared nor brought by the training code (a kfp-spot bug), above all the pipeline
            stack.
    """
    root = root or package_dir()
    modules, external = _closure(root)
    undeclared: dict[str, str] = {}
    for name, optional in sorted(external.items()):
        forbidden = _forbidden(name)
        if forbidden is not None:  # guarded or not: never on a VM
            where = sorted(m for m, p in modules.items() if name in _names_in(p))
            raise PackagingError(
                "include_kfp_spot",
                f"kfp-spot's trainer modules import {name} ({forbidden}; in {', '.join(where)}), "
                "which does not belong on a training VM: this is a kfp-spot bug; pass "
                "include_kfp_spot=False and install kfp-spot in the job yourself meanwhile",
            )
        top = name.split(".")[0]
        if not optional and top not in REQUIREMENTS and top not in BRING_YOUR_OWN:
            undeclared.setdefault(top, name)
    if undeclared:
        where = sorted(m for m, p in modules.items() if set(undeclared.values()) & _names_in(p))
        raise PackagingError(
            "include_kfp_spot",
            f"kfp-spot's trainer modules ({', '.join(where)}) import "
            f"{', '.join(sorted(undeclared))}, which the kfp-spot-trainer wheel neither declares "
            "(trainer_dist.REQUIREMENTS) nor leaves to the training code (BRING_YOUR_OWN): this "
            "is a kfp-spot bug; pass include_kfp_spot=False and install kfp-spot in the job "
            "yourself meanwhile",
        )
    pins, requires_python = _full_pins()
    lines = sorted(_pinned(dist, pins) for dist in set(REQUIREMENTS.values()))
    for extra, dists in EXTRAS.items():
        lines += [_pinned(d, pins, extra) for d in dists]
    files = {
        path.relative_to(root.parent).as_posix(): path
        for path in (modules[m] for m in sorted(modules))
    }
    typed = root / "py.typed"
    if typed.is_file():
        files[f"{PACKAGE}/py.typed"] = typed
    return TrainerContents(
        trainer_version(), dict(sorted(files.items())), tuple(lines), requires_python
    )


def _names_in(path: Path) -> set[str]:
    return {name for name, _ in imports_of(path.read_text("utf-8"))}


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _metadata(spec: TrainerContents) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {LIGHT_DISTRIBUTION}",
        f"Version: {spec.version}",
        "Summary: kfp-spot's trainer library (kfp_spot.trainer and what it imports), for "
        "training VMs",
        "License: Apache-2.0",
        f"Requires-Python: {spec.requires_python}",
    ]
    lines += [f"Provides-Extra: {extra}" for extra in EXTRAS]
    lines += [f"Requires-Dist: {req}" for req in spec.requirements]
    modules = "\n".join(f"- {name}" for name in spec.files)
    body = (
        "The part of kfp-spot that training code imports, built by kfp-spot's prepare_package "
        f"from kfp-spot {spec.version} and installed on the training VM with the training "
        "package. It provides the import package kfp_spot like the full kfp-spot distribution: "
        f"never install both into one environment.\n\nFiles:\n{modules}\n"
    )
    return "\n".join(lines) + "\n\n" + body


def _stem(version: str) -> str:
    # The wheel spec's escaped ``name-version`` (file name and .dist-info directory).
    return f"{LIGHT_DISTRIBUTION.replace('-', '_')}-{re.sub(r'[^A-Za-z0-9.]+', '_', version)}"


def wheel_name(version: str) -> str:
    """The file name of the light wheel for ``version``."""
    return f"{_stem(version)}-py3-none-any.whl"


def build_trainer_wheel(
    out_dir: Path, root: Path | None = None, *, spec: TrainerContents | None = None
) -> Path:
    """Write the light wheel into ``out_dir``; the same kfp-spot always gives the same bytes.

    Args:
        out_dir: where (created).
        root: the ``kfp_spot`` package to pack (default: the one this interpreter imports).
        spec: its contents, when already computed (default: ``contents(root)``).

    Returns:
        The wheel's path.
    """
    spec = spec or contents(root)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / wheel_name(spec.version)
    dist_info = _stem(spec.version)
    entries = [(name, source.read_bytes()) for name, source in spec.files.items()]
    entries.append((f"{dist_info}.dist-info/METADATA", _metadata(spec).encode()))
    entries.append(
        (
            f"{dist_info}.dist-info/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: kfp-spot\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
    )
    entries.append((f"{dist_info}.dist-info/top_level.txt", f"{PACKAGE}\n".encode()))
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data in entries]
    record.append(f"{dist_info}.dist-info/RECORD,,")
    entries.append((f"{dist_info}.dist-info/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    _build.normalize_wheel(path)  # sorted entries, fixed times and modes: reproducible bytes
    return path


def content_key(spec: TrainerContents) -> str:
    """The hex sha256 of everything the wheel's bytes follow from.

    The files it ships (names and bytes), its METADATA, and the code that builds it (this module
    and :mod:`kfp_spot.packaging.build`, which normalizes it): equal keys, equal wheels.
    """
    digest = hashlib.sha256()
    builders = [Path(__file__), Path(_build.__file__)]
    for label, path in [*spec.files.items(), *((f"builder:{p.name}", p) for p in builders)]:
        digest.update(f"{label}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    digest.update(_metadata(spec).encode())
    return digest.hexdigest()


_INDEX_ENTRY = re.compile(r"[0-9a-f]{64}/[A-Za-z0-9_.+-]+\.whl")
"""What ``trees/<tree key>`` holds: ``<content key>/<wheel name>``."""


def _tree_key(root: Path) -> str:
    """The hex sha256 of every input of :func:`contents`: the package's sources, kfp-spot's pins.

    Hashing ~150 small files costs less than parsing the ~30 the closure needs, so this indexes
    the content key of a tree already seen.
    """
    digest = hashlib.sha256()
    labelled = [(p.relative_to(root.parent).as_posix(), p) for p in sorted(root.rglob("*.py"))]
    labelled += [("py.typed", root / "py.typed")]
    labelled += [(f"builder:{p.name}", p) for p in (Path(__file__), Path(_build.__file__))]
    for label, path in labelled:
        if path.is_file():
            digest.update(f"{label}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    pins, requires_python = _full_pins()
    digest.update(repr((sorted(map(str, pins.values())), requires_python)).encode())
    digest.update(trainer_version().encode())
    return digest.hexdigest()


def cached_trainer_wheel(cache_dir: Path, *, scratch_dir: Path, root: Path | None = None) -> Path:
    """The light wheel, built once per content and kept under ``cache_dir``.

    ``<cache_dir>/kfp-spot-trainer/<content_key>/<wheel>``, the key being :func:`content_key`
    (the digest of the files it ships, its METADATA and its builder): a later call with the same
    files returns that file without building. ``trees/<tree key>`` remembers which wheel a
    source tree gave, so a call on a tree already seen digests its files and parses nothing. The
    wheel appears whole or not at all; a cache directory that cannot be written only costs the
    build (then made in ``scratch_dir``).

    Returns:
        The wheel's path.
    """
    root = root or package_dir()
    home = cache_dir / LIGHT_DISTRIBUTION
    tree = home / "trees" / _tree_key(root)
    try:
        entry = tree.read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        entry = ""
    if _INDEX_ENTRY.fullmatch(entry) and (home / entry).is_file():
        log.debug("kfp-spot-trainer wheel from the cache: %s", home / entry)
        return home / entry
    spec = contents(root)
    key = content_key(spec)
    cached = home / key / wheel_name(spec.version)
    try:
        if not cached.is_file():
            home.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix=f".{key[:12]}-", dir=home) as tmp:
                built = build_trainer_wheel(Path(tmp) / "wheel", root, spec=spec)
                cached.parent.mkdir(exist_ok=True)
                os.replace(built, cached)  # same file system: the wheel appears whole
        tree.parent.mkdir(exist_ok=True)
        _atomic_text(tree, cached.relative_to(home).as_posix())
    except OSError as exc:
        log.info("kfp-spot-trainer wheel not cached (%s): %s", home, exc)
        return build_trainer_wheel(scratch_dir, spec=spec)
    return cached


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text + "\n", "utf-8")
    os.replace(tmp, path)


def is_light_distribution_file(path: str | Path) -> bool:
    """Whether a package file is a ``kfp-spot-trainer`` distribution (by its file name)."""
    name = Path(str(path)).name
    stem = re.split(r"-\d", name, maxsplit=1)[0]
    return canonicalize_name(stem) == LIGHT_DISTRIBUTION


def declared_by_name(requirements: Iterable[str]) -> str | None:
    """Why a requirement on ``kfp-spot-trainer`` by name cannot install on the training VM.

    The light wheel exists only as prepare_package builds it from the kfp-spot it runs; PyPI,
    where pip on a prebuilt image looks for what a package declares, holds no such distribution.
    Declared, it also stops prepare_package from adding the wheel (the package seems to bring
    its own), so the job fails at its install. None when no requirement names it without a URL.
    """
    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if not requirement.url and canonicalize_name(requirement.name) == LIGHT_DISTRIBUTION:
            return (
                f"the package declares {text!r}, which is not on PyPI: pip on the training VM "
                "would fail to install it. prepare_package builds that wheel itself and adds it "
                "to the package URIs when the code imports kfp_spot; remove it from the "
                "dependencies"
            )
    return None


def source_problem(source: object, project: Path, arguments: Mapping[str, Any]) -> str | None:
    """:func:`declared_by_name` of a local run's source before its build, as one line.

    Read from the ``requirements`` argument and a project's static ``[project]
    dependencies`` (a setup.py's are known after the build, where prepare_package refuses
    them). ``project``: the source directory, or the folder an archive ``source`` unpacks to.
    """
    from kfp_spot.packaging.imagepins import declared_requirements

    given = arguments.get("requirements")
    if isinstance(given, list) and (problem := declared_by_name(map(str, given))):
        return f"requirements: {problem}"
    static = declared_requirements(project) if project.is_dir() else None
    if static and (problem := declared_by_name(static)):
        return f"source: {problem} of {source}'s pyproject.toml"
    return None


def mentions_kfp_spot(sources: Iterable[str]) -> bool:
    """Whether any of the Python ``sources`` imports ``kfp_spot`` (then it needs the wheel)."""
    for source in sources:
        try:
            names = imports_of(source)
        except (SyntaxError, ValueError):
            continue
        if any(name.split(".")[0] == PACKAGE for name, _ in names):
            return True
    return False
