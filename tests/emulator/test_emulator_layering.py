"""The emulator's layering: the attempt runner depends on nothing that schedules or serves."""

from __future__ import annotations

from tests.test_import_cycles import TREES, import_graph, modules


def test_the_runner_knows_neither_the_scheduler_nor_the_api():
    graph = import_graph(modules(TREES))  # type-only and deferred imports included
    above = {"emulator", "server", "service", "jobs", "scheduler", "lifecycle"}
    runner_deps = {m.removeprefix("kfp_spot.emulator.") for m in graph["kfp_spot.emulator.runner"]}
    assert "replicas" in runner_deps  # the graph sees the runner's own imports ...
    assert not runner_deps & above  # ... and none of them is above it


# The serving package's layers as docs/ARCHITECTURE.md lists them: each imports only later ones.
SERVING_ORDER = (
    "routes",
    "api",
    "models",
    "endpoints",
    "prediction",
    "deployments",
    "launch",
    "env",
    "catalog",
    "pool",
    "store",
    "predictor",
)


def test_each_serving_module_imports_only_the_layers_below_it():
    graph = import_graph(modules(TREES))
    prefix = "kfp_spot.emulator.serving."
    listed = {m.removeprefix(prefix) for m in graph if m.startswith(prefix)}
    assert listed == set(SERVING_ORDER)  # a new module takes its place in the order (and docs)
    for index, name in enumerate(SERVING_ORDER):
        deps = {m.removeprefix(prefix) for m in graph[prefix + name] if m.startswith(prefix)}
        assert deps <= set(SERVING_ORDER[index + 1 :]), (name, deps)
