"""``gcp_resources`` in GCPC's format: written before waiting, read back to reattach.

The Vertex console links the job from it and pipeline cancellation reaches the job through it.

The file is the JSON form of GCPC's ``GcpResources`` proto with one resource::

    {"resources": [{"resourceType": "CustomJob",
                    "resourceUri": "https://REGION-aiplatform.googleapis.com/v1/projects/..."}]}
"""

from __future__ import annotations

import json
import os
import re

from kfp_spot import fs

RESOURCE_TYPE = "CustomJob"
_NAME_RE = re.compile(r"/v1/(projects/[^/]+/locations/[^/]+/customJobs/[^/:]+)\Z")


class GcpResourcesError(ValueError):
    """The gcp_resources file exists but does not name one CustomJob."""


def render(resource_uri: str) -> str:
    """The file content for one CustomJob (what GCPC's MessageToJson writes)."""
    doc = {"resources": [{"resourceType": RESOURCE_TYPE, "resourceUri": resource_uri}]}
    return json.dumps(doc, indent=2)


def write(path: str, resource_uri: str) -> None:
    """Write ``path`` atomically: a crash leaves the old content or the new, never half."""
    fs.atomic_write(os.path.abspath(path), render(resource_uri))


def read_job_name(path: str) -> str | None:
    """The CustomJob name recorded in ``path``, or None when there is none yet.

    Raises:
        GcpResourcesError: when the file has content that does not name exactly one CustomJob.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    if not text.strip():
        return None
    try:
        resources = json.loads(text)["resources"]
    except (ValueError, KeyError, TypeError) as exc:
        raise GcpResourcesError(f"{path} is not a gcp_resources JSON document: {exc}") from exc
    if not isinstance(resources, list) or len(resources) != 1:
        raise GcpResourcesError(f"{path} should name one resource, found {resources!r}")
    resource = resources[0]
    uri = resource.get("resourceUri") or resource.get("resource_uri") or ""
    kind = resource.get("resourceType") or resource.get("resource_type")
    if kind != RESOURCE_TYPE:
        raise GcpResourcesError(f"{path} names a {kind!r}, not a {RESOURCE_TYPE}")
    match = _NAME_RE.search(uri)
    if not match:
        raise GcpResourcesError(f"{path}: cannot find a CustomJob name in {uri!r}")
    return match.group(1)
