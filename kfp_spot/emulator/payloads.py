r"""A request's JSON body, read as Vertex AI's front end reads it, and the 400s for one it refuses.

Every 400 names the request path refused, in Google's words:

- a body that is no JSON, or JSON the API cannot hold (``NaN``, a lone surrogate, too deep);
- names the JSON mapping does not know: ``Invalid JSON payload received. Unknown name "x" at
  'custom_job': Cannot find field.``, each of them (one line of the message and one field
  violation each, as Google's front end answers), at any depth; at the top of a body that is the
  whole request, ``Unknown name "x": Cannot find field.`` and a violation that names no field;
- a value the mapping refuses: ``Invalid value at 'custom_job.job_spec.scheduling.strategy'
  (type.googleapis.com/google.cloud.aiplatform.v1.Scheduling.Strategy), "CHEAP"``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from google.protobuf import descriptor as _descriptor
from google.protobuf import json_format, message_factory

from kfp_spot.emulator.errors import ApiError

__all__ = [
    "MAX_JSON_DEPTH",
    "WHOLE_REQUEST",
    "check_request_field",
    "decode_json",
    "parse_message",
    "refuse_unknown",
    "unknown_name",
    "unknown_names_error",
]

WHOLE_REQUEST = "*"  # the request field of a body that is the whole request (``body: "*"``)
MAX_JSON_DEPTH = 64  # a CustomJob nests about 8 deep; anything far deeper is not one
# What the protobuf runtime raises for a JSON value it cannot take (OverflowError: ``Infinity`` as
# an enum; SystemError / UnicodeError: a lone surrogate reaching the C runtime).
PARSE_FAILURES = (
    json_format.ParseError,
    ValueError,
    TypeError,
    AttributeError,
    KeyError,
    IndexError,
    OverflowError,
    SystemError,
    UnicodeError,
    RecursionError,
)
_WELL_KNOWN = frozenset(
    f"google.protobuf.{name}"
    for name in [
        "Any",
        "Duration",
        "Timestamp",
        "FieldMask",
        "Struct",
        "Value",
        "ListValue",
        "Empty",
        "BoolValue",
        "BytesValue",
        "DoubleValue",
        "FloatValue",
        "Int32Value",
        "Int64Value",
        "StringValue",
        "UInt32Value",
        "UInt64Value",
    ]
)
_TYPE_NAMES = {
    value: name for name, value in vars(_descriptor.FieldDescriptor).items() if name[:5] == "TYPE_"
}


def _walk(value: Any, path: str) -> Iterator[tuple[Any, str, int]]:
    """Every JSON value under ``value`` with its path and depth, without recursion."""
    stack = [(value, path, 1)]
    while stack:
        node, where, depth = stack.pop()
        yield node, where, depth
        if isinstance(node, dict):
            stack.extend((v, f"{where}.{k}", depth + 1) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(node))


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _refuse_constant(name: str) -> Any:
    raise ValueError(f'{name} is not JSON (write it as a string, e.g. "{name}")')


def decode_json(raw: bytes, field: str) -> Any:
    """The JSON document of a request body.

    Refused with a 400 naming ``field`` (the request field the body binds to): text that is not
    JSON or not UTF-8, the non-JSON constants ``NaN`` and ``Infinity``, strings (keys too) that
    are not valid Unicode (a lone surrogate), nesting deeper than ``MAX_JSON_DEPTH``.
    """
    try:
        doc = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        doc, problem = None, f"nested deeper than {MAX_JSON_DEPTH} levels"
    except (ValueError, UnicodeDecodeError) as err:
        doc, problem = None, str(err)
    else:
        problem = ""
        for node, where, depth in _walk(doc, field):
            if depth > MAX_JSON_DEPTH:
                problem = f"nested deeper than {MAX_JSON_DEPTH} levels at {where}"
                break
            texts = (
                [node] if isinstance(node, str) else list(node) if isinstance(node, dict) else []
            )
            bad = next((t for t in texts if not _utf8(t)), None)
            if bad is not None:
                problem = f"invalid Unicode (a lone surrogate) in {json.dumps(bad)} at {where}"
                break
    if problem:
        raise ApiError("INVALID_ARGUMENT", f"Invalid JSON payload received. {problem}", field)
    return doc


def _parses(cls: Any, value: Any) -> bool:
    try:
        json_format.ParseDict(value, cls())
    except PARSE_FAILURES:
        return False
    return True


def _type_name(field: Any) -> str:
    if field.enum_type is not None:
        return f"type.googleapis.com/{field.enum_type.full_name}"
    if field.message_type is not None:
        return f"type.googleapis.com/{field.message_type.full_name}"
    return _TYPE_NAMES.get(field.type, "TYPE_UNKNOWN")


def _invalid_value(path: str, field: Any, value: Any) -> tuple[str, str]:
    shown = json.dumps(value)
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    return path, f"Invalid value at '{path}' ({_type_name(field)}), {shown}"


def unknown_name(key: str, path: str) -> tuple[str | None, str]:
    """The field violation of an unknown name ``key`` at ``path`` (Google's words).

    At the top of a body that is the whole request (``path`` ``*``) Google names no field: the
    violation has only its description, ``Unknown name "x": Cannot find field.``
    """
    if path == WHOLE_REQUEST:  # the body is the request itself: no field to name
        return (
            None,
            f"Invalid JSON payload received. Unknown name {json.dumps(key)}: Cannot find field.",
        )
    message = f"Invalid JSON payload received. Unknown name {json.dumps(key)} at '{path}'"
    return path, message + ": Cannot find field."


def _unknown_names(desc: Any, data: dict[str, Any], path: str) -> list[tuple[str | None, str]]:
    """Every name of ``data`` and of the messages it holds that ``desc`` lacks, in order.

    Google's JSON mapping names each of them (one field violation and one line of the message
    each), not only the first; values are not judged here (a value of the wrong kind is left to
    :func:`_locate`).
    """
    found: list[tuple[str | None, str]] = []
    for key, value in data.items():
        field = desc.fields_by_camelcase_name.get(key) or desc.fields_by_name.get(key)
        if field is None:
            found.append(unknown_name(key, path))
            continue
        sub = field.message_type
        if sub is None or sub.GetOptions().map_entry or sub.full_name in _WELL_KNOWN:
            continue
        where = f"{path}.{field.name}"
        if isinstance(value, dict):
            found.extend(_unknown_names(sub, value, where))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    found.extend(_unknown_names(sub, item, f"{where}[{index}]"))
    return found


def unknown_names_error(found: Sequence[tuple[str | None, str]]) -> ApiError:
    """The 400 for a body with unknown names: one line and one field violation for each.

    Args:
        found: each unknown name's violation, from :func:`unknown_name`, in the body's order.
    """
    return ApiError(
        "INVALID_ARGUMENT", "\n".join(text for _, text in found), found[0][0], violations=found
    )


def refuse_unknown(names: Iterable[str]) -> None:
    """Refuse the top-level ``names`` a body that is the whole request should not have, if any."""
    found = [unknown_name(name, WHOLE_REQUEST) for name in names]
    if found:
        raise unknown_names_error(found)


def _locate(desc: Any, data: dict[str, Any], path: str) -> tuple[str, str] | None:
    """The path of the first field of ``data`` the JSON mapping refuses, and Google's message.

    Each field is tried alone with the API's own parser, so the path is exact without
    reimplementing the mapping; None when every field parses alone (a conflict between fields).
    """
    cls = message_factory.GetMessageClass(desc)
    for key, value in data.items():
        field = desc.fields_by_camelcase_name.get(key) or desc.fields_by_name.get(key)
        if field is None:
            where, text = unknown_name(key, path)
            return where or path, text
        if _parses(cls, {key: value}):
            continue
        where = f"{path}.{field.name}"
        sub = field.message_type
        if sub is None or sub.GetOptions().map_entry or sub.full_name in _WELL_KNOWN:
            return _invalid_value(where, field, value)
        repeated = getattr(field, "is_repeated", None)
        if repeated is None:  # protobuf < 5.29 has only ``label``
            repeated = field.label == field.LABEL_REPEATED
        items = list(enumerate(value)) if repeated and isinstance(value, list) else [(None, value)]
        sub_cls = message_factory.GetMessageClass(sub)
        for index, item in items:
            at = where if index is None else f"{where}[{index}]"
            if not isinstance(item, dict):
                return _invalid_value(at, field, item)
            if not _parses(sub_cls, item):
                return _locate(sub, item, at) or (at, "")
        return _invalid_value(where, field, value)
    return None


def parse_message(doc: Any, message_cls: Any, field: str) -> Any:
    """Parse a decoded JSON body into a new ``message_cls`` (raw protobuf), refusing unknown names.

    Args:
        doc: the body (from :func:`decode_json`).
        message_cls: the raw protobuf message class, e.g. ``CustomJob.pb()``.
        field: the request field the body binds to, e.g. ``custom_job``.

    Raises:
        ApiError: INVALID_ARGUMENT whose field violation is the exact request path refused.
    """
    if not isinstance(doc, dict):
        raise ApiError(
            "INVALID_ARGUMENT",
            f"Invalid JSON payload received. '{field}' must be a JSON object, got "
            f"{type(doc).__name__ if doc is not None else 'null'}",
            field,
        )
    message = message_cls()
    try:
        json_format.ParseDict(doc, message)
    except PARSE_FAILURES as err:
        unknown = _unknown_names(message_cls.DESCRIPTOR, doc, field)
        if unknown:
            raise unknown_names_error(unknown) from None
        located = _locate(message_cls.DESCRIPTOR, doc, field)
        where, text = located if located else (field, "")
        detail = str(err).split("\n", 1)[0]
        if not text:
            text = f"Invalid JSON payload received at '{where}'. {detail}"
        if "oneof" in detail and '"task"' in detail:
            text += " Set exactly one of containerSpec or pythonPackageSpec per worker pool."
        elif "oneof" in detail:
            text += " Set only one field of that oneof."
        raise ApiError("INVALID_ARGUMENT", text, where) from None
    return message


def check_request_field(name: str, value: Any) -> None:
    """Refuse a request field a body or query repeats: ``name`` a string, ``timeout`` a Duration.

    As Google's front end refuses them (``Invalid value at 'timeout' (...Duration), "soon"``),
    before the resource is looked up; other fields are their handlers' to check (the emulator's
    own, such as ``replica`` or ``available``).

    Raises:
        ApiError: INVALID_ARGUMENT naming the field.
    """
    if name == "name" and not isinstance(value, str):
        kind = "TYPE_STRING"
    elif name == "timeout" and not _is_duration(value):
        kind = "type.googleapis.com/google.protobuf.Duration"
    else:
        return
    raise ApiError(
        "INVALID_ARGUMENT", f"Invalid value at '{name}' ({kind}), {json.dumps(value)}", name
    )


def _is_duration(value: Any) -> bool:
    """Whether ``value`` is a protobuf Duration in JSON (``3.5s``)."""
    from google.protobuf import duration_pb2

    try:
        duration_pb2.Duration().FromJsonString(value)
    except (ValueError, TypeError, AttributeError):  # not such text, or no text at all
        return False
    return True
