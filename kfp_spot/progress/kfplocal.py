"""What kfp.local's own log records say: when a task starts, ends or is skipped.

kfp.local has no callback API; it announces each task through the root logger
(``kfp/local/task_dispatcher.py``, ``orchestrator/*.py``, ``pipeline_orchestrator.py`` in kfp 2.x):
``Executing task 'NAME'``, ``Task 'NAME' finished with status SUCCESS|FAILURE``,
``Skipping task NAME: ...``, ``Skipping conditional task NAME (...)``, ``Task NAME cache hit ...``,
``Task NAME failed with exception: ...`` (kfp.local could not start it: a loop iteration whose
inputs it cannot resolve) and ``Pipeline 'NAME' finished with status ...`` (names and statuses
in ANSI colours).
:class:`TaskEventFilter` sits on the root logger as a filter: kfp.local swaps the root's handlers
for every task but leaves its filters alone, and a filter sees each record in the thread that
logs it, before any handler writes it. ``tests/test_run_output.py`` runs a small pipeline through
the installed kfp.local, so a change in these messages fails a test rather than going unseen.

What a task printed is read by :mod:`~kfp_spot.progress.taskoutput`.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from kfp_spot.progress.capture import strip_ansi

EventKind = Literal["started", "finished", "skipped", "cached", "errored", "pipeline_finished"]

_NAME = r"(?P<q>['\"])(?P<name>.+?)(?P=q)"
_PATTERNS: list[tuple[EventKind, re.Pattern[str]]] = [
    ("started", re.compile(rf"^Executing task {_NAME}$")),
    ("finished", re.compile(rf"^Task {_NAME} finished with status (?P<status>[A-Z_]+)")),
    ("skipped", re.compile(r"^Skipping (?:conditional )?task (?P<name>\S+?):? (?P<detail>.+)$")),
    ("cached", re.compile(r"^Task (?P<name>\S+) cache hit\b")),
    ("errored", re.compile(r"^Task (?P<name>\S+) failed with exception: (?P<error>.*)$", re.S)),
    (
        "pipeline_finished",
        re.compile(rf"^Pipeline {_NAME} finished with status (?P<status>[A-Z_]+)"),
    ),
]


@dataclass(frozen=True)
class TaskEvent:
    """One thing kfp.local said about a task (or, for ``pipeline_finished``, the pipeline).

    Attributes:
        kind: ``started``, ``finished``, ``skipped``, ``cached``, ``errored`` or
            ``pipeline_finished``.
        name: the task's (or pipeline's) name.
        ok: for ``finished`` and ``pipeline_finished``, whether the status was SUCCESS; False
            for ``errored``.
        detail: for ``skipped``, kfp.local's reason; for ``errored``, its error.
    """

    kind: EventKind
    name: str
    ok: bool = True
    detail: str = ""


def parse(message: str) -> TaskEvent | None:
    """The task event a kfp.local log message announces, or None."""
    text = strip_ansi(message).strip()
    for kind, pattern in _PATTERNS:
        match = pattern.match(text)
        if match:
            groups = match.groupdict()
            if kind == "errored":
                return TaskEvent(kind, groups["name"], ok=False, detail=groups["error"].strip())
            detail = (groups.get("detail") or "").strip().strip("()")
            return TaskEvent(
                kind, groups["name"], ok=groups.get("status", "SUCCESS") == "SUCCESS", detail=detail
            )
    return None


class TaskEventFilter(logging.Filter):
    """A root-logger filter that reports kfp.local's task events and lets every record through.

    Args:
        on_event: called with each event, in the thread that logged it.
    """

    def __init__(self, on_event: Callable[[TaskEvent], None]) -> None:
        super().__init__()
        self._on_event = on_event

    def filter(self, record: logging.LogRecord) -> bool:
        """Report the record's event, if it announces one; never drops a record."""
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a bad format string: the handler reports it
            return True
        event = parse(message)
        if event is not None:
            self._on_event(event)
        return True

    @contextlib.contextmanager
    def installed(self) -> Iterator[TaskEventFilter]:
        """Put the filter on the root logger for the block."""
        root = logging.getLogger()
        root.addFilter(self)
        try:
            yield self
        finally:
            root.removeFilter(self)


# kfp.local's error for a loop item's field inside an f-string, a list or a dict (kfp 2.17:
# kfp/local/io.py looks the field's channel up among the parent's inputs, where it is not).
_LOOP_FIELD = re.compile(
    r"Parent pipeline input argument '(?:pipelinechannel--)?loop-item-param-\d+-subvar-"
    r"(?P<field>\w+)' not found"
)


def errored_hint(error: str) -> str | None:
    """What to do about kfp.local's error for a task it could not start, when it is a known one."""
    match = _LOOP_FIELD.search(error)
    if match is None:
        return None
    return (
        f"kfp.local cannot pass a dsl.ParallelFor item's field ({match['field']!r}) inside an "
        "f-string, a list or a dict (Vertex AI Pipelines can): pass the field to an input of "
        "its own, or build the value in a component of yours"
    )


def dag_tasks(pipeline_spec: Any) -> dict[str, tuple[str, ...]]:
    """The tasks inside each sub-DAG (e.g. a ``dsl.If``'s ``condition-1``) of a pipeline.

    kfp.local announces a skipped condition by its DAG's name; this names the tasks a person
    knows. ``pipeline_spec`` is a ``PipelineSpec`` message (``GraphComponent.pipeline_spec``).
    """
    components = pipeline_spec.components

    def leaves(dag: Any) -> tuple[str, ...]:
        names: list[str] = []
        for name, task in dag.tasks.items():
            component = components[task.component_ref.name]
            if component.WhichOneof("implementation") == "dag":
                names += leaves(component.dag)
            else:
                names.append(name)
        return tuple(sorted(names))

    groups: dict[str, tuple[str, ...]] = {}
    pending = [pipeline_spec.root.dag]
    while pending:
        dag = pending.pop()
        for name, task in dag.tasks.items():
            component = components[task.component_ref.name]
            if component.WhichOneof("implementation") == "dag":
                groups[name] = leaves(component.dag)
                pending.append(component.dag)
    return groups
