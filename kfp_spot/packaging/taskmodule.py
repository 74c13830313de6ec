"""Which module of a package a job runs when none is named: its one ``*.task`` or ``__main__``.

The candidates are the package's ``*.task`` modules (Vertex AI's convention) and its packages
with a ``__main__``; with one, the job runs it, with several or none the module must be named
(``python_module``, ``[tool.kfp-spot] python-module``). prepare_package reads them from the
built wheel (:func:`default_module`); before the build, it and ``kfp-spot run`` read them from
the source tree (:func:`source_ambiguity`), so a package with two candidates is refused before
anything is built or started, with the message the wheel's reading would give.

The source tree is read as the wheel would hold it, never wider: the modules of its regular
packages (a directory with an ``__init__.py``, each directory of the chain), at its top or under
``src/``, less the folders setuptools' automatic discovery leaves out at the top (``tests``,
``docs``, ``examples``, ...; ``FlatLayoutPackageFinder``), and only the packages an explicit
``[tool.setuptools] packages`` list (or ``setup.cfg``'s ``[options] packages``) names. Where
the build chooses its packages by means the tree does not show (a ``setup.py``, a ``find``
table with ``include``/``exclude``, a ``package-dir``), only candidates of one package (its
``task`` beside its ``__main__``), which the wheel holds together or not at all, are refused
before the build. A candidate the build would leave out is thus never counted; a wheel holding
more than the source shows is still refused after the build.
"""

from __future__ import annotations

import configparser
import fnmatch
from collections.abc import Iterator, Sequence
from pathlib import Path

from kfp_spot.packaging import build as _build

DISCOVERY_EXCLUDED = frozenset(
    {
        *("ci", "bin", "debian", "doc", "docs", "documentation", "manpages", "news"),
        *("newsfragments", "changelog", "test", "tests", "unit_test", "unit_tests", "example"),
        *("examples", "scripts", "tools", "util", "utils", "python", "build", "dist", "venv"),
        *("env", "requirements", "tasks", "fabfile", "site_scons", "benchmark", "benchmarks"),
        *("exercise", "exercises", "htmlcov", "[._]*"),
    }
)
"""Top-level folders setuptools' automatic discovery never makes packages of (its
``FlatLayoutPackageFinder`` list)."""


def modules_in(files: Sequence[str]) -> list[str]:
    """The dotted names of the Python modules among a wheel's (or a tree's) file paths."""
    out = []
    for name in files:
        if ".dist-info/" in name or ".data/" in name or not name.endswith(".py"):
            continue
        module = name[: -len(".py")].replace("/", ".")
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")]
        out.append(module)
    return sorted(set(out))


def candidates(files: Sequence[str]) -> list[str]:
    """The modules a job would run by default: ``*.task`` ones and packages with ``__main__``."""
    modules = modules_in(files)
    return sorted(
        {m for m in modules if m.rsplit(".", 1)[-1] == "task"}
        | {m[: -len(".__main__")] for m in modules if m.endswith(".__main__")}
    )


def default_module(files: Sequence[str]) -> str | None:
    """The one module a job would obviously run, or None when there are none or several."""
    found = candidates(files)
    return found[0] if len(found) == 1 else None


def ambiguity(name: str, modules: Sequence[str], scripts: dict[str, str]) -> str:
    """Why the module of package ``name`` must be named (its ``modules``, a console script)."""
    hint = "".join(
        f"; its console script {script} calls {target}: python-module = "
        f'"{target.partition(":")[0].strip()}" runs that module'
        for script, target in list(scripts.items())[:1]
    )
    return (
        f"cannot tell which module of {name} the job runs (modules: "
        f"{', '.join(modules[:20]) or 'none'}); pass python_module or set "
        f"[tool.kfp-spot] python-module in pyproject.toml{hint}"
    )


def _setup_cfg(project: Path) -> configparser.ConfigParser:
    """``project``'s setup.cfg, read (empty when absent or unreadable: the build says why)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(project / "setup.cfg", encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return configparser.ConfigParser(interpolation=None)
    return parser


def _listed_packages(project: Path) -> set[str] | None:
    """The packages an explicit list names (pyproject's setuptools table, setup.cfg), or None."""
    listed = _build.tool_tables(project).get("setuptools")
    packages = listed.get("packages") if isinstance(listed, dict) else None
    if isinstance(packages, list) and all(isinstance(p, str) for p in packages):
        return set(packages)
    text = _setup_cfg(project).get("options", "packages", fallback="").strip()
    if text and not text.startswith("find"):
        return {p.strip() for p in text.replace(",", "\n").splitlines() if p.strip()}
    return None


def _package_files(root: Path, folder: Path, listed: set[str] | None) -> Iterator[str]:
    """The ``.py`` files of the regular package ``folder`` and its subpackages, from ``root``."""
    dotted = ".".join(folder.relative_to(root).parts)
    if listed is None or dotted in listed:
        for file in sorted(folder.glob("*.py")):
            yield file.relative_to(root).as_posix()
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()):
        if (sub / "__init__.py").is_file():
            yield from _package_files(root, sub, listed)


def source_files(project: Path) -> list[str]:
    """The module files of ``project``'s regular packages the build would hold (see above)."""
    root = project / "src" if (project / "src").is_dir() else project
    listed = _listed_packages(project)
    out: list[str] = []
    for top in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        if root == project and any(fnmatch.fnmatchcase(top.name, x) for x in DISCOVERY_EXCLUDED):
            continue
        if (top / "__init__.py").is_file():
            out.extend(_package_files(root, top, listed))
    return out


def _chosen_by_the_build(project: Path) -> bool:
    """Whether which packages the wheel holds is decided where the source tree cannot show it.

    A ``setup.py`` (``packages=find_packages(exclude=...)``, ``package_dir``: code), a
    ``[tool.setuptools.packages.find]`` table or ``package-dir`` in pyproject.toml, and
    setup.cfg's ``[options.packages.find]`` or ``package_dir`` narrow or move what discovery
    takes: the wheel alone says which candidates it holds, so the refusal waits for it.
    """
    if (project / "setup.py").is_file():
        return True
    setuptools = _build.tool_tables(project).get("setuptools")
    if isinstance(setuptools, dict) and (
        isinstance(setuptools.get("packages"), dict) or "package-dir" in setuptools
    ):
        return True
    cfg = _setup_cfg(project)
    return cfg.has_section("options.packages.find") or cfg.has_option("options", "package_dir")


def source_ambiguity(project: Path, shown_name: str) -> str | None:
    """:func:`ambiguity`'s message when the source tree already holds several candidates.

    ``project``: a project directory (a pyproject.toml, setup.py or setup.cfg at its top) whose
    module is not named; ``shown_name``: how the message names a project whose pyproject.toml,
    setup.cfg and setup.py (read statically: :func:`kfp_spot.packaging.build.setup_py_name`)
    name none. None when it holds one or none: the wheel decides then.
    """
    files = source_files(project)
    found = candidates(files)
    if _chosen_by_the_build(project):  # only one package's own candidates go in or out together
        main_packages = {
            m[: -len(".__main__")] for m in modules_in(files) if m.endswith(".__main__")
        }
        homes = [m if m in main_packages else m.rpartition(".")[0] for m in found]
        if len(set(homes)) == len(homes):
            return None
    elif len(found) < 2:
        return None
    table = _build.project_table(project)
    name = (
        table.get("name")
        or _setup_cfg(project).get("metadata", "name", fallback="")
        or _build.setup_py_name(project)
    )
    scripts = table.get("scripts")
    return ambiguity(
        name if isinstance(name, str) and name else shown_name,
        modules_in(files),
        {str(k): str(v) for k, v in scripts.items()} if isinstance(scripts, dict) else {},
    )
