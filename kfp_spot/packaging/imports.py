"""What Python source imports (and binds), read statically: each import and how sure it is to run.

Three readers need it: the light trainer wheel's closure (:mod:`kfp_spot.packaging.trainer_dist`:
which ``kfp_spot`` modules a VM needs), the check of a job's code against its executor image's
Python (:mod:`kfp_spot.packaging.pycompat`) and the environment variables a job's code reads
(:mod:`kfp_spot.packaging.envreads`); they find a module's file with :func:`module_file`, and the
last two walk a job's own package with :func:`walk_own_package`. The checks of an evaluation
entry point (``module:function``) ask which names a module binds: :func:`bound_names`. Every
reader of kfp-spot parses source with :func:`parse`, which threads may share.
An import is *optional* under ``if TYPE_CHECKING:`` or inside a ``try`` that catches
``ImportError``, and *version-guarded* under an ``if`` on ``sys.version_info`` (another Python
may take the other branch).
"""

from __future__ import annotations

import ast
import threading
import warnings
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
"""Handlers an ``ImportError`` reaches."""

_PARSING = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", **options: Any) -> ast.Module:
    """``ast.parse(source, filename, **options)``, one thread at a time in this process.

    CPython 3.11 counts the AST constructor's recursion in state every thread shares: when a
    garbage collection during one thread's parse runs a finalizer that lets another thread
    parse, the first fails with a spurious ``SystemError: AST constructor recursion depth
    mismatch`` (python/cpython gh-106905). The emulator's job runners read their jobs' source
    in threads, beside the rest of the process, so every parse goes through this lock.

    Raises:
        SyntaxError: ``source`` is not Python, or is nested too deeply for Python's compiler
            (``1 + 1 + ...`` thousands of times: the parser's ``RecursionError``, which Python
            itself raises on importing it, told as what it is to the file's reader).
    """
    with _PARSING:
        try:
            tree: ast.Module = ast.parse(source, filename, **options)
        except RecursionError:
            raise SyntaxError(
                "nested too deeply for Python's compiler (it refuses to import it as well)",
                (filename, None, None, None),
            ) from None
    return tree


def source_tree(path: Path, filename: str = "<unknown>") -> ast.Module | None:
    """The module at ``path`` parsed (:func:`parse`), None when it is not Python the parser takes.

    The static readers of a job's code (its imports, the variables and paths it names) skip such
    a file: the build or the import check reports it. Warnings the parser gives on the way (an
    invalid escape and the like) are not theirs to report either, so they are silenced.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return parse(path.read_text(encoding="utf-8", errors="replace"), filename)
        except SyntaxError:
            return None


@dataclass(frozen=True)
class Imported:
    """One module an import statement loads.

    Attributes:
        name: the absolute dotted name (``from a import b`` gives ``a`` and ``a.b``: ``b`` may
            be a module).
        line: the statement's line.
        optional: under ``if TYPE_CHECKING:`` or in a ``try`` that catches ``ImportError``.
        version_guarded: under an ``if`` whose test reads ``sys.version_info``.
    """

    name: str
    line: int
    optional: bool
    version_guarded: bool


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _reads_version_info(test: ast.expr) -> bool:
    """Whether an ``if``'s test reads ``sys.version_info``."""
    return any(
        (isinstance(n, ast.Attribute) and n.attr == "version_info")
        or (isinstance(n, ast.Name) and n.id == "version_info")
        for n in ast.walk(test)
    )


def unparsed(node: ast.AST) -> str:
    """``ast.unparse(node)``, or ``""`` where it nests too deeply to unparse.

    ``ast.unparse`` recurses once per level: ``f(1 + 1 + ...)`` with a thousand terms, which
    Python imports, exceeds the recursion limit. A name the static readers look for is never
    such an expression.
    """
    try:
        return ast.unparse(node)
    except RecursionError:
        return ""


def catches(handlers: Iterable[ast.ExceptHandler], errors: Collection[str]) -> bool:
    """Whether a ``try``'s ``handlers`` catch one of ``errors`` (by name), or everything."""
    for handler in handlers:
        if handler.type is None:
            return True
        names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(n, ast.Name) and n.id in errors for n in names):
            return True
    return False


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of ``from <level dots><name> import ...`` written in ``module``."""
    if level == 0:
        return name or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join([*parts, *([name] if name else [])])


def source_roots(directory: Path) -> tuple[Path, Path]:
    """Where a project's modules live: at its top (flat layout) or under ``src/`` (src layout)."""
    return directory, directory / "src"


def module_file(base: Path, parts: Sequence[str]) -> Path | None:
    """The source file of the module ``parts`` (a dotted name's parts) below ``base``, or None.

    A package's ``__init__.py`` first, as Python finds it before a same-named ``.py``; no
    parts: ``base`` itself as a package.
    """
    where = base.joinpath(*parts)
    candidates = [where / "__init__.py"]
    if parts:
        candidates.append(where.with_name(where.name + ".py"))
    return next((c for c in candidates if c.is_file()), None)


def imported(tree: ast.AST, module: str = "", is_package: bool = False) -> list[Imported]:
    """Every module the parsed source ``tree`` of ``module`` imports, at any depth."""
    out: list[Imported] = []

    def visit(node: ast.AST, optional: bool, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                continue  # no import is in an expression, which may nest thousands deep
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit_stmt(stmt, True, guarded)
                for stmt in child.orelse:
                    visit_stmt(stmt, optional, guarded)
            elif isinstance(child, ast.Try) and catches(child.handlers, IMPORT_ERRORS):
                for stmt in child.body:
                    visit_stmt(stmt, True, guarded)
                for part in (child.handlers, child.orelse, child.finalbody):
                    for inner in part:
                        visit_stmt(inner, optional, guarded)
            elif isinstance(child, ast.If) and _reads_version_info(child.test):
                visit_stmt(child, optional, True)
            else:
                visit_stmt(child, optional, guarded)

    def visit_stmt(node: ast.AST, optional: bool, guarded: bool) -> None:
        if isinstance(node, ast.Import):
            out.extend(Imported(a.name, node.lineno, optional, guarded) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            if base:
                out.append(Imported(base, node.lineno, optional, guarded))
            out.extend(
                Imported(f"{base}.{a.name}" if base else a.name, node.lineno, optional, guarded)
                for a in node.names
                if a.name != "*"
            )
        else:
            visit(node, optional, guarded)

    visit(tree, False, False)
    return out


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def walk_own_package(site: Path, module: str, read: Callable[[str, Path], Iterable[str]]) -> None:
    """Call ``read(name, file)`` on ``module`` and the modules of its package it reaches.

    Those are ``module`` (installed under ``site``), its parent packages, ``module.__main__``
    (for a package run with ``-m``) and, transitively, every module of the same top-level package
    that ``read`` returns as imported by one already read. Each module is read once; names that
    are no module (``from pkg import attr``) are skipped.
    """
    top = module.split(".")[0]
    queue = [*_with_parents(module), f"{module}.__main__"]
    seen: set[str] = set()
    while queue:
        name = queue.pop(0)
        if name in seen or name.split(".")[0] != top:
            continue
        seen.add(name)
        path = module_file(site, name.split("."))
        if path is None:
            continue
        for dotted in read(name, path):
            queue.extend(_with_parents(dotted))


DYNAMIC_NAMES = frozenset({"__getattr__", "globals", "vars", "exec", "setattr", "__dict__"})
"""Names whose use lets a module bind names no statement shows: then nothing is concluded."""


def bound_names(tree: ast.Module) -> set[str] | None:
    """The names a module binds at its top level; None when it may bind others dynamically.

    Definitions, imports and assignment targets at the top level and in its ``if``/``try``/
    ``with``/``for`` blocks, a walrus anywhere and ``global`` names of its functions. None with a
    ``*`` import, a ``match`` statement or a use of :data:`DYNAMIC_NAMES` (a module
    ``__getattr__``, ``globals()``, ``exec``): the import may then find names this does not.
    """
    names: set[str] = set()
    for node in ast.walk(tree):
        if (
            (isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names))
            or isinstance(node, ast.Match)
            or (isinstance(node, ast.Name) and node.id in DYNAMIC_NAMES)
            or (isinstance(node, ast.Attribute) and node.attr in DYNAMIC_NAMES)
            or (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.name in DYNAMIC_NAMES
            )
        ):
            return None
        if isinstance(node, ast.Global):
            names.update(node.names)
        elif isinstance(node, ast.NamedExpr):
            names.add(node.target.id)
    pending: list[ast.AST] = list(tree.body)
    while pending:  # the top level, through if/try/with/for blocks, not into functions
        stmt = pending.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
            continue
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in stmt.names)
            continue
        for child in ast.walk(stmt):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                names.add(child.id)
        for field in ("body", "orelse", "finalbody", "handlers"):
            pending.extend(getattr(stmt, field, None) or [])
    return names


def functions(tree: ast.Module) -> list[str]:
    """The public functions a module defines at its top level, sorted (for error messages)."""
    return sorted(
        n.name
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")
    )
