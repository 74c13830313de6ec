"""HTTP routes of the Model, Endpoint and Prediction services (and the serving extensions).

:class:`ServingRoutes` is a :class:`~kfp_spot.emulator.server.RouteSet`: the emulator's HTTP
server matches these routes after its CustomJob routes and gives their requests the same
handling (bounded reads and bodies, JSON 4xx errors, unknown query parameters refused).

- ``POST /v1/{parent}/models:upload``; ``GET /v1/{parent}/models``; ``GET|DELETE /v1/{model}``
- ``POST|GET /v1/{parent}/endpoints`` (``endpointId``); ``GET|DELETE /v1/{endpoint}``
- ``POST /v1/{endpoint}:deployModel|:undeployModel|:predict|:rawPredict``
- ``GET /v1/{resource}/operations/{id}``, ``POST .../operations/{id}:cancel|:wait`` (also under
  ``/ui/``, where the GAPIC REST operations client asks)
- ``POST /emulator/v1/{endpoint}/deployedModels/{id}:preempt`` (``{"replica": N}`` optional)
- ``GET /emulator/v1/{endpoint}/deployedModels/{id}/replicas``
- ``GET /emulator/v1/{endpoint}/ledger``: one row per serving replica life, with costs

``{parent}`` is ``projects/P/locations/L`` (P a project ID or number; answers carry the number);
``{model}`` ``{parent}/models/ID[@VERSION]``; ``{endpoint}`` ``{parent}/endpoints/ID``.
``/v1beta1/`` is accepted as ``/v1/``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from google.cloud.aiplatform_v1.types import ListEndpointsResponse, ListModelsResponse
from google.protobuf import json_format

from kfp_spot.emulator.errors import ApiError, decode_json
from kfp_spot.emulator.jobs import message_json
from kfp_spot.emulator.server import Reply, Request, Route, object_body
from kfp_spot.emulator.serving.api import ServingService

_PARENT = r"projects/[^/]+/locations/[^/]+"
_MODEL = _PARENT + r"/models/[^/:]+"
_ENDPOINT = _PARENT + r"/endpoints/[^/:]+"
_OPERATION = rf"{_PARENT}/(?:models|endpoints)/[^/:]+/operations/[^/:]+"
_V1 = r"/v1(?:beta1)?"
_OPS = r"/(?:v1(?:beta1)?|ui)"  # the GAPIC REST operations client asks /ui/...
_LIST = ("filter", "page_size", "page_token")
_DEPLOYED = rf"/emulator/v1/(?P<name>{_ENDPOINT})/deployedModels/(?P<dm>[^/:]+)"

ROUTES: tuple[Route, ...] = (
    Route("POST", re.compile(rf"{_V1}/(?P<parent>{_PARENT})/models:upload"), "upload"),
    Route("GET", re.compile(rf"{_V1}/(?P<parent>{_PARENT})/models"), "list_models", _LIST),
    Route("GET", re.compile(rf"{_V1}/(?P<name>{_MODEL})"), "get_model"),
    Route("DELETE", re.compile(rf"{_V1}/(?P<name>{_MODEL})"), "delete_model"),
    Route(
        "POST",
        re.compile(rf"{_V1}/(?P<parent>{_PARENT})/endpoints"),
        "create_endpoint",
        ("endpoint_id",),
    ),
    Route("GET", re.compile(rf"{_V1}/(?P<parent>{_PARENT})/endpoints"), "list_endpoints", _LIST),
    Route("GET", re.compile(rf"{_V1}/(?P<name>{_ENDPOINT})"), "get_endpoint"),
    Route("DELETE", re.compile(rf"{_V1}/(?P<name>{_ENDPOINT})"), "delete_endpoint"),
    Route("POST", re.compile(rf"{_V1}/(?P<name>{_ENDPOINT}):deployModel"), "deploy"),
    Route("POST", re.compile(rf"{_V1}/(?P<name>{_ENDPOINT}):undeployModel"), "undeploy"),
    Route("POST", re.compile(rf"{_V1}/(?P<name>{_ENDPOINT}):predict"), "predict"),
    Route("POST", re.compile(rf"{_V1}/(?P<name>{_ENDPOINT}):rawPredict"), "raw_predict"),
    Route("GET", re.compile(rf"{_OPS}/(?P<name>{_OPERATION})"), "get_operation"),
    Route("POST", re.compile(rf"{_OPS}/(?P<name>{_OPERATION}):cancel"), "cancel_operation"),
    Route(
        "POST", re.compile(rf"{_OPS}/(?P<name>{_OPERATION}):wait"), "wait_operation", ("timeout",)
    ),
    Route("POST", re.compile(rf"{_DEPLOYED}:preempt"), "preempt"),
    Route("GET", re.compile(rf"{_DEPLOYED}/replicas"), "replicas"),
    Route("GET", re.compile(rf"/emulator/v1/(?P<name>{_ENDPOINT})/ledger"), "ledger"),
)
# Fields the body of an otherwise empty request may hold (``body: "*"``: the path's own).
_EMPTY_BODIES = {"cancel_operation": {"name"}, "wait_operation": {"name", "timeout"}}


class ServingRoutes:
    """The serving APIs as a route set of the emulator's HTTP server."""

    routes: Sequence[Route] = ROUTES
    served = (
        "/v1/projects/P/locations/L/models[:upload|/ID], "
        "/v1/projects/P/locations/L/endpoints[/ID[:deployModel|:undeployModel|:predict|"
        ":rawPredict]] and their operations"
    )

    def __init__(self, service: ServingService) -> None:
        self.service = service

    def act(self, route: Route, request: Request) -> dict[str, Any] | str | Reply:
        """Answer one request of the serving APIs.

        Raises:
            ApiError: the request is refused (answered as a Google JSON error).
        """
        svc = self.service
        action, params, query, raw = route.action, request.params, request.query, request.body
        ints = query.int_enums

        def body() -> Any:
            return decode_json(raw, "*") if raw.strip() else {}

        if action == "predict":
            return svc.predict(params["name"], raw)
        if action == "raw_predict":
            status, answer, headers = svc.raw_predict(params["name"], raw, request.content_type)
            return Reply(status, answer, headers)
        if action in _EMPTY_BODIES:
            object_body(raw, _EMPTY_BODIES[action])
        if action == "upload":
            return _operation_json(svc.upload_model(params["parent"], body()))
        if action in ("list_models", "list_endpoints"):
            lister = svc.list_models if action == "list_models" else svc.list_endpoints
            pbs, token = lister(
                params["parent"],
                query.text("filter"),
                query.int32("page_size"),
                query.text("page_token"),
            )
            if action == "list_models":
                models = ListModelsResponse.pb()(next_page_token=token)
                models.models.extend(pbs)
                return message_json(models, ints)
            endpoints = ListEndpointsResponse.pb()(next_page_token=token)
            endpoints.endpoints.extend(pbs)
            return message_json(endpoints, ints)
        if action in ("get_operation", "wait_operation"):  # wait: the latest state, at once
            return _operation_json(svc.get_operation(params["name"]))
        if action == "cancel_operation":
            svc.cancel_operation(params["name"])
            return {}
        if action == "get_model":
            return message_json(svc.get_model(params["name"]), ints)
        if action == "delete_model":
            return _operation_json(svc.delete_model(params["name"]))
        if action == "create_endpoint":
            doc = decode_json(raw, "endpoint") if raw.strip() else {}
            return _operation_json(
                svc.create_endpoint(params["parent"], doc, query.text("endpoint_id"))
            )
        if action == "get_endpoint":
            return message_json(svc.get_endpoint(params["name"]), ints)
        if action == "delete_endpoint":
            return _operation_json(svc.delete_endpoint(params["name"]))
        if action == "deploy":
            return _operation_json(svc.deploy_model(params["name"], body()))
        if action == "undeploy":
            return _operation_json(svc.undeploy_model(params["name"], body()))
        if action == "preempt":
            doc = object_body(raw, ("replica",))
            replica = doc.get("replica")
            if replica is not None and (not isinstance(replica, int) or isinstance(replica, bool)):
                raise ApiError(
                    "INVALID_ARGUMENT",
                    f"replica must be a replica index (0, 1, ...), got {replica!r}",
                    "replica",
                )
            return svc.preempt_replica(params["name"], params["dm"], replica)
        if action == "replicas":
            return {"replicas": svc.replica_status(params["name"], params["dm"])}
        return svc.ledger(params["name"])


def _operation_json(op: Any) -> str:
    # An Operation's metadata and response are Any messages: protobuf JSON with their @type.
    return str(json_format.MessageToJson(op, indent=None))
