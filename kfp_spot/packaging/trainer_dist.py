"""The light ``kfp-spot-trainer`` wheel: what training code imports from kfp-spot, for the VM.

A ``pythonPackageSpec`` job runs in one of Google's prebuilt images, which hold no kfp-spot; only
the package URIs are pip-installed. So that ``import kfp_spot.trainer`` works there,
:func:`build_trainer_wheel` packs the part of the installed ``kfp_spot`` that the trainer needs
into a pure-Python wheel, and prepare_package stages it next to the training package and appends
it to ``package_uris``.

What goes in is computed, not listed: every module of ``kfp_spot.trainer`` and, transitively, every
``kfp_spot`` module they import (at any depth, also inside functions), with the parent packages.
Its requirements are the third-party modules those files import, mapped to the distributions that
provide them here and pinned as the full ``kfp-spot`` pins them, except:

- imports under ``if TYPE_CHECKING:`` or guarded by ``except ImportError`` (optional by design);
- :data:`BRING_YOUR_OWN` frameworks, imported only to encode state values of that kind (training
  code that checkpoints a NumPy array or a torch tensor already has NumPy or torch);
- the ``gcs`` extra (gcsfs), needed only for ``gs://`` paths where no Cloud Storage FUSE mount
  exists: on Vertex AI, ``kfp_spot.fs.mounted_path`` maps them to ``/gcs``.

Both distributions provide the import package ``kfp_spot``, so they never share an environment:
on the VM only the light one exists; wherever the full ``kfp-spot`` is installed (the component
image, the emulator host) the light one is skipped (:func:`is_light_distribution_file` tells it
apart; ``kfp_spot.envcache`` skips it in host-view environments, and prepare_package does not add
it to a package that declares ``kfp-spot`` itself).
"""

from __future__ import annotations

import ast
import base64
import hashlib
import logging
import re
import sys
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

import kfp_spot
from kfp_spot.packaging import build as _build
from kfp_spot.packaging.errors import PackagingError

log = logging.getLogger(__name__)

LIGHT_DISTRIBUTION = "kfp-spot-trainer"
FULL_DISTRIBUTION = "kfp-spot"
PACKAGE = "kfp_spot"
ROOT_PACKAGES = ("kfp_spot.trainer",)
# Frameworks the trainer imports only to encode or decode state values of their own kind.
BRING_YOUR_OWN = frozenset(
    {"numpy", "torch", "safetensors", "sklearn", "joblib", "tensorflow", "jax", "pandas", "scipy"}
)
# Optional features: extra name -> distributions (pinned as the full kfp-spot pins them).
EXTRAS = {"gcs": ("gcsfs",)}
# Never a requirement of code that runs on a training VM: a trainer module importing one of these
# is a kfp-spot bug (the light wheel would pull the whole pipeline stack onto the VM).
FORBIDDEN = frozenset({"kfp", "google-cloud-aiplatform", "google-cloud-pipeline-components"})
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


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


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        if handler.type is None:
            return True
        names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(n, ast.Name) and n.id in _IMPORT_ERRORS for n in names):
            return True
    return False


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join([*parts, *([name] if name else [])])


def imports_of(source: str, module: str = "", is_package: bool = False) -> list[tuple[str, bool]]:
    """Every module ``source`` imports, as ``(absolute dotted name, optional)``.

    ``optional`` marks imports under ``if TYPE_CHECKING:`` or inside a ``try`` that catches
    ImportError. ``from a import b`` yields ``a`` and ``a.b`` (``b`` may be a module).
    """
    out: list[tuple[str, bool]] = []

    def visit(node: ast.AST, optional: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit_stmt(stmt, True)
                for stmt in child.orelse:
                    visit_stmt(stmt, optional)
            elif isinstance(child, ast.Try) and _catches_import_error(child):
                for stmt in child.body:
                    visit_stmt(stmt, True)
                for part in (child.handlers, child.orelse, child.finalbody):
                    for inner in part:
                        visit_stmt(inner, optional)
            else:
                visit_stmt(child, optional)

    def visit_stmt(node: ast.AST, optional: bool) -> None:
        if isinstance(node, ast.Import):
            out.extend((alias.name, optional) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            if base:
                out.append((base, optional))
            out.extend(
                (f"{base}.{alias.name}" if base else alias.name, optional)
                for alias in node.names
                if alias.name != "*"
            )
        else:
            visit(node, optional)

    visit(ast.parse(source), False)
    return out


def _module_file(root: Path, module: str) -> Path | None:
    parts = module.split(".")[1:]
    base = root.joinpath(*parts)
    for candidate in (base / "__init__.py", base.with_suffix(".py") if parts else None):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


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
        found = _module_file(root, name)
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


def _owner(module: str, top_map: Mapping[str, list[str]]) -> str | None:
    """The distribution that provides ``module`` here (namespace packages resolved by files)."""
    top = module.split(".")[0]
    candidates = sorted(set(top_map.get(top, ())))
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    prefix = module.replace(".", "/")
    for dist_name in candidates:
        try:
            files = importlib_metadata.distribution(dist_name).files or []
        except importlib_metadata.PackageNotFoundError:
            continue
        if any(str(f).startswith((prefix + "/", prefix + ".")) for f in files):
            return dist_name
    return None


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


def contents(root: Path | None = None) -> TrainerContents:
    """Compute what the light wheel holds from the import graph of ``kfp_spot.trainer``.

    Raises:
        PackagingError: a trainer module needs a distribution no training VM should install.
    """
    root = root or package_dir()
    modules, external = _closure(root)
    pins, requires_python = _full_pins()
    top_map = importlib_metadata.packages_distributions()
    required: dict[str, str] = {}
    for name, optional in sorted(external.items()):
        if optional or name.split(".")[0] in BRING_YOUR_OWN:
            continue
        owner = _owner(name, top_map)
        if owner is None:
            log.warning(
                "kfp-spot-trainer: no installed distribution provides %s; not declared", name
            )
            continue
        canonical = canonicalize_name(owner)
        if canonical in FORBIDDEN:
            where = sorted(m for m, p in modules.items() if name in _names_in(p))
            raise PackagingError(
                "include_kfp_spot",
                f"kfp-spot's trainer modules import {name} ({owner}; in {', '.join(where)}), "
                "which does not belong on a training VM: this is a kfp-spot bug; pass "
                "include_kfp_spot=False and install kfp-spot in the job yourself meanwhile",
            )
        if canonical not in {canonicalize_name(d) for ds in EXTRAS.values() for d in ds}:
            required.setdefault(canonical, _pinned(owner, pins))
    lines = [required[k] for k in sorted(required)]
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


def build_trainer_wheel(out_dir: Path, root: Path | None = None) -> Path:
    """Write the light wheel into ``out_dir``; the same kfp-spot always gives the same bytes.

    Returns:
        The wheel's path.
    """
    spec = contents(root)
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


def is_light_distribution_file(path: str | Path) -> bool:
    """Whether a package file is a ``kfp-spot-trainer`` distribution (by its file name)."""
    name = Path(str(path)).name
    stem = re.split(r"-\d", name, maxsplit=1)[0]
    return canonicalize_name(stem) == LIGHT_DISTRIBUTION


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
