"""Whether ``python -m MODULE`` on the training VM runs the package's module, and runs anything.

Vertex AI starts a Python package job with ``python -m <python_module>`` once pip has installed
the package into site-packages. These layouts pass every import check and still go wrong there:

- a module whose top-level name is a standard module's (a script ``random.py``, a package
  ``test``): the standard library comes before site-packages on ``sys.path``, so ``python -m
  random`` runs Python's own ``random`` (and exits 0), and ``test.task`` is looked for in Python's
  regression tests. The evaluation imports its entry point's module the same way, and the job's
  own ``import tokenize`` of a helper ``tokenize.py`` gets Python's (:func:`shadow_reason`,
  :func:`shadowed_files`);
- a module that only defines its entry function, as the target of a console script does
  (``[project.scripts] fit = "digitfit.cli:main"``), and never calls it: ``python -m`` runs the
  definitions and the job succeeds without training (:func:`idle_reason`);
- an evaluation entry point in the job's module when that module runs the job at its top level,
  without ``if __name__ == "__main__":``: importing it for the evaluation trains again
  (:func:`import_reason`).
"""

from __future__ import annotations

import ast
import configparser
import sys
from collections.abc import Sequence

from kfp_spot.packaging import imports

TEST_PACKAGE = "test"
"""Python's regression tests: installed with CPython, left out of ``sys.stdlib_module_names``."""


def stdlib_shadow(module: str) -> str | None:
    """The standard module that ``module``'s top-level name is, or None."""
    top = module.split(".")[0]
    return top if top in sys.stdlib_module_names or top == TEST_PACKAGE else None


def shadow_reason(module: str) -> str | None:
    """Why a package's ``module`` is never imported, said for an error; None when it can be."""
    top = stdlib_shadow(module)
    if top is None:
        return None
    return (
        f"{top!r} is the name of a module of Python's standard library, which comes first on "
        f"sys.path: on Vertex AI `import {module}` finds Python's own {top}, never this "
        f"package's; rename {top!r} (a script: a python_module such as 'trainer.{top}' places it "
        f"at trainer/{top}.py)"
    )


def shadowed_files(files: Sequence[str]) -> list[str]:
    """The top-level modules and packages of a wheel's ``files`` named like standard modules.

    Each as the wheel holds it (``tokenize.py``, ``test/``), sorted.
    """
    out = set()
    for name in files:
        top, _, rest = name.partition("/")
        if top.endswith((".dist-info", ".data")):
            continue
        if rest:
            shown = f"{top}/"
        elif top.endswith((".py", ".so", ".pyd")):
            shown = top
        else:
            continue
        if stdlib_shadow(top.split(".")[0]):
            out.add(shown)
    return sorted(out)


def shadowed_files_reason(shown: Sequence[str], package: str) -> str:
    """Why a package's ``shown`` modules (:func:`shadowed_files`) are never imported."""
    names = ", ".join(shown)
    first = shown[0].rstrip("/").split(".")[0]
    return (
        f"the built package {package} installs {names} at its top level, named like a module "
        f"of Python's standard library, which comes first on sys.path: on Vertex AI `import "
        f"{first}` finds Python's own {first}, never this package's; rename it, or move it into "
        "the package's own folder"
    )


def _may_run(statement: ast.stmt, own: set[str]) -> bool:
    """Whether a top-level statement may do work when the module runs as ``__main__``.

    Imports, definitions, docstrings and assignments that call none of the module's own names
    (``log = logging.getLogger(__name__)``) do none; an ``if`` (``__name__ == "__main__"``), a
    call, a loop or anything else may.
    """
    if isinstance(statement, (ast.Import, ast.ImportFrom, ast.Pass)):
        return False
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return False
    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
        return any(
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in own
            for node in ast.walk(statement.value)
        )
    return True


def idle_functions(tree: ast.Module) -> list[str]:
    """The functions a module defines when its top level runs none of them, else ``[]``.

    ``[]`` too for a module that defines no function (it may be run for what it imports).
    """
    defined = [
        node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    own = imports.bound_names(tree)
    if not defined or own is None:
        return []
    if any(_may_run(statement, own) or _calls(statement) for statement in tree.body):
        return []
    return defined


_NO_WORK_CALLS = frozenset({"logging.getLogger", "getLogger"})
"""Calls a module's top level makes without doing its job: a logger looked up by name."""


def _calls(statement: ast.stmt) -> bool:
    """Whether a top-level assignment calls anything but a logger lookup.

    A refusal must never stop a job that runs: ``history = mylib.train()`` or
    ``main.main(standalone_mode=False)`` call no name of the module's own, yet they train.
    """
    if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is None:
        return False  # definitions and imports run nothing; any other statement may_run says
    return any(
        isinstance(node, ast.Call) and imports.unparsed(node.func) not in _NO_WORK_CALLS
        for node in ast.walk(statement.value)
    )


def console_scripts(entry_points_txt: str) -> dict[str, str]:
    """A wheel's ``entry_points.txt`` console scripts: name -> ``module:function``."""
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(entry_points_txt)
    except configparser.Error:
        return {}
    if not parser.has_section("console_scripts"):
        return {}
    return {name: value.strip() for name, value in parser.items("console_scripts")}


def idle_reason(module: str, path: str, tree: ast.Module, scripts: dict[str, str]) -> str | None:
    """Why ``python -m module`` would train nothing, said for an error; None when it may."""
    idle = idle_functions(tree)
    if not idle:
        return None
    targets = [
        (name, target)
        for name, target in scripts.items()
        if target.partition(":")[0].strip() == module
    ]
    entry = next(
        (target.partition(":")[2].strip() for _, target in targets),
        "main" if "main" in idle else idle[0],
    )
    via = (
        f" (the console script {targets[0][0]} calls {targets[0][1]}, but Vertex AI runs "
        "`python -m`, not console scripts)"
        if targets
        else ""
    )
    never = "never calls it" if len(idle) == 1 else "calls none of them"
    return (
        f"{module!r} ({path}) only defines {', '.join(f + '()' for f in idle)} and {never}: "
        f"`python -m {module}`, which Vertex AI runs, would train nothing and succeed{via}; "
        f'end it with `if __name__ == "__main__": {entry}()`'
    )


def _tests_name(statement: ast.stmt) -> bool:
    """Whether a top-level ``if`` reads ``__name__`` (``if __name__ == "__main__":``)."""
    return isinstance(statement, ast.If) and any(
        isinstance(node, ast.Name) and node.id == "__name__" for node in ast.walk(statement.test)
    )


def import_reason(module: str, path: str, tree: ast.Module) -> str | None:
    """Why importing the job's own ``module`` for the evaluation would run the job, or None.

    A module with no ``if __name__ == "__main__":`` runs the same code when imported as when
    ``python -m`` runs it: the evaluation, importing it for its entry point, would train again
    (its argument parser reading the evaluator's arguments, first of all).
    """
    own = imports.bound_names(tree)
    if own is None or any(_tests_name(statement) for statement in tree.body):
        return None
    running = next((s for s in tree.body if _may_run(s, own)), None)
    if running is None:
        return None
    return (
        f"{module!r} is the job's module ({path}), whose top level runs the job (line "
        f'{running.lineno}) with no `if __name__ == "__main__":`: the evaluation imports it '
        "and would run the training again; put the training under `if __name__ == "
        '"__main__":` (or the entry point in a module of its own)'
    )
