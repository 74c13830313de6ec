"""The rows of the CustomJob API and of the emulator's own methods, and the whole route table.

Routes (``{name}`` is ``projects/P/locations/L/customJobs/ID``, P a project ID or number;
``{operation}`` is ``projects/P/locations/L/operations/ID``; ``/v1beta1/`` is accepted as
``/v1/``):

- ``POST /v1/projects/P/locations/L/customJobs``: create; answers the CustomJob
- ``GET /v1/projects/P/locations/L/customJobs``: list (``filter``, ``pageSize``, ``pageToken``,
  ``readMask``)
- ``GET /v1/{name}``, ``POST /v1/{name}:cancel``, ``DELETE /v1/{name}`` (a long-running operation)
- ``GET /v1/{operation}`` (also ``/ui/...``, where the GAPIC client looks), ``DELETE``,
  ``POST {operation}:cancel``, ``POST {operation}:wait``
- ``POST /emulator/v1/{name}:preempt``: preempt the running attempt of a Spot job, or one
  replica's VM (body ``{"replica": "workerpool1-0"}``)
- ``GET /emulator/v1/{name}/attempts``: the billing ledger, ``{"attempts": [...]}``
- ``GET /emulator/v1/{name}/logs``: replica logs (``attempt``, ``replica``, ``tail``)
- ``GET /emulator/v1/customJobs``: every job of every project (name, state, displayName)
- ``POST /emulator/v1/projects/P/locations/L/spotCapacity``: give the region Spot capacity or take
  it away (body ``{"machineType": "*", "available": false, "seconds": 30, "refusal": "STOCKOUT"}``,
  all but ``available`` optional); answers the resulting row
- ``GET /emulator/v1/spotCapacity``: ``{"spotCapacity": [rows]}``, the settings that hold now
- ``GET /emulator/v1/health``: ``{"status": "ok"}``

The Model, Endpoint and Prediction rows are in :mod:`kfp_spot.emulator.serving.routes`;
:func:`route_table` puts both into the one :class:`~kfp_spot.emulator.routing.RouteTable`.
A new emulator method is one row in ``ROUTES`` (or the serving ``ROUTES``) and its handler.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import json_format

from kfp_spot.emulator import names
from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.jobs import CustomJobApi, message_json, preempt_replica
from kfp_spot.emulator.payloads import check_request_field, decode_json
from kfp_spot.emulator.routing import (
    OPS,
    PARENT,
    V1,
    Request,
    Route,
    RouteGroup,
    RouteTable,
    object_body,
)
from kfp_spot.emulator.serving import routes as serving_routes
from kfp_spot.emulator.serving.api import ServingService
from kfp_spot.emulator.spot_capacity import ANY_MACHINE, STOCKOUT, SpotCapacityError

_PARENT = "{parent=" + PARENT + "}"
_JOB = "{name=" + PARENT + "/customJobs/*}"
_OPERATION = "{name=" + PARENT + "/operations/*}"
SERVED = (
    "/v1/projects/P/locations/L/customJobs[/ID[:cancel]], "
    "/v1/projects/P/locations/L/operations/ID and /emulator/v1/..."
)


def _create(api: CustomJobApi, req: Request) -> str:
    doc = decode_json(req.body, "custom_job") if req.body.strip() else {}
    return message_json(api.create_job(req.params["parent"], doc), req.query.int_enums)


def _list(api: CustomJobApi, req: Request) -> str:
    query = req.query
    return api.list_jobs_json(
        req.params["parent"],
        query.text("filter"),
        query.int32("page_size"),
        query.text("page_token"),
        query.text("read_mask"),
        query.int_enums,
    )


def _get(api: CustomJobApi, req: Request) -> str:
    return api.get_job_json(req.params["name"], req.query.int_enums)


def _cancel(api: CustomJobApi, req: Request) -> dict[str, Any]:
    api.cancel_job(req.params["name"])
    return {}


def _delete(api: CustomJobApi, req: Request) -> str:
    return str(json_format.MessageToJson(api.delete_job(req.params["name"]), indent=None))


def _get_operation(api: CustomJobApi, req: Request) -> str:
    # also ``:wait``: every operation is done already
    return str(json_format.MessageToJson(api.get_operation(req.params["name"]), indent=None))


def _wait_operation(api: CustomJobApi, req: Request) -> str:
    if req.query.text("timeout"):  # as a body's timeout, a protobuf Duration
        check_request_field("timeout", req.query.text("timeout"))
    return _get_operation(api, req)


def _delete_operation(api: CustomJobApi, req: Request) -> dict[str, Any]:
    api.delete_operation(req.params["name"])
    return {}


def _cancel_operation(api: CustomJobApi, req: Request) -> dict[str, Any]:
    api.cancel_operation(req.params["name"])
    return {}


def _preempt(api: CustomJobApi, req: Request) -> dict[str, Any]:
    body = decode_json(req.body, "*") if req.body.strip() else {}
    return api.preempt(req.params["name"], preempt_replica(body))


def _attempts(api: CustomJobApi, req: Request) -> dict[str, Any]:
    return {"attempts": api.attempts(req.params["name"])}


def _logs(api: CustomJobApi, req: Request) -> dict[str, Any]:
    query = req.query
    attempt = query.int32("attempt") or None
    replica = query.text("replica") or None
    return {"logs": api.logs(req.params["name"], attempt, replica, query.int32("tail"))}


def _all(api: CustomJobApi, req: Request) -> dict[str, Any]:
    return {"customJobs": api.summaries()}


# The spotCapacity body's fields (JSON names; snake_case is accepted too) and the arguments of
# SpotCapacity.set they give.
_SPOT_FIELDS = {
    "machineType": "machine_type",
    "available": "available",
    "seconds": "seconds",
    "refusal": "refusal",
}
_CAMEL = re.compile(r"([A-Z])")


def _set_spot_capacity(api: CustomJobApi, req: Request) -> dict[str, Any]:
    body = object_body(req.body, tuple(_SPOT_FIELDS.values()))
    args = {_CAMEL.sub(lambda m: "_" + m.group(1).lower(), k): v for k, v in body.items()}
    if "available" not in args:
        raise ApiError(
            "INVALID_ARGUMENT",
            "available is required: true (the region has Spot VMs) or false (it has none)",
            "available",
        )
    location = names.parse_parent(req.params["parent"]).location
    try:
        row = api.capacity.spot.set(
            location,
            args.get("machine_type", ANY_MACHINE),
            available=args["available"],
            seconds=args.get("seconds"),
            refusal=args.get("refusal", STOCKOUT),
        )
    except SpotCapacityError as err:
        field = {v: k for k, v in _SPOT_FIELDS.items()}.get(err.argument, err.argument)
        raise ApiError("INVALID_ARGUMENT", f"{field}: {err.reason}", field) from None
    return row.to_json()


def _spot_capacity(api: CustomJobApi, req: Request) -> dict[str, Any]:
    return {"spotCapacity": [row.to_json() for row in api.capacity.spot.rows()]}


def _health(api: CustomJobApi, req: Request) -> dict[str, Any]:
    return {"status": "ok"}


_JOBS = "aiplatform.customJobs"
ROUTES: tuple[Route, ...] = (
    Route("POST", f"{V1}/{_PARENT}/customJobs", _create, permission=f"{_JOBS}.create"),
    Route(
        "GET",
        f"{V1}/{_PARENT}/customJobs",
        _list,
        ("filter", "page_size", "page_token", "read_mask"),
        permission=f"{_JOBS}.list",
    ),
    Route("GET", f"{V1}/{_JOB}", _get, permission=f"{_JOBS}.get"),
    Route("POST", f"{V1}/{_JOB}:cancel", _cancel, body=("name",), permission=f"{_JOBS}.cancel"),
    Route("DELETE", f"{V1}/{_JOB}", _delete, permission=f"{_JOBS}.delete"),
    # A CustomJob's operations are its deletes: Vertex AI asks for get (cancel: delete) on them.
    Route("GET", f"{OPS}/{_OPERATION}", _get_operation, permission=f"{_JOBS}.get"),
    Route("DELETE", f"{OPS}/{_OPERATION}", _delete_operation, permission=f"{_JOBS}.get"),
    Route(
        "POST",
        f"{OPS}/{_OPERATION}:cancel",
        _cancel_operation,
        body=("name",),
        permission=f"{_JOBS}.delete",
    ),
    Route(
        "POST",
        f"{OPS}/{_OPERATION}:wait",
        _wait_operation,
        ("timeout",),
        ("name", "timeout"),
        permission=f"{_JOBS}.get",
    ),
    Route("POST", f"/emulator/v1/{_JOB}:preempt", _preempt, body=("name", "replica")),
    Route("GET", f"/emulator/v1/{_JOB}/attempts", _attempts),
    Route("GET", f"/emulator/v1/{_JOB}/logs", _logs, ("attempt", "replica", "tail")),
    Route("GET", "/emulator/v1/customJobs", _all),
    Route("POST", f"/emulator/v1/{_PARENT}/spotCapacity", _set_spot_capacity),
    Route("GET", "/emulator/v1/spotCapacity", _spot_capacity),
    Route("GET", "/emulator/v1/health", _health),
)


def route_table(jobs: CustomJobApi, serving: ServingService) -> RouteTable:
    """Every route of the emulator: the CustomJob API's and the emulator's, then serving's."""
    return RouteTable(
        RouteGroup(jobs, ROUTES, SERVED),
        RouteGroup(serving, serving_routes.ROUTES, serving_routes.SERVED),
    )
