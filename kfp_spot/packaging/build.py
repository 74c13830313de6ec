"""PEP 517 builds with ``build`` and the re-packing that makes them byte-reproducible.

``build`` (PyPA's frontend, as ``python -m build`` runs it) makes the sdist, then a wheel from that
sdist (as pip would on the training VM), so a file missing from the sdist fails here and not in a
paid job. Timestamps, owners and entry order in the archives come from the file system and the
clock; :func:`normalize_sdist` and :func:`normalize_wheel` rewrite them so the same source always
gives the same bytes and therefore the same sha256.

Given a cache directory, :func:`run_build` keeps the normalized archives under
``<cache>/builds/<key>``, the key being :func:`build_key` (every file of the tree, this
interpreter, the versions of ``build``, of the build requirements and of what they require), with
what the backend asked for at build time and its versions beside them: the same source built
again with the same tools is copied from there instead of built. Isolated builds (a backend that
is not installed here) are never kept: their backend's version is the index's choice.
"""

from __future__ import annotations

import ast
import email.parser
import gzip
import hashlib
import io
import logging
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfp_spot import buildview, fs, siteview
from kfp_spot.packaging import backend, imports
from kfp_spot.packaging.errors import BuildError

if sys.version_info >= (3, 11):
    import tomllib
else:  # a dependency on Python 3.10
    import tomli as tomllib

log = logging.getLogger(__name__)

# 1980-01-01: the earliest time a zip file (a wheel) can hold.
SOURCE_DATE_EPOCH = 315532800
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_DEFAULT_BACKEND_REQUIRES = ("setuptools>=40.8.0",)
# 2: hooks see only the build requirements (buildview.make_view); a tree that built before may not.
# 3: the key covers the requirements' own requirements; an entry records what the backend asked for.
_BUILD_CACHE_FORMAT = "kfp-spot-build/3"


@dataclass(frozen=True)
class BuiltFiles:
    """The normalized archives of one build (local files)."""

    sdist: Path
    wheel: Path
    isolated: bool
    asked: dict[str, str] = field(default_factory=dict)
    """What the backend asked for at build time -> the version installed (a build here)."""


def sha256_of(path: Path) -> str:
    """The hex sha256 of a local file."""
    return fs.sha256_file(path)


def _pyproject(project: Path) -> dict[str, Any]:
    path = project / "pyproject.toml"
    if not path.exists():
        return {}
    try:
        doc: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
        return doc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BuildError("source", f"pyproject.toml is not valid TOML: {exc}") from exc


def project_table(project: Path) -> dict[str, Any]:
    """The ``[project]`` table of the project's pyproject.toml (empty when absent)."""
    table = _pyproject(project).get("project") or {}
    return dict(table) if isinstance(table, dict) else {}


def setup_py_name(project: Path) -> str | None:
    """The ``name=`` a project's setup.py gives ``setup()``, read statically (never run).

    A text given literally, or by a name the module binds once to a text at its top level
    (``NAME = "trainer"``); None when there is no setup.py or its name is computed.
    """
    path = project / "setup.py"
    tree = imports.source_tree(path, str(path)) if path.is_file() else None
    if tree is None:
        return None
    texts: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    texts.setdefault(target.id, []).append(node.value.value)
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called != "setup":
            continue
        for keyword in call.keywords:
            value = keyword.value
            if keyword.arg != "name":
                continue
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return value.value or None
            if isinstance(value, ast.Name) and len(texts.get(value.id, [])) == 1:
                return texts[value.id][0] or None
    return None


def _table(value: Any, name: str, example: str) -> dict[str, Any]:
    """``value`` (``[name]`` of pyproject.toml) as a table; anything but a table is refused.

    Raises:
        BuildError: naming the key, what it holds and what a table of it looks like.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BuildError(
            "source",
            f"pyproject.toml's {name} is {type(value).__name__} {value!r}, not a table: write "
            f"[{name}] with keys under it ({example})",
        )
    return dict(value)


def backend_requires(project: Path) -> list[str]:
    """The build-system requirements of ``project`` (setuptools' default when undeclared).

    Raises:
        BuildError: ``[build-system]`` is no table or its ``requires`` no list of strings (read
            letter by letter before, each letter a requirement).
    """
    build_system = _table(
        _pyproject(project).get("build-system"), "build-system", 'requires = ["setuptools>=77"]'
    )
    requires = build_system.get("requires")
    if requires is None:
        return list(_DEFAULT_BACKEND_REQUIRES)
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise BuildError(
            "source",
            f"pyproject.toml's [build-system] requires is {requires!r}, not a list of strings: "
            'write requires = ["setuptools>=77"]',
        )
    return list(requires)


def tool_tables(project: Path) -> dict[str, Any]:
    """The ``[tool]`` tables of the project's pyproject.toml (empty when absent)."""
    tables = _pyproject(project).get("tool") or {}
    return dict(tables) if isinstance(tables, dict) else {}


def tool_config(project: Path) -> dict[str, Any]:
    """The ``[tool.kfp-spot]`` table of the project's pyproject.toml (empty when absent).

    Raises:
        BuildError: ``tool.kfp-spot`` is no table (``kfp-spot = "trainer.task"`` under [tool]).
    """
    return _table(
        tool_tables(project).get("kfp-spot"), "tool.kfp-spot", 'python-module = "trainer.task"'
    )


def run_build(project: Path, outdir: Path, cache_dir: Path | None = None) -> BuiltFiles:
    """Build an sdist and a wheel from it, and normalize both.

    Without network when the build backend is installed here (``--no-isolation``); otherwise
    ``build`` makes an isolated environment, which needs the package index. So it does when the
    backend asks at build time for what is not installed here (or not in a version that
    satisfies it), as pip on the VM would install it.

    Args:
        project: the project tree.
        outdir: where the archives go.
        cache_dir: keep the archives under ``<cache_dir>/builds`` and take them from there
            when the same tree was built with the same tools (see the module docstring);
            None: always build.

    Raises:
        BuildError: the build failed; the message ends with the build's output.
    """
    requires = backend_requires(project)
    unmet = buildview.unmet(requires)
    key = build_key(project, requires) if cache_dir is not None and not unmet else ""
    if cache_dir is not None and key:
        cached = _cached_build(cache_dir / "builds" / key, outdir)
        if cached is not None:
            log.info("the same source was built before with the same tools: %s", key)
            return cached
    env = {"SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH), "PYTHONHASHSEED": "0"}
    asked: dict[str, str] = {}
    if not unmet:
        try:
            asked = backend.build_here(project, outdir, env, requires)
        except buildview.UnmetBuildRequirementsError as exc:
            unmet = exc.requirements
            for made in [*outdir.glob("*.tar.gz"), *outdir.glob("*.whl")]:
                made.unlink()  # the sdist built before the backend asked
    if unmet:
        backend.build_isolated(project, outdir, env, unmet)
    sdists = sorted(outdir.glob("*.tar.gz"))
    wheels = sorted(outdir.glob("*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        raise BuildError(
            "source", f"expected one sdist and one wheel, the build made {sdists + wheels}"
        )
    normalize_sdist(sdists[0])
    normalize_wheel(wheels[0])
    built = BuiltFiles(sdists[0], wheels[0], isolated=bool(unmet), asked=asked)
    if cache_dir is not None and key and not built.isolated:
        _store_build(cache_dir / "builds", key, built)
    return built


def build_key(project: Path, requires: list[str]) -> str:
    """What a build of ``project`` depends on, as a digest: every file, the builders' versions.

    Each file's path, content and executable bit (symlinks by their target), this interpreter,
    the versions of ``build``, of every build requirement installed here and of what they
    require in turn, and the fixed ``SOURCE_DATE_EPOCH``; never modification times, which the
    normalized archives do not hold. What the backend asks for at build time is known only
    once it runs: a cache entry records it (:func:`_cached_build` checks it).
    """
    digest = hashlib.sha256()

    def add(*parts: str) -> None:
        digest.update(("\0".join(parts) + "\n").encode("utf-8", "surrogateescape"))

    add(_BUILD_CACHE_FORMAT, sys.version, sys.executable, str(SOURCE_DATE_EPOCH))
    tools = ["build", *sorted(requires)]
    for text in tools:
        add("builder", text)
    needed = siteview.closure(tools, siteview.Installed(sys.path), check_versions=False)
    for name, dist in sorted(needed.found.items()):
        add("installed", name, dist.version)
    for path in sorted(project.rglob("*"), key=lambda p: p.relative_to(project).parts):
        relative = path.relative_to(project).as_posix()
        if path.is_symlink():
            add("link", relative, os.readlink(path))
        elif path.is_dir():
            add("dir", relative)
        else:
            executable = "x" if path.stat().st_mode & 0o111 else "-"
            add("file", relative, executable, fs.sha256_file(path))
    return digest.hexdigest()[:32]


def _cached_build(entry: Path, outdir: Path) -> BuiltFiles | None:
    """The archives of an earlier build from ``entry``, copied into ``outdir``; None: no hit.

    A hit also needs what the backend asked for then installed here in the same versions now
    (:func:`kfp_spot.buildview.asked_unchanged`); an entry that fails it is dropped, so the
    build made instead takes its place.
    """
    try:
        sdists, wheels = sorted(entry.glob("*.tar.gz")), sorted(entry.glob("*.whl"))
        if len(sdists) != 1 or len(wheels) != 1:
            return None
        asked = buildview.asked_unchanged(entry)
        if asked is None:
            shutil.rmtree(entry, ignore_errors=True)
            return None
        outdir.mkdir(parents=True, exist_ok=True)
        copies = [Path(shutil.copyfile(p, outdir / p.name)) for p in (sdists[0], wheels[0])]
    except (OSError, ValueError):
        return None
    return BuiltFiles(copies[0], copies[1], isolated=False, asked=asked)


def _store_build(builds: Path, key: str, built: BuiltFiles) -> None:
    """Keep ``built`` under ``builds/key``; the entry appears whole (a rename) or not at all."""
    try:
        with tempfile.TemporaryDirectory(prefix="kfp-spot-asked-") as tmp:
            record = buildview.record_asked(Path(tmp), built.asked)
            fs.keep_copies(builds, key, [built.sdist, built.wheel, record])
    except OSError as exc:
        log.info("build not cached under %s: %s", builds, exc)


def _normal_mode(member: tarfile.TarInfo) -> int:
    if member.isdir() or member.mode & 0o111:
        return 0o755
    return 0o644


def normalize_sdist(path: Path) -> None:
    """Rewrite a ``.tar.gz`` in place with sorted entries, fixed times, owners and modes."""
    with tarfile.open(path, "r:gz") as src:
        members = []
        for member in src.getmembers():
            handle = src.extractfile(member) if member.isfile() else None
            data = handle.read() if handle is not None else None
            members.append((member, data))
    buffer = io.BytesIO()
    # gzip header: no file name, mtime 0, so only the tar bytes matter.
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as dst,
    ):
        for member, data in sorted(members, key=lambda item: item[0].name):
            member.mtime = SOURCE_DATE_EPOCH
            member.uid = member.gid = 0
            member.uname = member.gname = ""
            member.mode = _normal_mode(member)
            member.pax_headers = {}
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    path.write_bytes(buffer.getvalue())


def normalize_wheel(path: Path) -> None:
    """Rewrite a wheel in place with sorted entries and fixed timestamps and modes.

    RECORD holds hashes of the files' contents, not of zip metadata, so it stays valid.
    """
    with zipfile.ZipFile(path) as src:
        entries = [(info, src.read(info)) for info in src.infolist()]
    # The wheel spec wants dist-info last (RECORD at the very end); keep that, sort the rest.
    entries.sort(
        key=lambda item: (
            ".dist-info/" in item[0].filename,
            item[0].filename.endswith(".dist-info/RECORD"),
            item[0].filename,
        )
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info, data in entries:
            fresh = zipfile.ZipInfo(info.filename, date_time=_ZIP_DATE)
            fresh.compress_type = zipfile.ZIP_DEFLATED
            executable = (info.external_attr >> 16) & 0o111
            fresh.external_attr = (0o755 if executable else 0o644) << 16
            dst.writestr(fresh, data, compresslevel=9)
    path.write_bytes(buffer.getvalue())


@dataclass(frozen=True)
class WheelFacts:
    """What a built wheel says about the package."""

    name: str
    version: str
    requirements: tuple[str, ...]
    files: tuple[str, ...]


def wheel_facts(wheel: Path) -> WheelFacts:
    """Name, version, requirements and file list of a wheel."""
    with zipfile.ZipFile(wheel) as zf:
        names = tuple(zf.namelist())
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.parser.BytesParser().parsebytes(zf.read(meta_name))
    return WheelFacts(
        name=str(meta["Name"]),
        version=str(meta["Version"]),
        requirements=tuple(str(r) for r in (meta.get_all("Requires-Dist") or [])),
        files=names,
    )


def read_wheel_file(wheel: Path, name: str) -> bytes:
    """The bytes of one file inside a wheel."""
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(name)
