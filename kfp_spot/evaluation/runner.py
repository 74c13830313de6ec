"""Runs inside the package's environment: import the entry point, call it, write its result.

``python -m kfp_spot.evaluation.runner ENTRY_POINT CHECKPOINT_DIR PARAMS_JSON RESULT_JSON``

Exit status: 0 with the result written; 3 when the entry point cannot be imported or is not
callable; 4 when it raised or called ``sys.exit``; 5 when its result cannot be written as JSON.
The evaluator reads the message from stderr.
"""

from __future__ import annotations

import importlib
import json
import numbers
import sys
import traceback
from typing import Any

EXIT_ENTRY_POINT = 3
EXIT_RAISED = 4
EXIT_BAD_RESULT = 5


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
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    raise TypeError(f"{type(value).__name__} value {value!r} is not a number, list or mapping")


def main(argv: list[str]) -> int:
    """Run one evaluation; see the module docstring for the arguments and exit codes."""
    entry_point, checkpoint_dir, params_path, result_path = argv
    module_name, _, function_name = entry_point.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        sys.stderr.write(
            f"entry_point: cannot import module {module_name!r} from the package:\n"
            + traceback.format_exc()
        )
        return EXIT_ENTRY_POINT
    function = getattr(module, function_name, None)
    if not callable(function):
        sys.stderr.write(f"entry_point: module {module_name!r} has no function {function_name!r}\n")
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
