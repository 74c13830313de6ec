"""Reading numbers and times from JSON at the edges; errors name the field."""

from __future__ import annotations

import datetime as dt
import enum
import math
from collections.abc import Mapping
from typing import Any, TypeVar

from kfp_spot.vertex.values import InvalidValueError, rfc3339_seconds

E = TypeVar("E", bound=enum.Enum)


class AccountingError(ValueError):
    """An input the accounting cannot read; the message names the field."""


def enum_member(kind: type[E], text: str, aliases: Mapping[str, E], unknown: E) -> E:
    """The member of ``kind`` whose value (or alias) is ``text``; ``unknown`` for anything else.

    Ledgers and attempt records come from other versions and other writers: a name we do not
    know is counted as unknown, never an error.
    """
    if text in aliases:
        return aliases[text]
    try:
        return kind(text)
    except ValueError:
        return unknown


MIN_EPOCH = -62135596800.0
"""0001-01-01T00:00:00Z: the earliest time a datetime (and a report's timeline) can show."""
MAX_EPOCH = 253402300799.0
"""9999-12-31T23:59:59Z: the latest; past it ``time.gmtime`` overflows (a bare traceback)."""


def parse_time(value: Any, where: str = "time") -> float | None:
    """Epoch seconds from a number, a numeric string, an RFC 3339 string or a datetime.

    Fractions finer than microseconds (protobuf's nanoseconds) are truncated.

    Returns:
        None when ``value`` is None or empty.

    Raises:
        AccountingError: naming ``where`` when the value is none of those.
    """
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        return stamp.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or not MIN_EPOCH <= value <= MAX_EPOCH:
            raise AccountingError(
                f"{where} must be a finite time in years 1 to 9999 (epoch seconds "
                f"{MIN_EPOCH:.0f} to {MAX_EPOCH:.0f}), got {value!r}"
            )
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            number = None
        if number is not None:
            return parse_time(number, where)
        try:
            return rfc3339_seconds(text, naive_utc=True)
        except InvalidValueError:
            pass
        try:  # the other ISO 8601 forms this Python reads (a date alone, ...)
            parsed = dt.datetime.fromisoformat(text)
        except ValueError:
            parsed = None
        if parsed is not None:
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=dt.timezone.utc)
            return parsed.timestamp()
    raise AccountingError(f"{where} must be a time (epoch seconds or RFC 3339), got {value!r}")


def number(row: Mapping[str, Any], key: str, where: str, default: float = 0.0) -> float:
    """``row[key]`` as a finite number (protobuf JSON sends int64 as strings: "12" is fine).

    Raises:
        AccountingError: naming ``where.key`` when it is not a number.
    """
    value = row.get(key)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise AccountingError(f"{where}.{key} must be a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError) as exc:
        raise AccountingError(f"{where}.{key} must be a number, got {value!r}") from exc
    if not math.isfinite(out):
        raise AccountingError(f"{where}.{key} must be finite, got {value!r}")
    return out


def step_of(record: Mapping[str, Any], *keys: str) -> int | None:
    """The first of ``keys`` that holds a step number (an int, or its text); None otherwise."""
    for key in keys:
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
    return None
