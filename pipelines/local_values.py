"""Pipeline argument values a local run (and a submission) refuses before anything starts.

What KFP could not send as a parameter, and what the evaluation reads only after training in a
form it cannot use; reported together (:func:`together`), one line per problem.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

_HOLDS = "a parameter holds text, numbers, true/false, lists and objects (JSON without null)"
"""What a KFP pipeline parameter holds (KFP cannot send anything else, nested or not)."""


def _not_a_value(value: Any, where: str = "") -> str | None:
    """Why ``value`` (nested lists and dicts too) is no pipeline parameter value, else None.

    KFP turns an argument into a protobuf ``Value`` as the run starts and fails there, with a
    traceback, on anything else (``None``, a tuple, a numpy number, a key that is not text). A
    ``Value``'s number is a double: an integer it cannot hold exactly would reach a run on Vertex
    AI Pipelines changed (or fail protobuf, beyond a double's range), so it is refused too.
    """
    from kfp_spot.vertex.values import number_problem

    found = number_problem(value, where)  # no inf/NaN; no integer a double would change
    if found is not None:
        return found
    if isinstance(value, (bool, str, int, float)):
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"key {key!r}{where and f' of item {where}'} is not text; {_HOLDS}"
            found = _not_a_value(item, f"{where}[{key!r}]")
            if found is not None:
                return found
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _not_a_value(item, f"{where}[{index}]")
            if found is not None:
                return found
        return None
    shown = "null" if value is None else f"a {type(value).__name__} ({value!r})"
    subject = f"item {where}" if where else "the value"
    return f"{subject} is {shown}, which a pipeline parameter cannot hold; {_HOLDS}"


def together(problems: Sequence[str]) -> str:
    """One refusal for every problem found before a run: the problem itself when there is one.

    Each problem starts with the field at fault; several are one per line (a problem's own
    further lines indented under it), under a line that counts them, so a user fixes them all
    before trying again.
    """
    if len(problems) == 1:
        return problems[0]
    lines = "\n".join("  " + problem.replace("\n", "\n    ") for problem in problems)
    return f"{len(problems)} problems, found before the run started:\n{lines}"


def _as_module(text: str) -> str:
    """``"; did you mean 'a.b'?"`` for a module written as a path (``a/b.py``), else ``""``."""
    from kfp_spot.packaging.sources import is_module_name

    dotted = text.removesuffix(".py").strip("/").replace("/", ".")
    return f"; did you mean {dotted!r}?" if dotted != text and is_module_name(dotted) else ""


def value_problems(values: Mapping[str, Any]) -> list[str]:
    """What is wrong with argument values a run would only fail on later, one line each.

    A pipeline parameter is a JSON value without null (KFP cannot send anything else, nor an
    infinity or NaN, nor an integer a double cannot hold exactly); and what the evaluation reads
    only after training must be well formed, so a typo in it does not cost a whole training run:
    ``thresholds`` must parse as bounds, ``evaluation_entry_point`` read as ``module:function``
    and ``python_module`` as a module.

    Returns:
        Each problem, naming the parameter at fault and what would be valid; empty when none.
    """
    from kfp_spot.packaging.sources import (
        ENTRY_POINT_FORM,
        MODULE_FORM,
        is_entry_point,
        is_module_name,
    )

    problems = []
    for name, value in values.items():
        found = _not_a_value(value)
        if found is not None:
            problems.append(f"parameter {name}: {found}")
    # a value no parameter can hold is refused for that alone, not again for its meaning
    values = {k: v for k, v in values.items() if _not_a_value(v) is None}
    module = values.get("python_module")  # spot_training's; prepare_package runs after start
    if isinstance(module, str) and module and not is_module_name(module):
        problems.append(
            f"parameter python_module: {module!r} is not {MODULE_FORM}{_as_module(module)}"
        )
    entry_point = values.get("evaluation_entry_point")  # spot_training's; imported after training
    if "evaluation_entry_point" in values and not is_entry_point(entry_point):
        problems.append(
            f"parameter evaluation_entry_point: {entry_point!r} is not {ENTRY_POINT_FORM}"
            + _entry_hint(str(entry_point))
        )
    thresholds = values.get("thresholds")
    if isinstance(thresholds, str):  # a dict may arrive as its JSON text
        try:
            thresholds = json.loads(thresholds)
        except ValueError:
            thresholds = None  # not JSON: the evaluation says what a thresholds mapping is
    if isinstance(thresholds, Mapping):
        from kfp_spot.evaluation.errors import EvaluationInputError
        from kfp_spot.evaluation.thresholds import parse_thresholds

        try:
            parse_thresholds(thresholds)
        except EvaluationInputError as exc:  # a line per bad bound: each a problem of its own
            problems.extend(str(exc).splitlines())
    return problems


def _entry_hint(entry_point: str) -> str:
    """``"; did you mean 'a.b:f'?"`` for an entry point whose module is written as a path."""
    from kfp_spot.packaging.sources import is_entry_point

    module, colon, function = entry_point.partition(":")
    dotted = module.removesuffix(".py").strip("/").replace("/", ".")
    fixed = f"{dotted}{colon}{function}"
    return f"; did you mean {fixed!r}?" if dotted != module and is_entry_point(fixed) else ""
