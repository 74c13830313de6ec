"""Turn any supported source into a project directory that ``python -m build`` can build.

Supported sources: a project directory (pyproject.toml or setup.py; a setup.cfg beside), a bare
package directory (has ``__init__.py``), a single ``.py`` script, and a source archive
(``.tar.gz``, ``.tgz``, ``.tar``, ``.zip``) — each as a local path, and gs:// for archives,
scripts and directories. The source is always copied into a private work directory first, so the
build never writes into the user's tree and stale ``build/`` or ``*.egg-info`` folders cannot
leak in.

Why one module: every source kind ends in the same project tree through the same copy, link and
size checks; one module keeps those safety checks in one place instead of one per kind.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import os
import posixpath
import re
import shutil
import stat
import tarfile
import unicodedata
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from kfp_spot import fs, vertex
from kfp_spot.archives import UnsafeMemberError, extract_member
from kfp_spot.packaging.errors import MissingProjectFileError, PackagingError, SourceError

PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
# What a source archive may expand to: training code and its package data, not a data set. An
# archive past either limit is refused before anything past the limit is written.
MAX_ARCHIVE_BYTES = 256 * 1024 * 1024
MAX_ARCHIVE_MEMBERS = 20_000
# Never part of a package: VCS data, caches, virtual environments, earlier build outputs.
_IGNORED_NAMES = {
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".ipynb_checkpoints",
    ".DS_Store",
    "__MACOSX",  # the AppleDouble copies a zip made by macOS Finder holds beside the folder
}
_APPLE_DOUBLE_MAGIC = b"\x00\x05\x16\x07"
"""How an AppleDouble file (``._NAME``, the extended attributes macOS's tar and zip store
beside ``NAME``) starts."""
LOCAL_RUNS_DIR = "kfp-spot-runs"
"""Where ``kfp-spot run`` puts its run directories by default (in the working directory)."""
# Never part of a package at its top: build outputs, and the local runs of `kfp-spot run --source .`
# (their checkpoints, emulator state and logs; gigabytes the copy would carry into every build).
_IGNORED_TOP_LEVEL = {"build", "dist", LOCAL_RUNS_DIR}
_IGNORED_SUFFIXES = (".pyc", ".pyo", ".egg-info")
_DIST_NAME_RE = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)


@dataclass(frozen=True)
class ProjectTree:
    """A buildable project directory made from the user's source.

    Attributes:
        path: the project directory (inside the work directory).
        kind: ``project``, ``module``, ``script`` (optionally ``+archive``/``+gs``).
        python_module: the module a job runs, when the source kind fixes it ("" otherwise).
        generated: whether kfp-spot wrote the pyproject.toml.
    """

    path: Path
    kind: str
    python_module: str
    generated: bool


DIST_NAME_FORM = (
    "ASCII letters, digits, '.', '-' and '_', beginning and ending with a letter or digit"
)
"""What a distribution name is made of (PEP 508), as errors that refuse one say."""


def is_distribution_name(name: str) -> bool:
    """Whether ``name`` is a valid distribution (project) name."""
    return _DIST_NAME_RE.fullmatch(name) is not None


def is_module_name(name: str) -> bool:
    """Whether ``name`` is a dotted Python module name of identifiers (no keywords)."""
    return vertex.is_module_name(name) and not any(keyword.iskeyword(p) for p in name.split("."))


MODULE_FORM = "a dotted module name like trainer.task"
"""The form of a ``python_module``, as errors that refuse one name it."""
ENTRY_POINT_FORM = "module:function (e.g. trainer.evaluate:evaluate)"
"""The form of an evaluation entry point, as errors that refuse one name it."""


def is_entry_point(value: Any) -> bool:
    """Whether ``value`` reads as ``module:function`` (an evaluation entry point).

    The packaging floor holds the rule so that prepare_package can check the one a project's
    pyproject.toml names; the evaluation that imports it checks with the same rule.
    """
    module, sep, function = (value if isinstance(value, str) else "").partition(":")
    return bool(sep) and is_module_name(module) and function.isidentifier()


def normalize_name(name: str) -> str:
    """The PEP 503 normalized form of a distribution name (used in staging paths)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def is_archive(name: str) -> bool:
    """Whether a file of this name is a source archive prepare_package unpacks."""
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def _is_apple_double(path: Path) -> bool:
    """Whether ``path`` is macOS metadata (``._NAME``, AppleDouble), not a file of the source.

    macOS's tar stores a file's extended attributes as ``._NAME`` beside it, and its unzip-less
    copies keep them: binary, so a ``._train.py`` would fail the package's compile check.
    """
    if not path.name.startswith("._") or path.is_symlink() or not path.is_file():
        return False
    try:
        with path.open("rb") as handle:
            return handle.read(len(_APPLE_DOUBLE_MAGIC)) == _APPLE_DOUBLE_MAGIC
    except OSError:  # unreadable: the copy says so
        return False


def _ignore(root: str) -> Callable[[str, list[str]], set[str]]:
    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n in _IGNORED_NAMES or n.endswith(_IGNORED_SUFFIXES)}
        skipped |= {n for n in names if _is_apple_double(Path(directory, n))}
        if os.path.abspath(directory) == os.path.abspath(root):
            skipped |= {n for n in names if n in _IGNORED_TOP_LEVEL}
        return skipped

    return ignore


def _special_kind(path: Path) -> str | None:
    """What ``path`` (followed if a link) is when it is neither a file nor a folder, else None."""
    try:
        mode = path.stat().st_mode
    except OSError:  # gone or unreadable: the copy says so
        return None
    for test, kind in (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return None


def check_links(src: Path, label: str) -> None:
    """Refuse a link under ``src`` that leaves it, is broken or loops back, and a special file.

    A special file (a named pipe, a socket, a device) has no content to package. Links inside
    the tree are followed by the copy (their target's content is packaged); one that points
    outside would package a file the source does not hold, so it is an error, as it is in an
    archive. Two paths that differ only in case are refused too (:func:`case_collision`).
    Ignored folders (``.venv``, ``.git``, ...) are not looked at: they are never copied.

    Raises:
        SourceError: naming the link and its target, the special file, or the two paths.
    """
    root = Path(os.path.realpath(src))
    ignore = _ignore(str(src))
    seen: list[str] = []
    for directory, dirs, files in os.walk(src):
        skipped = ignore(directory, [*dirs, *files])
        dirs[:] = [d for d in dirs if d not in skipped]
        for name in [*dirs, *files]:
            path = Path(directory, name)
            if name in skipped:
                continue
            rel = path.relative_to(src).as_posix()
            seen.append(rel)
            if path.is_symlink():
                _check_link(path, rel, root, label)
            kind = _special_kind(path)  # a link's target: the copy follows it
            if kind:
                raise SourceError(
                    "source",
                    f"{label} holds {rel}, {kind}: special files cannot be packaged; remove it "
                    "or move it out of the source",
                )
    _refuse_case_collision(case_collision(seen), label)


def case_collision(paths: Iterable[str]) -> tuple[str, str] | None:
    """The first two of ``paths`` (``/``-separated) that are one path on a case-insensitive disk.

    macOS's and Windows' disks ignore case and Unicode normalization by default: unpacked or
    checked out there, ``trainer/Model.py`` and ``trainer/model.py`` (or the folders ``Trainer/``
    and ``trainer/``) become one, and the package built there silently lacks one of them. Folders
    count as the paths of their files do; the same path twice is no collision. None without any.
    """
    seen: dict[str, str] = {}
    for path in paths:
        found = _fold_in(seen, path)
        if found is not None:
            return found
    return None


def _fold_in(seen: dict[str, str], path: str) -> tuple[str, str] | None:
    """Add ``path`` and its folders to ``seen`` (folded -> as given); the collision it makes."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    for end in range(1, len(parts) + 1):
        prefix = "/".join(parts[:end])
        other = seen.setdefault(unicodedata.normalize("NFC", prefix).casefold(), prefix)
        if other != prefix:
            return other, prefix
    return None


def _refuse_case_collision(found: tuple[str, str] | None, label: str) -> None:
    if found is not None:
        raise SourceError(
            "source",
            f"{label} holds {found[0]} and {found[1]}, which differ only in case or Unicode "
            "form: on a case-insensitive disk (macOS, Windows) they are one, and a package "
            "built there would lack one of them; rename one",
        )


def _check_link(path: Path, rel: str, root: Path, label: str) -> None:
    target = os.readlink(path)
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(root):
        raise SourceError(
            "source",
            f"{label} holds a link that leaves the source tree: {rel} -> {target}; "
            "copy the file into the source instead (links outside are never packaged)",
        )
    if not real.exists():
        raise SourceError("source", f"{label} holds a broken link: {rel} -> {target}")
    if real.is_dir() and Path(os.path.realpath(path.parent)).is_relative_to(real):
        raise SourceError(
            "source", f"{label} holds a link to its own parent folder: {rel} -> {target}"
        )


def _copy_tree(src: Path, dest: Path, label: str | None = None) -> None:
    check_links(src, label or str(src))
    try:
        shutil.copytree(src, dest, ignore=_ignore(str(src)), symlinks=False)
    except (shutil.Error, OSError) as exc:
        raise SourceError("source", f"{src} is not readable: {exc}") from exc


def _fetch_remote(uri: str, workdir: Path) -> Path:
    filesystem, path = fs.filesystem(uri)
    try:
        exists = filesystem.exists(path)
        is_dir = exists and filesystem.isdir(path)
    except OSError as exc:
        raise SourceError("source", f"{uri} is not readable: {exc}") from exc
    if not exists:
        raise SourceError("source", f"{uri} does not exist")
    dest = workdir / "download" / path.rstrip("/").rsplit("/", 1)[-1]
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        if is_dir:
            filesystem.get(path.rstrip("/") + "/", str(dest), recursive=True)
        else:
            filesystem.get_file(path, str(dest))
    except OSError as exc:
        raise SourceError("source", f"{uri} is not readable: {exc}") from exc
    return dest


def _too_big(label: str, what: str) -> SourceError:
    return SourceError(
        "source",
        f"{label} expands to {what}; a source archive may hold at most "
        f"{MAX_ARCHIVE_MEMBERS} members and {MAX_ARCHIVE_BYTES // 2**20} MiB (training code, not "
        "data: read data sets from Cloud Storage at run time)",
    )


def _check_zip(zf: zipfile.ZipFile, label: str) -> None:
    members = zf.infolist()
    if len(members) > MAX_ARCHIVE_MEMBERS:
        raise _too_big(label, f"{len(members)} members")
    total = 0
    for info in members:
        parts = Path(info.filename).parts
        if info.filename.startswith(("/", "\\")) or ".." in parts:
            raise SourceError(
                "source", f"{label} holds an unsafe path {info.filename!r}; refusing it"
            )
        if stat.S_ISLNK(info.external_attr >> 16):
            target = zf.read(info)[:200].decode("utf-8", "replace")
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(info.filename), target))
            leaves = target.startswith("/") or resolved == ".." or resolved.startswith("../")
            raise SourceError(
                "source",
                f"{label} holds a link {info.filename} -> {target}"
                + (
                    " that leaves the source tree"
                    if leaves
                    else " (a zip cannot hold links: it would unpack as a file holding the name)"
                )
                + "; put the file itself in the archive",
            )
        total += info.file_size  # zipfile never inflates a member past its recorded size
        if total > MAX_ARCHIVE_BYTES:
            raise _too_big(label, f"more than {MAX_ARCHIVE_BYTES // 2**20} MiB")
    _refuse_case_collision(case_collision(info.filename for info in members), label)


def _safe_tar_members(tf: tarfile.TarFile, label: str) -> Iterator[tarfile.TarInfo]:
    count = total = 0
    seen: dict[str, str] = {}
    while (member := tf.next()) is not None:
        count += 1
        total += max(member.size, 0) if member.isfile() else 0
        if count > MAX_ARCHIVE_MEMBERS:
            raise _too_big(label, f"more than {MAX_ARCHIVE_MEMBERS} members")
        if total > MAX_ARCHIVE_BYTES:
            raise _too_big(label, f"more than {MAX_ARCHIVE_BYTES // 2**20} MiB")
        _refuse_case_collision(_fold_in(seen, member.name), label)  # before it is written
        yield member


def _extract(archive: Path, dest: Path, label: str) -> Path:
    dest.mkdir(parents=True)
    name = archive.name.lower()
    try:
        if name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                _check_zip(zf, label)
                zf.extractall(dest)
        else:
            with tarfile.open(archive) as tf:
                # Members are read one by one and the limits checked before each is written, so
                # a bomb stops at the limit; the data filter refuses links and paths that leave
                # the folder, devices, and absolute names.
                for member in _safe_tar_members(tf, label):
                    extract_member(tf, member, dest)
    except UnsafeMemberError as exc:
        raise SourceError("source", f"{label} holds an unsafe member: {exc}") from exc
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        reason = " ".join(str(exc).split())  # one line: tarfile's spans one per method tried
        raise SourceError(
            "source",
            f"{label} is not a readable {archive.name.split('.', 1)[-1]} archive: {reason}",
        ) from exc
    entries = [
        p for p in dest.iterdir() if p.name not in _IGNORED_NAMES and not _is_apple_double(p)
    ]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]  # the usual <name>-<version>/ top folder
    return dest


def extract_archive(archive: Path, dest: Path, label: str) -> Path:
    """Unpack the local source ``archive`` into the new folder ``dest``, as prepare_package does.

    Returns:
        The folder its source is in: its single top folder, else ``dest``.

    Raises:
        SourceError: an unsafe member, a limit passed, or an archive that does not read;
            ``label`` names it.
    """
    return _extract(archive, dest, label)


def check_requirements(requirements: Sequence[str]) -> list[str]:
    """``requirements`` stripped; PackagingError naming the first that is not PEP 508."""
    out = []
    for i, req in enumerate(requirements):
        if not isinstance(req, str) or not req.strip():
            raise PackagingError("requirements", f"entry {i} is empty or not a string: {req!r}")
        try:
            Requirement(req)
        except InvalidRequirement as exc:
            # packaging's message goes on with the requirement and a caret under the fault:
            # its first line is the reason (the task's error stays one line).
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise PackagingError(
                "requirements", f"{req!r} is not a PEP 508 requirement ({reason})"
            ) from exc
        out.append(req.strip())
    return out


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _write_pyproject(
    project: Path,
    *,
    name: str,
    version: str,
    requirements: Sequence[str],
    packages: Sequence[str] = (),
    py_modules: Sequence[str] = (),
    python_module: str,
) -> None:
    # json.dumps yields valid TOML basic strings and arrays for these plain values.
    lines = [
        "# Generated by kfp-spot prepare_package for a source without a project file.",
        "[build-system]",
        'requires = ["setuptools>=61"]',
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        f"name = {json.dumps(name)}",
        f"version = {json.dumps(version)}",
        f"dependencies = {json.dumps(list(requirements))}",
        "",
        "[tool.setuptools]",
        "include-package-data = true",
    ]
    if packages:
        lines.append(f"packages = {json.dumps(sorted(packages))}")
    if py_modules:
        lines.append(f"py-modules = {json.dumps(sorted(py_modules))}")
    lines += ["", "[tool.kfp-spot]", f"python-module = {json.dumps(python_module)}", ""]
    (project / "pyproject.toml").write_text("\n".join(lines))
    if packages:
        tops = sorted({p.split(".")[0] for p in packages})
        manifest = [f"graft {t}" for t in tops] + ["global-exclude *.py[cod]", ""]
        (project / "MANIFEST.in").write_text("\n".join(manifest))


def _generated_version(content_root: Path, version: str) -> str:
    # No project file, so no version: name the build by its content instead of a fixed "0.1".
    return version or f"0.0.0+src{_tree_digest(content_root)[:12]}"


def _from_module_dir(
    src: Path,
    workdir: Path,
    python_module: str,
    name: str,
    version: str,
    requirements: list[str],
    label: str,
) -> ProjectTree:
    package = src.resolve().name  # `--source .` names the folder it is in
    problem = bare_package_name_problem(src, label)
    if problem:
        raise SourceError("source", problem)
    if not python_module:
        problem = bare_package_module_problem(src, python_module, label)
        if problem:
            raise PackagingError("python_module", problem)
        python_module = package
    if python_module.split(".")[0] != package:
        raise PackagingError(
            "python_module",
            f"{python_module!r} is not inside the package {package!r} that {label} holds",
        )
    project = workdir / "project"
    project.mkdir(parents=True)
    _copy_tree(src, project / package)
    packages = [
        ".".join(p.parent.relative_to(project).parts)
        for p in sorted((project / package).rglob("__init__.py"))
    ]
    _write_pyproject(
        project,
        name=name or package.replace("_", "-"),
        version=_generated_version(project / package, version),
        requirements=requirements,
        packages=packages,
        python_module=python_module,
    )
    return ProjectTree(project, "module", python_module, True)


def script_module_problem(src: Path, python_module: str) -> str | None:
    """Why the script ``src`` cannot become the job's module, or None.

    Without ``python_module`` it becomes the module its name says, which must be one
    (``train_house.py``, not ``train-house v2.py``). Shared by prepare_package and the local
    run, which refuses it before the run starts.
    """
    if python_module or is_module_name(src.stem):
        return None
    return (
        f"the script name {src.name!r} is not a module name; pass python_module "
        "(e.g. trainer.task) to name the module the script becomes"
    )


def _from_script(
    src: Path, workdir: Path, python_module: str, name: str, version: str, requirements: list[str]
) -> ProjectTree:
    if problem := script_module_problem(src, python_module):
        raise PackagingError("python_module", problem)
    python_module = python_module or src.stem
    project = workdir / "project"
    project.mkdir(parents=True)
    parts = python_module.split(".")
    target = project.joinpath(*parts[:-1], parts[-1] + ".py")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copyfile(src, target)
    except OSError as exc:
        raise SourceError("source", f"{src} is not readable: {exc}") from exc
    packages = []
    for depth in range(1, len(parts)):
        (project.joinpath(*parts[:depth]) / "__init__.py").touch()
        packages.append(".".join(parts[:depth]))
    _write_pyproject(
        project,
        name=name or parts[0].replace("_", "-"),
        version=_generated_version(project, version),
        requirements=requirements,
        packages=packages,
        py_modules=[] if packages else [python_module],
        python_module=python_module,
    )
    return ProjectTree(project, "script", python_module, True)


def missing_source(source: str) -> str:
    """The refusal of a local source path that does not exist.

    A path written with ``~`` (a Python caller's ``"~/code/trainer"``) is taken as it is, as
    by ``open()``: only a shell expands it, so the message says how.
    """
    if source.startswith("~"):
        return (
            f"{source} does not exist: '~' is expanded only by a shell; pass "
            "os.path.expanduser(...) of it, or the full path"
        )
    return f"{source} does not exist"


def requirements_problem(src: Path, label: str, requirements: Sequence[str]) -> str | None:
    """Why ``requirements`` cannot go with the source directory ``src``, or None.

    A project (a project file at its top) declares its own dependencies; ``requirements`` are
    for a bare package or a script, which prepare_package generates a project for.
    """
    if requirements and any((src / f).is_file() for f in PROJECT_FILES):
        return (
            f"{label} is a project with its own dependencies; declare them in its "
            "pyproject.toml/setup.py instead"
        )
    return None


def bare_package_name_problem(src: Path, label: str) -> str | None:
    """Why the bare package directory ``src`` cannot be built under its own name, or None.

    A bare package is installed as the package its directory names, so that name must be one
    ``import`` takes (``my-trainer`` is not). Shared by prepare_package and the local run, which
    refuses it before the run starts. ``label``: how the message names the directory.
    """
    if any((src / f).is_file() for f in PROJECT_FILES) or not (src / "__init__.py").is_file():
        return None  # a project names its own packages; a non-package is refused else
    from kfp_spot.packaging.runnable import stdlib_shadow

    package = src.resolve().name
    what = (
        f"{label} is a bare package directory (an __init__.py, no project file), which is "
        f"installed as the package its directory names, but {package!r}"
    )
    if is_module_name(package) and "." not in package:
        if stdlib_shadow(package) is None:
            return None
        return (
            f"{what} is the name of a module of Python's standard library, which comes first on "
            f"sys.path: on Vertex AI `python -m {package}.MODULE` finds Python's own {package}, "
            f"never this package; rename the directory, e.g. to {package}_trainer"
        )
    fixed = re.sub(r"\W", "_", package)
    fixed = f"_{fixed}" if not fixed or fixed[0].isdigit() or keyword.iskeyword(fixed) else fixed
    return (
        f"{what} is not a Python package name (letters, digits and '_', not starting with a "
        f"digit; no keyword): rename the directory, e.g. to {fixed}"
    )


def bare_package_module_problem(src: Path, python_module: str, label: str = "") -> str | None:
    """Why a bare package directory ``src`` needs ``python_module`` and lacks it, or None.

    Shared by prepare_package and the local run, which refuses it before the run starts.
    ``label``: how the message names the directory (default: its path).
    """
    if python_module or (src / "__main__.py").exists():
        return None
    if any((src / f).is_file() for f in PROJECT_FILES) or not (src / "__init__.py").is_file():
        return None  # a project names its module in pyproject.toml; a non-package: refused else
    package = src.resolve().name
    modules = sorted(
        f"{package}.{'.'.join(p.relative_to(src).with_suffix('').parts)}"
        for p in src.rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    )
    if (src / "task.py").is_file() or not modules:
        which = f"e.g. {package}.task"
    else:  # no task module to suggest: the ones it holds
        more = ", ..." if len(modules) > 10 else ""
        which = f"one of its modules ({', '.join(modules[:10])}{more})"
    return (
        f"required for the bare package directory {label or src}: the module the job runs, {which}"
    )


def requirements_file_note(src: Path, requirements: Sequence[str]) -> str | None:
    """A note naming a ``requirements.txt`` beside a script or a bare package, which is not read.

    Such a source gets its dependencies from ``requirements`` only (pip on the VM installs what
    the package declares), so the file's lines are shown as the value to pass.
    """
    if requirements or not src.exists() or any((src / f).is_file() for f in PROJECT_FILES):
        return None
    from kfp_spot.vertex.pipeline_parameters import set_parameter  # a local run's only

    if src.is_file():
        folders = [src.parent] if src.suffix == ".py" else []
    else:
        folders = [src, src.parent] if (src / "__init__.py").is_file() else []
    for found in (f / "requirements.txt" for f in folders):
        if found.is_file():
            lines = found.read_text(encoding="utf-8", errors="replace").splitlines()
            named = [r for r in (line.split("#")[0].strip() for line in lines) if r and r[0] != "-"]
            return (
                f"{found} is not read: a script or a bare package declares its dependencies with "
                f"the requirements parameter: {set_parameter('requirements', json.dumps(named))}"
            )
    return None


def _classify_dir(
    src: Path,
    workdir: Path,
    label: str,
    python_module: str,
    name: str,
    version: str,
    requirements: list[str],
    bare_label: str = "",
) -> ProjectTree:
    if problem := source_directory_problem(src, label):
        raise MissingProjectFileError("source", problem)
    if any((src / f).is_file() for f in PROJECT_FILES):
        if refused := requirements_problem(src, label, requirements):
            raise PackagingError("requirements", refused)
        project = workdir / "project"
        _copy_tree(src, project)
        return ProjectTree(project, "project", "", False)
    return _from_module_dir(
        src, workdir, python_module, name, version, requirements, bare_label or label
    )


def source_file_problem(path: Path, label: str) -> str:
    """Why file ``path`` is no source prepare_package builds, or ``""`` when it is one.

    A source file is a ``.py`` script or a source archive, and a regular file: a FIFO (a
    ``script.py`` or ``<(...)`` named pipe) would hang its reader, a device never end.
    ``label``: how the message names it.
    """
    if not path.is_file():
        return (
            f"{label} is neither a directory nor a regular file (a FIFO, socket or device): give "
            "a project directory, a .py script or a source archive"
        )
    if path.suffix == ".py" or is_archive(path.name):
        return ""
    return (
        f"{label} is a file but neither a .py script nor a source archive "
        f"({', '.join(ARCHIVE_SUFFIXES)})"
    )


def source_directory_problem(src: Path, label: str) -> str:
    """Why directory ``src`` is no source prepare_package builds, or ``""`` when it is one.

    ``label``: how the message names the directory. A setup.cfg alone is no project pip or
    PyPA build takes: both need a pyproject.toml or a setup.py beside it.
    """
    if (src / "setup.cfg").is_file() and not any(
        (src / f).is_file() for f in ("pyproject.toml", "setup.py")
    ):
        return (
            f"{label} has a setup.cfg but neither a pyproject.toml nor a setup.py, which pip and "
            "the build need to take it as a project (\"neither 'setup.py' nor 'pyproject.toml' "
            'found"): add a pyproject.toml holding [build-system] requires = '
            '["setuptools>=61"] and build-backend = "setuptools.build_meta"; the setup.cfg '
            "is read as before"
        )
    if any((src / f).is_file() for f in PROJECT_FILES) or (src / "__init__.py").is_file():
        return ""
    return (
        f"{label} has no project file ({', '.join(PROJECT_FILES)}) and is not a Python package "
        "(no __init__.py): add a pyproject.toml, or pass the package directory or a single .py "
        "script"
    )


def materialize(
    source: str,
    workdir: Path,
    *,
    python_module: str = "",
    name: str = "",
    version: str = "",
    requirements: Sequence[str] = (),
) -> ProjectTree:
    """Copy or generate a buildable project for ``source`` under ``workdir``.

    Args:
        source: a local path or gs:// URI of a project directory, bare package directory,
            ``.py`` script or source archive.
        workdir: an empty private directory.
        python_module: the module the job runs (needed for bare packages; names the module a
            script becomes).
        name: distribution name for generated projects (default: from the package or script).
        version: version for generated projects (default: ``0.0.0+src<content digest>``).
        requirements: dependencies for generated projects (PEP 508 strings).

    Returns:
        The project tree.

    Raises:
        SourceError: the source is missing, unreadable or of an unsupported kind.
        MissingProjectFileError: a directory without project file that is no package either.
        PackagingError: a bad ``python_module``, ``name``, ``version`` or ``requirements``.
    """
    if not isinstance(source, str) or not source.strip():
        raise SourceError(
            "source", "is empty: pass a project directory, package directory, script or archive"
        )
    if python_module and not is_module_name(python_module):
        raise PackagingError("python_module", f"{python_module!r} is not {MODULE_FORM}")
    if name and not _DIST_NAME_RE.fullmatch(name):
        raise PackagingError("name", f"{name!r} is not a valid distribution name")
    reqs = check_requirements(requirements)
    source = source.strip()
    if fs.is_remote(source):
        if not source.startswith("gs://"):
            raise SourceError("source", f"{source}: only local paths and gs:// URIs are supported")
        local = _fetch_remote(source, workdir)
        kind_suffix = "+gs"
    else:
        local = Path(fs.to_local_path(source) or source)
        kind_suffix = ""
        try:
            exists = local.exists()
        except OSError as exc:  # a name longer than the filesystem takes (ENAMETOOLONG)
            raise SourceError("source", f"{vertex.show(source)}: {exc.strerror}") from None
        if not exists:
            raise SourceError("source", missing_source(source))
        if not os.access(local, os.R_OK) or (local.is_dir() and not os.access(local, os.X_OK)):
            raise SourceError("source", f"{source} is not readable (permission denied)")
    args = (python_module, name, version, reqs)
    if not local.is_dir() and (problem := source_file_problem(local, source)):
        raise SourceError("source", problem)
    if local.is_dir():
        tree = _classify_dir(local, workdir, source, *args)
    elif local.suffix == ".py":
        tree = _from_script(local, workdir, *args)
    elif is_archive(local.name):
        root = _extract(local, workdir / "extracted", source)
        # a bare package in it is named by the archive, not by the folder it was unpacked to
        top = f"{source}'s {root.name}/" if root != workdir / "extracted" else ""
        tree = _classify_dir(root, workdir, f"the archive {source}", *args, bare_label=top)
        kind_suffix += "+archive"
    else:  # refused above
        raise SourceError("source", source_file_problem(local, source))
    return ProjectTree(tree.path, tree.kind + kind_suffix, tree.python_module, tree.generated)
