r"""API errors of the emulator, the HTTP status of each, and the 400s for bodies the API refuses.

Errors are Google JSON errors (``{"error": {"code", "message", "status", "details"}}``) with the
HTTP status that ``google.api_core.exceptions`` maps back to the same canonical status, so a real
client raises the same exception class it would against Vertex AI. A rejected request names the
offending field in a ``google.rpc.BadRequest`` detail, in the forms Vertex AI uses:

- a body the JSON mapping refuses: ``Invalid JSON payload received. Unknown name "x" at
  'custom_job': Cannot find field.`` or ``Invalid value at 'custom_job.job_spec.scheduling.strategy'
  (type.googleapis.com/google.cloud.aiplatform.v1.Scheduling.Strategy), "CHEAP"``, the violation's
  field being that request path;
- a CustomJob the service's rules refuse: ``List of found errors:\t1.Field:
  job_spec.worker_pool_specs[0].replica_count; Message: ...``, the violation's field being the
  CustomJob's own snake_case path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from google.protobuf import descriptor as _descriptor
from google.protobuf import json_format, message_factory

__all__ = [
    "HTTP_STATUS",
    "MAX_JSON_DEPTH",
    "ApiError",
    "decode_json",
    "parse_message",
    "proto_path",
    "rule_error",
]

HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
}
MAX_JSON_DEPTH = 64  # a CustomJob nests about 8 deep; anything far deeper is not one
MAX_MESSAGE = 2000  # characters of an error message (it may quote what was sent)
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


class ApiError(Exception):
    """An error answered as a Google JSON error (``{"error": {"code", "message", "status"}}``).

    Attributes:
        status: the canonical status name, e.g. ``INVALID_ARGUMENT``.
        message: what is wrong and what would be valid.
        field: the offending request field (named in a ``BadRequest`` field violation).
        code: the HTTP status; by default the one ``google.api_core`` maps to ``status``.
        description: the field violation's description when it says more than ``message``
            (e.g. what a valid value would be, where Vertex AI's message does not say).
    """

    def __init__(
        self,
        status: str,
        message: str,
        field: str | None = None,
        *,
        code: int | None = None,
        description: str | None = None,
    ) -> None:
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE] + "... (truncated)"
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.code = code
        self.description = description or message

    @property
    def http_status(self) -> int:
        """The HTTP status of the answer."""
        return self.code or HTTP_STATUS.get(self.status, 500)

    def to_json(self) -> dict[str, Any]:
        """The Google JSON error body."""
        error: dict[str, Any] = {
            "code": self.http_status,
            "message": self.message,
            "status": self.status,
        }
        if self.field is not None:
            error["details"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [{"field": self.field, "description": self.description}],
                }
            ]
        return {"error": error}


def proto_path(json_path: str, descriptor: Any) -> str:
    """A protobuf JSON path (``jobSpec.workerPoolSpecs[0].replicaCount``) in snake_case.

    Map keys (``labels.Team``) and names the message does not have are kept as written.
    """
    out: list[str] = []
    desc = descriptor
    map_key_next = False
    for part in json_path.split("."):
        match = re.fullmatch(r"([^\[\]]+)((?:\[\d+\])*)", part)
        if map_key_next or desc is None or not match:
            out.append(part)
            map_key_next = False
            continue
        name, index = match.groups()
        field = desc.fields_by_camelcase_name.get(name) or desc.fields_by_name.get(name)
        if field is None:
            out.append(part)
            desc = None
            continue
        out.append(field.name + index)
        desc = field.message_type
        if desc is not None and desc.GetOptions().map_entry:
            map_key_next = True
            desc = desc.fields_by_name["value"].message_type
    return ".".join(out)


def rule_error(json_path: str, message: str, descriptor: Any) -> ApiError:
    """The 400 for a resource that breaks one of the service's rules, in Vertex's words."""
    field = proto_path(json_path, descriptor)
    return ApiError(
        "INVALID_ARGUMENT", f"List of found errors:\t1.Field: {field}; Message: {message}", field
    )


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


def _locate(desc: Any, data: dict[str, Any], path: str) -> tuple[str, str] | None:
    """The path of the first field of ``data`` the JSON mapping refuses, and Google's message.

    Each field is tried alone with the API's own parser, so the path is exact without
    reimplementing the mapping; None when every field parses alone (a conflict between fields).
    """
    cls = message_factory.GetMessageClass(desc)
    for key, value in data.items():
        field = desc.fields_by_camelcase_name.get(key) or desc.fields_by_name.get(key)
        if field is None:
            message = f"Invalid JSON payload received. Unknown name {json.dumps(key)} at '{path}'"
            return path, message + ": Cannot find field."
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
