"""The package's own evaluation entry point, checked against the built package before staging.

evaluate_checkpoint imports ``[tool.kfp-spot] evaluation-entry-point`` only after the whole
training: a module the build left out (a top-level ``score.py`` beside a ``src/`` package, a
package the build's ``packages`` does not list), a misspelt module of the package itself or a
function the module does not define failed the pipeline after a paid job. prepare_package has
the built wheel: :func:`check_entry_point` reads it there, statically (nothing is imported).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path

from kfp_spot.packaging import build as _build
from kfp_spot.packaging import imports
from kfp_spot.packaging.errors import PackagingError

FIELD = "pyproject.toml [tool.kfp-spot] evaluation-entry-point"


def _bound_names(tree: ast.Module) -> set[str] | None:
    """The names a module binds at its top level (also under ``if``/``try``), or None.

    None when the module may bind names it does not spell out: ``from x import *``, a module
    ``__getattr__``, ``globals()``, ``exec``.
    """
    names: set[str] = set()

    def targets(node: ast.AST) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)

    def visit(body: Sequence[ast.stmt]) -> bool:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(stmt.name)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    if alias.name == "*":
                        return False
                    names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                    targets(target)
            elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
                if isinstance(stmt, (ast.For, ast.AsyncFor)):
                    targets(stmt.target)
                else:
                    for item in stmt.items:
                        if item.optional_vars is not None:
                            targets(item.optional_vars)
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and not isinstance(
                    stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
                ):
                    blocks = [h.body for h in inner] if field == "handlers" else [inner]
                    if not all(visit(block) for block in blocks):
                        return False
        return True

    if any(isinstance(stmt, ast.Match) for stmt in tree.body) or not visit(tree.body):
        return None
    dynamic = {"__getattr__", "globals", "exec", "vars", "setattr"}
    called = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    if "__getattr__" in names or dynamic & called:
        return None
    for node in ast.walk(tree):  # bound elsewhere: ``(f := g())``, ``global f`` in a function
        if isinstance(node, ast.NamedExpr):
            names.add(node.target.id)
        elif isinstance(node, ast.Global):
            names.update(node.names)
    return names


def _module_file(files: Sequence[str], module: str) -> str | None:
    stem = module.replace(".", "/")
    return next((f for f in (f"{stem}.py", f"{stem}/__init__.py") if f in files), None)


def check_entry_point(
    wheel: Path, facts: _build.WheelFacts, entry_point: str, source_tree: Path
) -> None:
    """Refuse an entry point the built package cannot serve.

    Args:
        wheel: the built wheel.
        facts: its facts.
        entry_point: ``module:function`` (its form already checked).
        source_tree: the project as it was built (to tell a module the build left out from one
            a dependency brings).

    Raises:
        PackagingError: naming ``source`` and the entry point: its module is missing from the
            package while its top-level package, or the module's own file in the source, is
            there; or the module does not define the function.
    """
    module, _, function = entry_point.partition(":")
    parts = module.split(".")
    path = _module_file(facts.files, module)
    if path is None:
        if any(f.endswith((".so", ".pyd")) for f in facts.files):
            return  # an extension module may be it
        top_packaged = any(f.split("/")[0] in (parts[0], f"{parts[0]}.py") for f in facts.files)
        in_source = any(
            imports.module_file(base, parts) is not None
            for base in (source_tree, source_tree / "src")
        )
        if top_packaged or in_source:
            why = (
                "it is in the source but the build leaves it out (list it in the build's "
                "packages or py-modules)"
                if in_source
                else f"the package holds {parts[0]!r} but not this module"
            )
            raise PackagingError(
                "source",
                f"{FIELD} {entry_point!r}: module {module!r} is not in the built package "
                f"{facts.name} {facts.version}: {why}; the evaluation would fail after the "
                "training",
            )
        return  # may come from a dependency: the evaluation imports it
    try:
        tree = ast.parse(_build.read_wheel_file(wheel, path))
    except (SyntaxError, ValueError):
        return  # the import reports it, with its line
    names = _bound_names(tree)
    if names is not None and function not in names:
        defined = sorted(
            n.name
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")
        )
        raise PackagingError(
            "source",
            f"{FIELD} {entry_point!r}: {path} defines no {function!r} (its functions: "
            f"{', '.join(defined) or 'none'}); the evaluation would fail after the training",
        )
