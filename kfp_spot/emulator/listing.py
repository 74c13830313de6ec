"""What a list answers besides its filter: ``orderBy`` and ``readMask``.

``orderBy`` (:func:`compile_order`, :func:`sort_by`; ``models.list`` and ``endpoints.list`` only:
``ListCustomJobsRequest`` has no such field) is ``display_name``, ``create_time`` or
``update_time``, each optionally followed by ``desc``, separated by commas.
``readMask`` (:func:`field_mask`, :func:`masked`) is field paths separated by commas; only those
fields are answered. A malformed one is a :class:`~kfp_spot.emulator.filters.FilterError`, which
the list answers as a 400 naming the parameter.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import field_mask_pb2

from kfp_spot.emulator.filters import MAX_LENGTH, FilterError

__all__ = ["ORDER_FIELDS", "compile_order", "field_mask", "masked", "sort_by"]

# The fields orderBy takes on models.list and endpoints.list.
ORDER_FIELDS = ("display_name", "create_time", "update_time")


def compile_order(text: str, fields: tuple[str, ...] = ORDER_FIELDS) -> list[tuple[str, bool]]:
    """The ``orderBy`` of ``models.list`` / ``endpoints.list``: ``[(field, descending), ...]``.

    ``display_name, create_time desc``: fields separated by commas, each ascending unless
    followed by ``desc`` (the pages' words: "Use "desc" after a field name for descending";
    https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.models/list).

    Raises:
        FilterError: an empty item, a field not in ``fields``, or a word other than ``desc``.
    """
    order: list[tuple[str, bool]] = []
    if not text.strip():
        return order
    if len(text) > MAX_LENGTH:
        raise FilterError(f"is {len(text)} characters long; at most {MAX_LENGTH} are accepted")
    for item in text.split(","):
        words = item.split()
        if not words or words[0] not in fields or words[1:] not in ([], ["desc"]):
            raise FilterError(
                f"{item.strip()!r} is not a field to order by; give {', '.join(fields)}, each "
                "optionally followed by desc, separated by commas (e.g. display_name, "
                "create_time desc)"
            )
        order.append((words[0], bool(words[1:])))
    return order


def sort_by(items: list[Any], order: list[tuple[str, bool]]) -> list[Any]:
    """``items`` (protobuf messages) in ``order`` (:func:`compile_order`); ties keep their order.

    Timestamps compare as timestamps, strings as strings.
    """
    out = list(items)
    for field, descending in reversed(order):  # stable sorts, the last key first

        def key(pb: Any, f: str = field) -> Any:
            return _sort_key(getattr(pb, f))

        out.sort(key=key, reverse=descending)
    return out


def _sort_key(value: Any) -> Any:
    return value.ToNanoseconds() if hasattr(value, "ToNanoseconds") else value


def field_mask(text: str, descriptor: Any) -> Any | None:
    """The ``readMask`` query parameter as a FieldMask of ``descriptor``'s message.

    Paths in camelCase, as the JSON mapping writes them, or snake_case, separated by commas;
    None (every field) for none or ``*``.

    Raises:
        FilterError: a path names a field the message does not have.
    """
    paths = [p.strip() for p in text.split(",") if p.strip()]
    if not paths or paths == ["*"]:
        return None
    mask = field_mask_pb2.FieldMask()
    for path in paths:
        mask.paths.append(re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), path))
    if not mask.IsValidForDescriptor(descriptor):
        article = "an" if descriptor.name[0] in "AEIOU" else "a"
        raise FilterError(
            f"{text!r} names a field {article} {descriptor.name} does not have; give "
            f"{descriptor.name} field paths separated by commas, e.g. displayName,labels"
        )
    return mask


def masked(pb: Any, mask: Any | None) -> Any:
    """``pb`` with only the fields of ``mask`` (:func:`field_mask`; None: ``pb`` itself)."""
    if mask is None:
        return pb
    out = type(pb)()
    mask.MergeMessage(pb, out)
    return out
