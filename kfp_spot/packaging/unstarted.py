"""Warn about a job whose own code saves through a ``CheckpointManager`` it never starts.

``ckpt = CheckpointManager(...)`` followed by ``ckpt.maybe_save(...)`` saves, and locally a run
even resumes from those saves; but only ``with ckpt:`` (or ``ckpt.start()``) installs the
preemption handler and writes the attempt's record. Unstarted, a preemption notice on Vertex AI
ends the process without its last save, and the run's reports cannot tell that it resumed. The
manager warns of it at its first save, in the job's log (the training VM's, seen after the run);
:func:`warnings_for` says it before the job is submitted, read statically.

A manager named by a variable or an attribute is taken as started when the same file enters it
(``with ckpt:``), calls its ``start()`` or ``__enter__()``, or hands it to anything (an
integration's callback or a function of the job's own may start it): only a manager the file
saves through and does none of that to is named.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from kfp_spot.packaging import imports
from kfp_spot.packaging.jobsource import JobSource, SourceFile

_SAVES = frozenset({"save", "maybe_save", "save_directory"})
_STARTS = frozenset({"start", "__enter__"})


def _is_manager_call(node: ast.AST | None) -> bool:
    """Whether ``node`` is ``CheckpointManager(...)`` (or ``trainer.CheckpointManager(...)``)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    return name == "CheckpointManager"


def _unstarted_in(file: SourceFile) -> Iterable[tuple[str, int]]:
    """Each manager ``file`` binds, saves through and never starts: its name and line."""
    if not any(i.name.split(".")[0] == "kfp_spot" for i in file.imported):
        return
    bound: dict[str, int] = {}  # the expression it is bound to -> its line
    for node in file.nodes:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and _is_manager_call(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                name = imports.unparsed(target)
                if isinstance(target, (ast.Name, ast.Attribute)) and name:
                    bound.setdefault(name, node.lineno)
    if not bound:
        return
    started: set[str] = set()
    saved: set[str] = set()
    for node in file.nodes:
        if isinstance(node, (ast.With, ast.AsyncWith)):
            started.update(imports.unparsed(item.context_expr) for item in node.items)
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                owner = imports.unparsed(func.value)
                if func.attr in _STARTS:
                    started.add(owner)
                elif func.attr in _SAVES:
                    saved.add(owner)
            handed = [*node.args, *(k.value for k in node.keywords)]
            started.update(imports.unparsed(arg) for arg in handed if not _is_manager_call(arg))
        elif isinstance(node, (ast.Return, ast.Yield)) and node.value is not None:
            started.add(imports.unparsed(node.value))  # its caller may start it
    for name, line in bound.items():
        if name in saved and name not in started:
            yield name, line


def warnings_for(source: JobSource, modules: Iterable[str]) -> list[str]:
    """One warning per manager :func:`_unstarted_in` finds in the code ``modules`` reach."""
    return [
        f"{file.where}, line {line}: {name} = CheckpointManager(...) saves but is never "
        "started: on Vertex AI a preemption notice then ends the job without its last "
        "save, and no attempt record says that it resumed. Use `with "
        f"CheckpointManager(...) as {name.rpartition('.')[2]}:` around the training "
        "loop (or call its start() first and close() at the end)"
        for file in source.reached_by(modules)
        for name, line in _unstarted_in(file)
    ]
