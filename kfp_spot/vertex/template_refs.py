"""The references inside a compiled pipeline spec that must resolve before anything runs.

A compiled spec names its parts by key: a DAG task its component (``componentRef.name`` in
``components``) and the tasks it waits for (``dependentTasks``, in the same DAG), a component its
executor (``executorLabel`` in ``deploymentSpec.executors``). The spec's schema cannot tell a key
that names nothing, so a hand-edited or truncated template parses, and kfp.local finds the hole
only when it reaches that task, with a ``KeyError`` traceback after the tasks before it ran;
Vertex AI Pipelines refuses such a spec. Also the spec's name, read as defensively.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def dangling_references(spec: Mapping[str, Any]) -> list[str]:
    """What in ``spec`` names a component, executor or task the spec does not hold (one line each).

    Args:
        spec: a compiled pipeline or component spec (its first YAML document, as a dict).

    Returns:
        One phrase per dangling reference; empty when every reference resolves.
    """
    components = _mapping(spec.get("components"))
    executors = _mapping(_mapping(spec.get("deploymentSpec")).get("executors"))
    problems = []
    for name, body in [("root", spec.get("root")), *components.items()]:
        label = _mapping(body).get("executorLabel")
        if label is not None and label not in executors:
            problems.append(
                f"component {name!r} runs executor {label!r}, which deploymentSpec.executors "
                "does not hold"
            )
        tasks = _mapping(_mapping(_mapping(body).get("dag")).get("tasks"))
        for task_name, task in tasks.items():
            ref = _mapping(_mapping(task).get("componentRef")).get("name")
            if ref not in components:
                problems.append(
                    f"task {task_name!r} runs component {ref!r}, which components does not hold"
                )
            for needed in _mapping(task).get("dependentTasks") or []:
                if needed not in tasks:
                    problems.append(
                        f"task {task_name!r} waits for task {needed!r}, which its DAG does not hold"
                    )
    return problems


def pipeline_name(spec: Mapping[str, Any]) -> str:
    """The spec's ``pipelineInfo.name``, or ``""``."""
    return str(_mapping(spec.get("pipelineInfo")).get("name") or "")
