r"""API errors of the emulator and the HTTP status of each.

Errors are Google JSON errors (``{"error": {"code", "message", "status", "details"}}``) with the
HTTP status that ``google.api_core.exceptions`` maps back to the same canonical status, so a real
client raises the same exception class it would against Vertex AI. A rejected request names the
offending field in a ``google.rpc.BadRequest`` detail, in the forms Vertex AI uses: a body the
JSON mapping refuses (:mod:`kfp_spot.emulator.payloads`), the violation's field being that request
path; a CustomJob the service's rules refuse (:func:`rule_error`): ``List of found errors:\t1.Field:
job_spec.worker_pool_specs[0].replica_count; Message: ...``, the violation's field being the
CustomJob's own snake_case path.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["HTTP_STATUS", "MAX_MESSAGE", "ApiError", "proto_path", "rule_error"]

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
MAX_MESSAGE = 2000  # characters of an error message (it may quote what was sent)


class ApiError(Exception):
    """An error answered as a Google JSON error (``{"error": {"code", "message", "status"}}``).

    Attributes:
        status: the canonical status name, e.g. ``INVALID_ARGUMENT``.
        message: what is wrong and what would be valid.
        field: the offending request field (named in a ``BadRequest`` field violation).
        code: the HTTP status; by default the one ``google.api_core`` maps to ``status``.
        description: the field violation's description when it says more than ``message``
            (e.g. what a valid value would be, where Vertex AI's message does not say).
        violations: every field violation, ``(field, description)``, when there are several
            (a body with several unknown names); ``field`` None for one that names no field.
            ``field`` is then the first one's.
    """

    def __init__(
        self,
        status: str,
        message: str,
        field: str | None = None,
        *,
        code: int | None = None,
        description: str | None = None,
        violations: Sequence[tuple[str | None, str]] = (),
    ) -> None:
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE] + "... (truncated)"
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.code = code
        self.description = description or message
        self.violations = list(violations)

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
        violations = self.violations or (
            [(self.field, self.description)] if self.field is not None else []
        )
        if violations:
            error["details"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [
                        {"description": text}
                        if where is None
                        else {"field": where, "description": text}
                        for where, text in violations
                    ],
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
