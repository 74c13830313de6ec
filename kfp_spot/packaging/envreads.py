"""Which environment variables a job's own code reads by name, read statically.

On Vertex AI a job's process has the image's environment, Vertex's variables (``AIP_*``,
``CLOUD_ML_*``, ``CLUSTER_SPEC``, ...) and the ``env`` of its worker pool: nothing of the shell
that submitted it. Locally the emulator starts the job from this machine's environment, so a
trainer that reads ``os.environ["DATA_PATH"]`` (set in the user's shell) ran here and failed on
its first Vertex AI run. :func:`reads` finds such reads in the job's module and the modules of its
own top-level package that it imports -- ``os.environ[...]``, ``os.environ.get(...)``,
``os.getenv(...)``, ``... in os.environ`` with a literal name -- so the emulator can start the
job without them (:func:`host_only` says which), and so can the evaluation of its entry point,
which on Vertex AI runs in a pipeline task's container. What libraries read (``WANDB_API_KEY``
inside ``wandb``) is not seen.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

from kfp_spot.packaging import imports

VM_VARS = frozenset(
    {
        "PATH",
        "HOME",
        "HOSTNAME",
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_CTYPE",
        "PWD",
        "TERM",
        "TMPDIR",
        "TMP",
        "TEMP",
        "PYTHONUNBUFFERED",
        "STORAGE_EMULATOR_HOST",
    }
)
"""What a VM or a task's container has as well (its image's variables), and what only points a
local run at local services: passed on even where the job's code reads it."""


def _is_environ(node: ast.expr) -> bool:
    """``os.environ`` or a bare ``environ`` (``from os import environ``)."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _literal(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _name_read(node: ast.AST) -> str | None:
    """The variable ``node`` reads by literal name, if it is such a read."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return _literal(node.slice) if _is_environ(node.value) else None
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        getenv = (isinstance(func, ast.Attribute) and func.attr == "getenv") or (
            isinstance(func, ast.Name) and func.id == "getenv"
        )
        environ_get = (
            isinstance(func, ast.Attribute)
            and func.attr in ("get", "pop")
            and _is_environ(func.value)
        )
        return _literal(node.args[0]) if getenv or environ_get else None
    if (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], (ast.In, ast.NotIn))
        and _is_environ(node.comparators[0])
    ):
        return _literal(node.left)
    return None


def names_read(tree: ast.AST) -> list[tuple[str, int]]:
    """``(variable, line)`` of every read of an environment variable by literal name."""
    return names_in(ast.walk(tree))


def names_in(nodes: Iterable[ast.AST]) -> list[tuple[str, int]]:
    """:func:`names_read` of a tree's nodes already walked (``SourceFile.nodes``)."""
    out = []
    for node in nodes:
        name = _name_read(node)
        if name:
            out.append((name, getattr(node, "lineno", 0)))
    return sorted(out, key=lambda found: found[1])


def reads(site: Path, module: str) -> dict[str, str]:
    """The variables ``module``'s own code reads, each with where it first does.

    Args:
        site: the directory the package is installed in (site-packages, or a source tree).
        module: the job's module (``python -m module``).

    Returns:
        ``{"DATA_PATH": "trainer/task.py, line 12", ...}``, in reading order.
    """
    found: dict[str, str] = {}

    def read(name: str, path: Path) -> list[str]:
        where = path.relative_to(site).as_posix()
        tree = imports.source_tree(path, where)
        if tree is None:
            return []
        for variable, line in names_read(tree):
            found.setdefault(variable, f"{where}, line {line}")
        return [i.name for i in imports.imported(tree, name, path.name == "__init__.py")]

    imports.walk_own_package(site, module, read)
    return found


def host_only(
    read: Mapping[str, str], base: Mapping[str, str], *provided: Mapping[str, str]
) -> dict[str, str]:
    """Of the variables the code reads (``read``: name -> where), those only ``base`` sets.

    Not set by any of ``provided`` (Vertex's variables, the job's ``env``) and not one a VM has
    too (:data:`VM_VARS`; ``KFP_SPOT_*`` are kfp-spot's own): on Vertex AI the code runs
    without them, so a local run leaves them out too.
    """
    return {
        name: where
        for name, where in read.items()
        if name in base
        and not any(name in given for given in provided)
        and name not in VM_VARS
        and not name.startswith("KFP_SPOT_")
    }


def described(hidden: Mapping[str, str]) -> str:
    """``"DATA_PATH (read at trainer/task.py, line 3); ..."`` for a message."""
    return "; ".join(f"{name} (read at {where})" for name, where in hidden.items())
