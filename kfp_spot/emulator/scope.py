"""The project and location a request names, judged as Vertex AI judges them before anything else.

Vertex AI answers a project that is neither a project ID nor a project number (the floor's
:func:`~kfp_spot.vertex.values.check_project_id`) with 403 PERMISSION_DENIED, ``Permission
'aiplatform.customJobs.create' denied on resource
'//aiplatform.googleapis.com/projects/P_UP/locations/us-central1' (or it may not exist).``, and a
location that is no Vertex AI region with a 400. The route table checks every request's
resource here before its query or body is read; CustomJob create and list share the location's
refusal (:func:`check_location`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kfp_spot.emulator.errors import ApiError
from kfp_spot.vertex.regions import check_region
from kfp_spot.vertex.values import InvalidValueError, check_project_id

__all__ = ["RESOURCE_PREFIX", "check_location", "check_scope"]

# The service a denied permission names its resource in, as Vertex AI writes it.
RESOURCE_PREFIX = "//aiplatform.googleapis.com/"
_SCOPE = re.compile(r"projects/([^/]+)/locations/([^/]+)(?:/([^/:]+))?")


def check_location(location: str, field: str) -> None:
    """Refuse a location that is no Vertex AI region, as Vertex AI does: a 400 naming ``field``.

    Raises:
        ApiError: INVALID_ARGUMENT naming ``field`` (``parent``, ``name``), the region rule's
            message (the closest regions, how to allow a newer one).
    """
    try:
        check_region(location)
    except InvalidValueError as err:
        raise ApiError("INVALID_ARGUMENT", f"{field}: location {err}", field) from None


def check_scope(permission: str, params: Mapping[str, str]) -> None:
    """Refuse a request whose resource names no valid project, or (Vertex's methods) no region.

    Args:
        permission: the IAM permission Vertex AI checks for the method (``{collection}`` stands
            for the resource's collection); "" for the emulator's own methods, whose location is
            theirs to judge.
        params: the path's variables; the resource is ``parent`` or ``name`` when it begins
            ``projects/P/locations/L``, and a request without one is not checked.

    Raises:
        ApiError: PERMISSION_DENIED (403) for a project that is neither a project ID nor a
            project number, in Vertex AI's words (the field violation says what a project would
            be); INVALID_ARGUMENT for an unknown location (:func:`check_location`).
    """
    field = "parent" if "parent" in params else "name"
    resource = params.get(field, "")
    scope = _SCOPE.match(resource)
    if scope is None:
        return
    project, location, collection = scope.groups()
    try:
        check_project_id(project)
    except InvalidValueError as err:
        named = permission.format(collection=collection)
        denied = f"Permission '{named}' denied" if named else "Permission denied"
        raise ApiError(
            "PERMISSION_DENIED",
            f"{denied} on resource '{RESOURCE_PREFIX}{resource}' (or it may not exist).",
            field,
            description=f"{field}: {err}",
        ) from None
    if permission:
        check_location(location, field)
