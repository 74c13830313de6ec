"""The evaluation entry point's form: ``module:function``, checked before anything is imported.

Its own module so that what checks arguments before a run (``kfp-spot run``) reads the rule
without loading the evaluator.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kfp_spot.evaluation.errors import EvaluationInputError
from kfp_spot.packaging.imports import module_file
from kfp_spot.packaging.sources import ENTRY_POINT_FORM, is_entry_point

DEFAULT_ENTRY_POINT = "trainer.evaluate:evaluate"
"""The evaluation entry point of a package that names none (the bundled example's)."""


def resolve_entry_point(given: str, package_metadata: Mapping[str, Any]) -> str:
    """The entry point an evaluation calls: ``given``, else the package's, else the default.

    The package's is its ``[tool.kfp-spot] evaluation-entry-point``, which prepare_package
    records in the package artifact's metadata as ``evaluation_entry_point``.
    """
    named = package_metadata.get("evaluation_entry_point")
    return given or (named if isinstance(named, str) and named else DEFAULT_ENTRY_POINT)


def check_entry_point(entry_point: Any) -> None:
    """Check that ``entry_point`` reads as ``module:function`` (it is imported later).

    Raises:
        EvaluationInputError: naming ``entry_point`` and the form it must have.
    """
    if not is_entry_point(entry_point):
        raise EvaluationInputError("entry_point", f"{entry_point!r} is not {ENTRY_POINT_FORM}")


_DYNAMIC = frozenset({"__getattr__", "globals", "vars", "exec", "setattr", "__dict__"})
"""Names whose use lets a module bind names no statement shows: then nothing is concluded."""


def _bound(tree: ast.Module) -> set[str] | None:
    """The names a module binds at its top level; None when it may bind others dynamically."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return None
        if isinstance(node, ast.Name) and node.id in _DYNAMIC:
            return None
        if isinstance(node, ast.Attribute) and node.attr in _DYNAMIC:
            return None
        if isinstance(node, ast.FunctionDef) and node.name in _DYNAMIC:
            return None
    pending: list[ast.stmt] = list(tree.body)
    while pending:  # the top level, through if/try/with/for blocks, not into functions
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
            continue
        for child in ast.walk(node):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                names.add(child.id)
        for field in ("body", "orelse", "finalbody", "handlers"):
            pending.extend(getattr(node, field, None) or [])
    return names


def missing_function(directory: Path, entry_point: str) -> str | None:
    """Why ``entry_point``'s function is surely not in its module under source ``directory``.

    Read statically (nothing is imported), at the source's top or under ``src/``: a misspelt
    function fails the evaluation only after the whole training. None when the module is not
    there, does not parse, may bind names dynamically (``__getattr__``, ``*`` imports) or binds
    the name.
    """
    module, _, function = entry_point.partition(":")
    for base in (directory, directory / "src"):
        path = module_file(base, module.split("."))
        if path is None:
            continue
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError):
            return None
        bound = _bound(tree)
        if bound is None or function in bound:
            return None
        defined = [
            n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        return (
            f"{entry_point}: module {module!r} ({path}) defines no {function!r} (its "
            f"functions: {', '.join(defined) or 'none'}); name one of them (MODULE:FUNCTION)"
        )
    return None
