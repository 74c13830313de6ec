"""Why a dict or list in a training state is stored by no adapter: the item at fault, and the fix.

A state value that is a dict or a list is stored as exact JSON (numbers, strings, bools, None,
and lists and dicts of them) or, a dict of NumPy arrays only, as an ``.npz``. A hyper-parameter
dict holding one tuple, one ``numpy.float32`` or one ``inf`` is neither: the refusal names that
item by its path (``state['hparams']['hidden']``), not the whole dict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any


def _type_name(value: Any) -> str:
    kind = type(value)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def _is_array(value: Any) -> bool:
    kind = type(value)
    return kind.__module__ == "numpy" and kind.__name__ == "ndarray"


def _is_numpy_scalar(value: Any) -> bool:
    kind = type(value)
    return kind.__module__ == "numpy" and hasattr(value, "item") and not _is_array(value)


def _items(value: Any, path: str, in_list: bool = False) -> Iterator[tuple[str, Any, bool]]:
    """Each item of ``value`` with its path and whether a list holds it, depth first."""
    yield path, value, in_list
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _items(item, f"{path}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _items(item, f"{path}[{index}]", True)


_JSON_TYPES = (bool, int, float, str, dict, list)


def _nobody(value: Any) -> str | None:
    return None


def _fix(
    path: str, value: Any, in_list: bool, stored_alone: Callable[[Any], str | None] = _nobody
) -> str | None:
    """What is wrong with one item for exact JSON, and what would be stored; None when fine."""
    kind = type(value)
    if value is None or kind in (bool, int, str, list):
        return None
    if kind is float:
        if math.isfinite(value):
            return None
        return f"{path} is {value!r}, which JSON does not hold (finite numbers only)"
    if kind is dict:
        bad = [k for k in value if type(k) is not str][:1]  # a key may be None
        if bad:
            bad = bad[0]
            return (
                f"{path} has the key {bad!r} ({_type_name(bad)}); JSON's keys are strings: "
                "use str keys"
            )
        return None
    if isinstance(value, tuple):
        return f"{path} is a tuple, which JSON would give back as a list: use a list"
    if _is_numpy_scalar(value):
        return f"{path} is a {_type_name(value)}: use a Python value ({path}.item())"
    base = next((base for base in _JSON_TYPES if isinstance(value, base)), None)
    if base is not None:  # an IntEnum, an OrderedDict, a str subclass
        return (
            f"{path} is a {_type_name(value)}, which JSON would give back as a plain "
            f"{base.__name__}: use {base.__name__}({path})"
        )
    if _is_array(value) and in_list:
        return (
            f"{path} is a NumPy array in a list: only a dict of arrays is stored (an .npz); "
            "name them ({'w0': ..., 'w1': ...})"
        )
    if _is_array(value):
        return (
            f"{path} is a NumPy array among values that are not: only a dict of arrays alone "
            "is stored (an .npz); give the arrays a state key of their own"
        )
    adapter = stored_alone(value)
    if adapter is not None and adapter != "json":  # an RNG, an estimator, a Booster
        return (
            f"{path} is a {_type_name(value)}, which the {adapter!r} adapter stores as a "
            "state value of its own, not inside a dict or list: give it a state key of its own"
        )
    return f"{path} is a {_type_name(value)}, which neither JSON nor an .npz stores"


def _scalar_fix(root: str, value: Any) -> str | None:
    """Why a number or string that is a state value of its own is not stored, or None."""
    if type(value) is float:
        return (
            f"{root} is {value!r}, which JSON does not hold (finite numbers only); "
            f"numpy.float64({root}) is stored exactly (and given back as a numpy.float64)"
        )
    if isinstance(value, _JSON_TYPES[:4]):
        return _fix(root, value, False)
    if type(value) is complex:
        return (
            f"{root} is {value!r}, which JSON does not hold; numpy.complex128({root}) is "
            "stored exactly (and given back as a numpy.complex128)"
        )
    return None


def _is_array_like(value: Any) -> bool:
    """An array of another library (JAX, CuPy, a framework's tensor) that NumPy converts."""
    return (
        hasattr(type(value), "__array__")
        and type(value).__module__.split(".")[0] != "numpy"
        and not isinstance(value, (dict, list, tuple, str, bytes))
    )


def _array_like(path: str, value: Any) -> str:
    return (
        f"{path} is a {_type_name(value)}, not a NumPy array: store numpy.asarray({path}) "
        "(which copies it to host memory), or register an Adapter for it"
    )


def unstored_item(
    key: str, value: Any, stored_alone: Callable[[Any], str | None] = _nobody
) -> str | None:
    """Why ``state[key]`` (a dict, a list or a number) is stored by no adapter, or None.

    None for other values, which the caller names by their type. ``stored_alone``: the name of
    the adapter that stores a value as a state value of its own, or None.
    """
    root = f"state[{key!r}]"
    if _is_array_like(value):
        return _array_like(root, value)
    if not isinstance(value, (dict, list, tuple)):
        return _scalar_fix(root, value)
    for path, item, _ in _items(value, root):  # first: beside NumPy arrays, it is the fault
        if _is_array_like(item):
            return _array_like(path, item)
    if isinstance(value, dict) and value and all(_is_array(v) for v in value.values()):
        keys = [k for k in value if not isinstance(k, str)][:1]  # a key may be None
        if keys:
            bad = keys[0]
            return f"{root} has the key {bad!r} ({_type_name(bad)}): an .npz's names are strings"
    for path, item, in_list in _items(value, root):
        if (
            isinstance(item, dict)
            and path != root
            and item
            and all(_is_array(v) for v in item.values())
        ):
            return (
                f"{path} is a dict of NumPy arrays inside another value: only one level is "
                "stored as an .npz; give it a state key of its own, or flatten its names "
                "('layer1/W')"
            )
        found = _fix(path, item, in_list, stored_alone)
        if found:
            return found
    return None
