"""The floors of kfp_spot: no part imports a part on a higher floor.

The floors, bottom up, are data (:data:`FLOORS`, described in docs/ARCHITECTURE.md, "Floors"). A
part is a top-level module or package of ``kfp_spot`` (``components/`` and ``pipelines/`` are
mapped into it). The import graph is tests/test_import_cycles.py's: module-level, deferred
(function-level) and type-only imports all count, so hiding an import in a function or under
``TYPE_CHECKING`` does not move a dependency. Parts of one floor may import each other (the cycle
test keeps that acyclic).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.test_import_cycles import TREES, import_graph, modules

# Bottom up. Each floor may import its own and the floors below it, never one above.
FLOORS: tuple[tuple[str, frozenset[str]], ...] = (
    # Plumbing and tables every floor may use: paths and storage, the version, the artifact
    # protocol, unpacking archives safely, the executor images' and machine types' tables, reading
    # a traceback out of a process's output, importing GAPIC's modules one by one.
    (
        "foundations",
        frozenset(
            {
                "kfp_spot",
                "fs",
                "version",
                "artifacts",
                "archives",
                "executors",
                "machines",
                "yamldocs",
                "tracebacks",
                "lightimports",
                "nesting",
            }
        ),
    ),
    # Environments: package venvs, views of installed distributions and the build hooks that see
    # only them, the runtime image (Vertex's submission checks the image).
    ("environments", frozenset({"envcache", "image", "siteview", "buildview", "vmmarkers"})),
    # The contracts: Vertex AI's rules and limits; every file format of a checkpoint root.
    ("contracts", frozenset({"vertex", "checkpoints"})),
    # Reading against a contract: a component's inputs, what a checkpoint root holds.
    ("readers", frozenset({"validation", "layout"})),
    # What training code imports (shipped alone as the kfp-spot-trainer wheel).
    ("trainer", frozenset({"trainer"})),
    # Models and the runtimes of single steps: costs, packages, serving, promotion.
    ("models", frozenset({"accounting", "packaging", "serving", "promotion"})),
    # The components' runtimes and the local services.
    ("runtimes", frozenset({"jobs", "evaluation", "emulator", "reports", "registry", "drill"})),
    # What a local run shows, and the KFP components over the runtimes.
    ("assemblies", frozenset({"progress", "components"})),
    # Entry points: the pipelines and the command line.
    ("entry points", frozenset({"pipelines", "cli"})),
)


def part_of(module: str) -> str:
    """The part of kfp_spot a module belongs to (``kfp_spot.jobs.spec`` -> ``jobs``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def floor_index(floors: Sequence[tuple[str, frozenset[str]]]) -> dict[str, int]:
    """Part -> the index of its floor; a part on two floors is an error in the data."""
    index: dict[str, int] = {}
    for level, (_, parts) in enumerate(floors):
        for part in parts:
            assert part not in index, f"{part} is on two floors"
            index[part] = level
    return index


def upward_imports(
    graph: Mapping[str, set[str]], floors: Sequence[tuple[str, frozenset[str]]]
) -> list[str]:
    """Every import of a module on a higher floor, as ``a (floor) imports b (floor)``."""
    level = floor_index(floors)
    found = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            low, high = level[part_of(module)], level[part_of(target)]
            if high > low:
                found.append(f"{module} ({floors[low][0]}) imports {target} ({floors[high][0]})")
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(modules(TREES))


def test_every_part_of_kfp_spot_has_one_floor(graph):
    parts = {part_of(m) for m in graph}
    placed = set(floor_index(FLOORS))
    assert parts - placed == set(), "new parts take their floor in FLOORS (and the docs)"
    assert placed - parts == set(), "parts that no longer exist leave FLOORS"


def test_no_floor_imports_a_higher_one(graph):
    assert upward_imports(graph, FLOORS) == []


def test_nothing_below_the_trainer_imports_it(graph):
    level = floor_index(FLOORS)
    assert level["checkpoints"] < level["trainer"] and level["layout"] < level["trainer"]
    below = {m for m in graph if level[part_of(m)] < level["trainer"]}
    assert "kfp_spot.checkpoints.verify" in below  # the launcher's and the evaluator's path
    reaching = {f"{m} -> {t}" for m in below for t in graph[m] if part_of(t) == "trainer"}
    assert reaching == set()


def _graph_of(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for rel, text in files.items():
        path = tmp_path / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(modules({"pkg": tmp_path / "pkg"}))


TOY_FLOORS = (("low", frozenset({"pkg", "low"})), ("high", frozenset({"high"})))


@pytest.mark.parametrize(
    ("low_imports", "upward"),
    [
        ("import os\n", False),
        ("from pkg.high import thing\n", True),
        ("def f():\n    from pkg.high import thing\n", True),  # deferred
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.high\n", True),
        ("from pkg import high\n", True),
    ],
)
def test_the_checker_sees_an_import_up_however_it_is_written(tmp_path, low_imports, upward):
    graph = _graph_of(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": low_imports,
            "high/__init__.py": "",
            "high/b.py": "from pkg.low.a import x\n",  # down is fine
        },
    )
    found = upward_imports(graph, TOY_FLOORS)
    assert found == (["pkg.low.a (low) imports pkg.high (high)"] if upward else []), found
