"""Resource names as Vertex AI returns them: project numbers, int64 ids, location-scoped parents.

Vertex AI accepts a project by ID (``my-project``) or by number (``123456789012``) in every
request and always answers with the number. The emulator has no Resource Manager to ask, so it
derives a stable 12-digit number from the project ID (the same on every machine and every run);
a request by that number and a request by the ID reach the same jobs.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from kfp_spot.vertex.values import INT64_MAX

__all__ = [
    "INT64_MAX",
    "Parent",
    "is_project_number",
    "new_id",
    "parse_parent",
    "project_number",
]

_FIRST_ID = 10**18  # Vertex's ids are 19-digit int64 values
_NUMBER = re.compile(r"[0-9]{1,19}")
_PARENT = re.compile(r"projects/([^/]+)/locations/([^/]+)")


def is_project_number(project: str) -> bool:
    """Whether ``project`` is written as a number (project IDs start with a letter)."""
    return bool(_NUMBER.fullmatch(project))


def project_number(project: str) -> str:
    """The project number of ``project`` (itself when it is already a number).

    A project ID maps to a stable 12-digit number (a hash of the ID, first digit non-zero), the
    length of real Google Cloud project numbers.
    """
    if is_project_number(project):
        return str(int(project))  # "0042" and "42" are the same project
    digest = hashlib.sha256(project.encode("utf-8", "surrogatepass")).digest()
    return str(int.from_bytes(digest[:8], "big") % (9 * 10**11) + 10**11)


def new_id() -> str:
    """A random resource id as Vertex draws them: 19 digits, at most the int64 maximum."""
    return str(_FIRST_ID + secrets.randbelow(INT64_MAX - _FIRST_ID + 1))


class Parent:
    """``projects/P/locations/L``, with P given as an ID or a number.

    Attributes:
        project: the project as the request wrote it (ID or number).
        location: the location.
    """

    def __init__(self, project: str, location: str) -> None:
        self.project = project
        self.location = location

    @property
    def number(self) -> str:
        """The project number."""
        return project_number(self.project)

    @property
    def canonical(self) -> str:
        """``projects/NUMBER/locations/L``: the form Vertex answers with and the store keeps."""
        return f"projects/{self.number}/locations/{self.location}"


def parse_parent(parent: str) -> Parent:
    """Split ``projects/P/locations/L`` (P an ID or a number).

    Raises:
        ValueError: ``parent`` has another shape.
    """
    match = _PARENT.fullmatch(parent)
    if not match:
        raise ValueError(f"{parent!r} is not projects/PROJECT/locations/LOCATION")
    return Parent(match.group(1), match.group(2))
