"""Runs inside the package's environment: import the entry point, call it, write its result.

``python -m kfp_spot.evaluation.runner ENTRY_POINT CHECKPOINT_DIR PARAMS_JSON RESULT_JSON``

Exit status: 0 with the result written; 3 when the entry point cannot be imported, is not
callable or cannot take ``(checkpoint_dir, params)``; 4 when it raised or called ``sys.exit``;
5 when its result cannot be written as JSON. The evaluator reads the message from stderr.
"""

from __future__ import annotations

import importlib
import inspect
import json
import numbers
import sys
import traceback
from typing import Any

EXIT_ENTRY_POINT = 3
EXIT_RAISED = 4
EXIT_BAD_RESULT = 5
SIGNATURE = "evaluate(checkpoint_dir, params) -> dict of metric name -> number"
"""How the runner calls an entry point."""
_MISSING = object()


def to_jsonable(value: Any) -> Any:
    """Numbers (numpy scalars too) to float/int, arrays to lists, mappings to dicts."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)  # NaN/inf survive: json writes and reads them
    if hasattr(value, "tolist"):
        return to_jsonable(value.tolist())
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        keys: dict[str, Any] = {}
        for key, item in value.items():
            text = str(key)
            if text in keys:  # JSON's keys are text: 1 and "1" would be one, one value lost
                raise TypeError(
                    f"keys {keys[text]!r} and {key!r} are the same key in JSON, {text!r}: give "
                    "each value one name"
                )
            keys[text] = key
            out[text] = to_jsonable(item)
        return out
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    raise TypeError(f"{type(value).__name__} value {value!r} is not a number, list or mapping")


def _is_absent(exc: ImportError, module_name: str) -> bool:
    """Whether ``exc`` says ``module_name`` itself (or a package above it) is not installed."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    return missing is not None and (module_name + ".").startswith(missing + ".")


def _undeclared_hint(exc: ImportError, module_name: str) -> str:
    """What to do when the module imports a distribution nobody installed here."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if not missing or missing.split(".")[0] == module_name.split(".")[0]:
        return ""
    top = missing.split(".")[0]
    return (
        f"{module_name} imports {top!r}, which the evaluation's environment does not hold: it "
        "runs in kfp-spot's runtime image, which holds kfp-spot and its dependencies, the "
        "package and what the package declares, not the training's executor image; declare it "
        "in the package's dependencies ([project] dependencies of its pyproject.toml; "
        "`requirements` for a script or a bare package)\n"
    )


def _call_problem(function: Any) -> str:
    """Why ``function(checkpoint_dir, params)`` cannot be called, or ``""`` when it can.

    Told before the call, so a wrong signature is named as such rather than as a ``TypeError``
    raised from inside the evaluation.
    """
    if not callable(function):
        return f"is a {type(function).__name__}, not a function"
    try:
        inspect.signature(function).bind("checkpoint_dir", {})
    except TypeError as exc:
        return f"cannot be called with (checkpoint_dir, params): {exc}"
    except ValueError:  # no signature to read (some built-ins): the call will tell
        return ""
    return ""


def main(argv: list[str]) -> int:
    """Run one evaluation; see the module docstring for the arguments and exit codes."""
    entry_point, checkpoint_dir, params_path, result_path = argv
    module_name, _, function_name = entry_point.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if _is_absent(exc, module_name):  # the module itself: its traceback says nothing more
            sys.stderr.write(
                f"entry_point: cannot import module {module_name!r}: {exc} (neither the package "
                "nor its dependencies hold it)\n"
            )
        else:  # the module is there, but an import of its own failed: show where
            sys.stderr.write(
                f"entry_point: cannot import module {module_name!r} from the package:\n"
                + traceback.format_exc()
                + _undeclared_hint(exc, module_name)
            )
        return EXIT_ENTRY_POINT
    function: Any = getattr(module, function_name, _MISSING)
    if function is _MISSING:
        sys.stderr.write(f"entry_point: module {module_name!r} has no function {function_name!r}\n")
        return EXIT_ENTRY_POINT
    problem = _call_problem(function)
    if problem:
        sys.stderr.write(f"entry_point: {entry_point} {problem}; it must be {SIGNATURE}\n")
        return EXIT_ENTRY_POINT
    with open(params_path, encoding="utf-8") as handle:
        params = json.load(handle)
    try:
        result = function(checkpoint_dir, params)
    except SystemExit as exc:  # its status could pass for one of ours (3: not importable)
        sys.stderr.write(
            f"{entry_point} called sys.exit({exc.code!r}) instead of returning its metrics (a "
            f"dict of metric name -> number)\n" + traceback.format_exc()
        )
        return EXIT_RAISED
    except Exception:  # noqa: BLE001 - any failure of user code is reported, with its traceback
        sys.stderr.write(f"{entry_point} raised:\n" + traceback.format_exc())
        return EXIT_RAISED
    try:
        data = json.dumps(to_jsonable(result))
    except (TypeError, ValueError) as exc:
        sys.stderr.write(f"{entry_point} returned a result that is not JSON-able: {exc}\n")
        return EXIT_BAD_RESULT
    with open(result_path, "w", encoding="utf-8") as handle:
        handle.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
