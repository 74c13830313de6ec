"""The emulator's layering: the attempt runner depends on nothing that schedules or serves."""

from __future__ import annotations

from tests.test_import_cycles import TREES, import_graph, modules


def test_the_runner_knows_neither_the_scheduler_nor_the_api():
    graph = import_graph(modules(TREES), typing_too=True)  # a type-only import couples too
    above = {"emulator", "server", "service", "jobs", "scheduler", "lifecycle"}
    runner_deps = {m.removeprefix("kfp_spot.emulator.") for m in graph["kfp_spot.emulator.runner"]}
    assert "replicas" in runner_deps  # the graph sees the runner's own imports ...
    assert not runner_deps & above  # ... and none of them is above it
