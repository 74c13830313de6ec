"""HTTP routes of the Model, Endpoint and Prediction services (and the serving extensions).

``ROUTES`` are rows of the emulator's one route table (:mod:`kfp_spot.emulator.routing`,
assembled by :func:`kfp_spot.emulator.routes.route_table`): their requests get the HTTP server's
handling (bounded reads and bodies, JSON 4xx errors, unknown query parameters refused), and each
handler is given the :class:`~kfp_spot.emulator.serving.api.ServingService`.

- ``POST /v1/{parent}/models:upload``; ``GET /v1/{parent}/models`` (``filter``, ``pageSize``,
  ``pageToken``, ``orderBy``, ``readMask``); ``GET|DELETE /v1/{model}``
- ``POST|GET /v1/{parent}/endpoints`` (``endpointId``; the list as the models'); ``GET|DELETE
  /v1/{endpoint}``
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

from typing import Any

from google.cloud.aiplatform_v1.types.endpoint_service import ListEndpointsResponse
from google.cloud.aiplatform_v1.types.model_service import ListModelsResponse
from google.protobuf import json_format

from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.jobs import list_json, message_json
from kfp_spot.emulator.payloads import check_request_field, decode_json
from kfp_spot.emulator.routing import OPS, PARENT, V1, Reply, Request, Route, object_body
from kfp_spot.emulator.serving.api import ServingService
from kfp_spot.emulator.serving.catalog import ListQuery

_PARENT = "{parent=" + PARENT + "}"
_MODEL = "{name=" + PARENT + "/models/*}"
_ENDPOINT = "{name=" + PARENT + "/endpoints/*}"
_OPERATION = "{name=" + PARENT + "/(models|endpoints)/*/operations/*}"
_DEPLOYED = f"/emulator/v1/{_ENDPOINT}/deployedModels/{{dm=*}}"
# ListModelsRequest's and ListEndpointsRequest's query parameters (both have orderBy and readMask:
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.models/list,
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.endpoints/list;
# the SDK's Model.list(order_by=...) sends orderBy).
_LIST = ("filter", "page_size", "page_token", "order_by", "read_mask")
SERVED = (
    "/v1/projects/P/locations/L/models[:upload|/ID], "
    "/v1/projects/P/locations/L/endpoints[/ID[:deployModel|:undeployModel|:predict|"
    ":rawPredict]] and their operations"
)


def _body(req: Request) -> Any:
    return decode_json(req.body, "*") if req.body.strip() else {}


def _operation_json(op: Any) -> str:
    # An Operation's metadata and response are Any messages: protobuf JSON with their @type.
    return str(json_format.MessageToJson(op, indent=None))


def _upload(api: ServingService, req: Request) -> str:
    return _operation_json(api.upload_model(req.params["parent"], _body(req)))


def _list_query(req: Request) -> ListQuery:
    query = req.query
    return ListQuery(
        filter=query.text("filter"),
        page_size=query.int32("page_size"),
        page_token=query.text("page_token"),
        order_by=query.text("order_by"),
        read_mask=query.text("read_mask"),
    )


def _list_models(api: ServingService, req: Request) -> str:
    pbs, token = api.list_models(req.params["parent"], _list_query(req))
    return list_json(ListModelsResponse, "models", pbs, token, req.query.int_enums)


def _get_model(api: ServingService, req: Request) -> str:
    return message_json(api.get_model(req.params["name"]), req.query.int_enums)


def _delete_model(api: ServingService, req: Request) -> str:
    return _operation_json(api.delete_model(req.params["name"]))


def _create_endpoint(api: ServingService, req: Request) -> str:
    doc = decode_json(req.body, "endpoint") if req.body.strip() else {}
    return _operation_json(
        api.create_endpoint(req.params["parent"], doc, req.query.text("endpoint_id"))
    )


def _list_endpoints(api: ServingService, req: Request) -> str:
    pbs, token = api.list_endpoints(req.params["parent"], _list_query(req))
    return list_json(ListEndpointsResponse, "endpoints", pbs, token, req.query.int_enums)


def _get_endpoint(api: ServingService, req: Request) -> str:
    return message_json(api.get_endpoint(req.params["name"]), req.query.int_enums)


def _delete_endpoint(api: ServingService, req: Request) -> str:
    return _operation_json(api.delete_endpoint(req.params["name"]))


def _deploy(api: ServingService, req: Request) -> str:
    return _operation_json(api.deploy_model(req.params["name"], _body(req)))


def _undeploy(api: ServingService, req: Request) -> str:
    return _operation_json(api.undeploy_model(req.params["name"], _body(req)))


def _predict(api: ServingService, req: Request) -> dict[str, Any]:
    return api.predict(req.params["name"], req.body)


def _raw_predict(api: ServingService, req: Request) -> Reply:
    status, answer, headers = api.raw_predict(req.params["name"], req.body, req.content_type)
    return Reply(status, answer, headers)


def _get_operation(api: ServingService, req: Request) -> str:
    # also ``:wait``: the latest state, at once
    return _operation_json(api.get_operation(req.params["name"]))


def _wait_operation(api: ServingService, req: Request) -> str:
    if req.query.text("timeout"):  # as a body's timeout, a protobuf Duration
        check_request_field("timeout", req.query.text("timeout"))
    return _get_operation(api, req)


def _cancel_operation(api: ServingService, req: Request) -> dict[str, Any]:
    api.cancel_operation(req.params["name"])
    return {}


def _preempt(api: ServingService, req: Request) -> dict[str, Any]:
    replica = object_body(req.body, ("replica",)).get("replica")
    if replica is not None and (not isinstance(replica, int) or isinstance(replica, bool)):
        raise ApiError(
            "INVALID_ARGUMENT",
            f"replica must be a replica index (0, 1, ...), got {replica!r}",
            "replica",
        )
    return api.preempt_replica(req.params["name"], req.params["dm"], replica)


def _replicas(api: ServingService, req: Request) -> dict[str, Any]:
    return {"replicas": api.replica_status(req.params["name"], req.params["dm"])}


def _ledger(api: ServingService, req: Request) -> dict[str, Any]:
    return api.ledger(req.params["name"])


_MODELS = "aiplatform.models"
_ENDPOINTS = "aiplatform.endpoints"
# An operation's: get on its model or endpoint (cancel: delete), as Vertex AI asks for.
_OP_GET = "aiplatform.{collection}.get"
ROUTES: tuple[Route, ...] = (
    Route("POST", f"{V1}/{_PARENT}/models:upload", _upload, permission=f"{_MODELS}.upload"),
    Route("GET", f"{V1}/{_PARENT}/models", _list_models, _LIST, permission=f"{_MODELS}.list"),
    Route("GET", f"{V1}/{_MODEL}", _get_model, permission=f"{_MODELS}.get"),
    Route("DELETE", f"{V1}/{_MODEL}", _delete_model, permission=f"{_MODELS}.delete"),
    Route(
        "POST",
        f"{V1}/{_PARENT}/endpoints",
        _create_endpoint,
        ("endpoint_id",),
        permission=f"{_ENDPOINTS}.create",
    ),
    Route(
        "GET", f"{V1}/{_PARENT}/endpoints", _list_endpoints, _LIST, permission=f"{_ENDPOINTS}.list"
    ),
    Route("GET", f"{V1}/{_ENDPOINT}", _get_endpoint, permission=f"{_ENDPOINTS}.get"),
    Route("DELETE", f"{V1}/{_ENDPOINT}", _delete_endpoint, permission=f"{_ENDPOINTS}.delete"),
    Route("POST", f"{V1}/{_ENDPOINT}:deployModel", _deploy, permission=f"{_ENDPOINTS}.deploy"),
    Route(
        "POST", f"{V1}/{_ENDPOINT}:undeployModel", _undeploy, permission=f"{_ENDPOINTS}.undeploy"
    ),
    Route("POST", f"{V1}/{_ENDPOINT}:predict", _predict, permission=f"{_ENDPOINTS}.predict"),
    Route("POST", f"{V1}/{_ENDPOINT}:rawPredict", _raw_predict, permission=f"{_ENDPOINTS}.predict"),
    Route("GET", f"{OPS}/{_OPERATION}", _get_operation, permission=_OP_GET),
    Route(
        "POST",
        f"{OPS}/{_OPERATION}:cancel",
        _cancel_operation,
        body=("name",),
        permission="aiplatform.{collection}.delete",
    ),
    Route(
        "POST",
        f"{OPS}/{_OPERATION}:wait",
        _wait_operation,
        ("timeout",),
        ("name", "timeout"),
        permission=_OP_GET,
    ),
    Route("POST", f"{_DEPLOYED}:preempt", _preempt),
    Route("GET", f"{_DEPLOYED}/replicas", _replicas),
    Route("GET", f"/emulator/v1/{_ENDPOINT}/ledger", _ledger),
)
