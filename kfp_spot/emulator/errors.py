"""API errors of the emulator and the HTTP status each is answered with.

Errors are Google JSON errors (``{"error": {"code", "message", "status", "details"}}``) with the
HTTP status that ``google.api_core.exceptions`` maps back to the same canonical status, so a real
client raises the same exception class it would against Vertex AI.
"""

from __future__ import annotations

import re
from typing import Any

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


class ApiError(Exception):
    """An error answered as a Google JSON error (``{"error": {"code", "message", "status"}}``).

    Attributes:
        status: the canonical status name, e.g. ``INVALID_ARGUMENT``.
        message: what is wrong and what would be valid.
        field: the offending request field, when there is one.
    """

    def __init__(self, status: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field

    @property
    def http_status(self) -> int:
        """The HTTP status ``google.api_core.exceptions`` maps back to this status."""
        return HTTP_STATUS.get(self.status, 500)

    def to_json(self) -> dict[str, Any]:
        """The Google JSON error body."""
        error: dict[str, Any] = {
            "code": self.http_status,
            "message": self.message,
            "status": self.status,
        }
        if self.field:
            error["details"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [{"field": self.field, "description": self.message}],
                }
            ]
        return {"error": error}


_PARSE_PATH = re.compile(r'at "CustomJob\.([^"]+?)\.?"')


def parse_error(err: Exception) -> ApiError:
    """A 400 for a body the message classes refuse, naming the field where the parser stopped."""
    text = str(err)
    match = _PARSE_PATH.search(text)
    field = match.group(1) if match else None
    hint = ""
    if "multiple" in text and '"task" oneof' in text:
        hint = " Set exactly one of containerSpec or pythonPackageSpec per worker pool."
    elif "multiple" in text and "oneof" in text:
        hint = " Set only one field of that oneof."
    return ApiError("INVALID_ARGUMENT", f"Invalid JSON payload received. {text}{hint}", field)
