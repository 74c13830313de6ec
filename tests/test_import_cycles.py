"""No import cycle among kfp-spot's modules.

The import graph is built by static analysis (``ast``) of every module under ``kfp_spot/`` and
of the folders mapped into it (``components/`` as ``kfp_spot.components``, ``pipelines/`` as
``kfp_spot.pipelines``, see setup.py). Every import counts: module-level, function-level
(deferred) and type-only (``if TYPE_CHECKING:``) ones. A cycle through a deferred import is still
one concern leaning on another, and a module that needs another's types to be checked depends on
that module as surely as one that calls it: deferring or hiding an import never breaks a cycle.
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg`` itself;
the implicit import of parent packages is not an edge (every submodule would otherwise be in a
cycle with its package's ``__init__``). tests/test_layering.py applies the same graph to the
floors of the house.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREES = {"kfp_spot": ROOT / "kfp_spot", "kfp_spot.components": ROOT / "components"}
TREES["kfp_spot.pipelines"] = ROOT / "pipelines"

# Cycles tolerated, each as the set of its modules with a comment saying why. An entry whose
# cycle is gone fails the test, so the list cannot go stale. None today.
ALLOWED: list[frozenset[str]] = []


def modules(trees: dict[str, Path]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the trees."""
    found: dict[str, Path] = {}
    for prefix, folder in trees.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([prefix, *parts])] = path
    return found


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree``: module-level, deferred and type-only alike."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def _owner(name: str, known: Iterable[str]) -> str | None:
    """The longest known module that ``name`` is or lies in (``a.b.c`` -> ``a.b`` if known)."""
    parts = name.split(".")
    known = set(known)
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


@functools.cache
def _parsed(filename: str, source: str) -> tuple[ast.Import | ast.ImportFrom, ...]:
    """The import statements of ``source``: parsed once per worker for the tests that graph the
    same tree (the layering, cycle and emulator-layering tests); keyed by the text itself."""
    return tuple(_imports(ast.parse(source, filename=filename)))


def import_statements(path: Path) -> tuple[ast.Import | ast.ImportFrom, ...]:
    """The import statements of the file ``path`` (parsed once per worker, as for the graph)."""
    return _parsed(str(path), path.read_text())


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``mods`` it imports (deferred and type-only imports included)."""
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        for stmt in import_statements(path):
            targets: list[str] = []
            if isinstance(stmt, ast.Import):
                targets = [alias.name for alias in stmt.names]
            else:
                base = stmt.module or ""
                if stmt.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (stmt.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in stmt.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in mods else base)
            for target in targets:
                owner = _owner(target, mods)
                if owner is not None and owner != name:
                    graph[name].add(owner)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component that has one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan; the graph is small, recursion is fine
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A concrete cycle through the component's first module (breadth-first: a shortest one)."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def test_no_import_cycle_in_kfp_spot():
    graph = import_graph(modules(TREES))
    assert "kfp_spot.emulator.service" in graph and "kfp_spot.pipelines.catalog" in graph
    found = cycles(graph)
    new = [c for c in found if not any(set(c) <= allowed for allowed in ALLOWED)]
    assert not new, "import cycles:\n" + "\n".join(" -> ".join(c) for c in new)
    stale = [a for a in ALLOWED if not any(set(c) <= a for c in found)]
    assert not stale, f"allowlisted cycles that no longer exist (remove them): {stale}"


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for rel, text in files.items():
        path = tmp_path / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(modules({"pkg": tmp_path / "pkg"}))


@pytest.mark.parametrize(
    ("a_imports", "cyclic"),
    [
        ("from pkg import b\n", True),
        ("import pkg.b\n", True),
        ("from . import b\n", True),
        ("from .b import thing\n", True),
        ("def f():\n    from pkg.b import thing\n", True),  # a deferred import is an edge
        ("class A:\n    def f(self):\n        import pkg.b\n", True),
        (  # and so is a type-only one
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import thing\n",
            True,
        ),
        ("import typing\nif typing.TYPE_CHECKING:\n    import pkg.b\nelse:\n    pass\n", True),
        ("if TYPE_CHECKING:\n    pass\nelse:\n    import pkg.b\n", True),
        ("try:\n    import pkg.b\nexcept ImportError:\n    pass\n", True),
        ("import os\n", False),
    ],
)
def test_the_checker_sees_each_kind_of_import(tmp_path, a_imports, cyclic):
    graph = _tree(
        tmp_path,
        {"__init__.py": "", "a.py": a_imports, "b.py": "from pkg.a import x\n"},
    )
    found = cycles(graph)
    assert (found == [["pkg.a", "pkg.b", "pkg.a"]]) if cyclic else (found == [])


def test_the_checker_names_a_longer_cycle_and_ignores_parent_packages(tmp_path):
    graph = _tree(
        tmp_path,
        {
            "__init__.py": "from pkg.sub.x import X\n",  # the package imports its own module
            "sub/__init__.py": "",
            "sub/x.py": "from pkg.sub import y\n",
            "sub/y.py": "from ..z import Z\n",
            "z.py": "import pkg.sub.x\n",
        },
    )
    assert cycles(graph) == [["pkg.sub.x", "pkg.sub.y", "pkg.z", "pkg.sub.x"]]
