"""How deeply lists and dicts nest in a value, counted without recursion.

One rule for every bound on nesting (a component input's JSON, a checkpoint's metrics): counted
here, not left to a ``RecursionError`` of ``json``, whose C code reaches far deeper on Python 3.13
than on 3.11, so a bound that depended on it held on one Python and not on the other.
"""

from __future__ import annotations

from typing import Any


def nesting_depth(value: Any, limit: int) -> int:
    """How deeply lists and dicts nest in ``value``, counting up to ``limit + 1`` at most.

    A string is read as JSON text without parsing it (brackets outside string literals), so a
    hostile value costs one pass and never reaches the recursion limit of a parser.
    """
    if isinstance(value, str):
        return _json_text_depth(value, limit)
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _json_text_depth(text: str, limit: int) -> int:
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest
