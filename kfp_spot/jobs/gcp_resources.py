"""``gcp_resources`` in GCPC's format: every CustomJob of the launch, read back to reattach.

The file is the JSON form of GCPC's ``GcpResources`` proto (what its launchers write with
``json_format.MessageToJson``), one resource per CustomJob the launch created, oldest first::

    {"resources": [
      {"resourceType": "CustomJob",
       "resourceUri": "https://REGION-aiplatform.googleapis.com/v1/projects/P/locations/L/customJobs/1"},
      {"resourceType": "CustomJob",
       "resourceUri": "https://REGION-aiplatform.googleapis.com/v1/projects/P/locations/L/customJobs/2"}
    ]}

A launch that resubmits after preemption keeps every earlier job in the list, so the console and
anyone reading the task's output can follow all of them; GCPC's own multi-resource launchers
(Dataproc batches, model evaluation slices) list several resources the same way. With one job
the file is byte for byte what GCPC's CustomJob launcher writes. The file is written before the
launcher waits on a job, so pipeline cancellation reaches the job it is watching.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence

from kfp_spot import fs

RESOURCE_TYPE = "CustomJob"
_NAME_RE = re.compile(r"/v1/(projects/[^/]+/locations/[^/]+/customJobs/[^/:]+)\Z")


class GcpResourcesError(ValueError):
    """The gcp_resources file exists but does not list CustomJobs."""


def render(resource_uris: Sequence[str]) -> str:
    """The file content for these CustomJobs, oldest first (what GCPC's MessageToJson writes)."""
    if isinstance(resource_uris, str):
        raise TypeError("render() takes a sequence of resource URIs, not one string")
    doc = {"resources": [{"resourceType": RESOURCE_TYPE, "resourceUri": u} for u in resource_uris]}
    return json.dumps(doc, indent=2)


def write(path: str, resource_uris: Sequence[str]) -> None:
    """Write ``path`` atomically: a crash leaves the old content or the new, never half.

    Args:
        path: the task's ``gcp_resources`` output file.
        resource_uris: every CustomJob of the launch so far, oldest first (the last one is the
            job being watched).
    """
    fs.atomic_write(os.path.abspath(path), render(resource_uris))


def read_job_names(path: str) -> list[str]:
    """The CustomJob names recorded in ``path``, oldest first; empty when there is none yet.

    Reads GCPC's own file (one job) as well as ours (every job of the launch).

    Raises:
        GcpResourcesError: when the file has content that is not a list of CustomJobs.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return []
    if not text.strip():
        return []
    try:
        resources = json.loads(text)["resources"]
    except (ValueError, KeyError, TypeError) as exc:
        raise GcpResourcesError(f"{path} is not a gcp_resources JSON document: {exc}") from exc
    if not isinstance(resources, list) or not resources:
        raise GcpResourcesError(f"{path} should list CustomJobs, found {resources!r}")
    names = []
    for resource in resources:
        if not isinstance(resource, dict):
            raise GcpResourcesError(f"{path}: {resource!r} is not a resource")
        uri = resource.get("resourceUri") or resource.get("resource_uri") or ""
        kind = resource.get("resourceType") or resource.get("resource_type")
        if kind != RESOURCE_TYPE:
            raise GcpResourcesError(f"{path} names a {kind!r}, not a {RESOURCE_TYPE}")
        match = _NAME_RE.search(uri) if isinstance(uri, str) else None
        if not match:
            raise GcpResourcesError(f"{path}: cannot find a CustomJob name in {uri!r}")
        if match.group(1) not in names:
            names.append(match.group(1))
    return names
