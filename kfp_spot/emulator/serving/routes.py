"""HTTP routes of the Model, Endpoint and Prediction services (and the serving extensions).

:class:`ServingRoutes` is the emulator server's route hook: called with every request, it answers
the paths below and returns None for any other, which the CustomJob routes then handle.

- ``POST /v1/{parent}/models:upload``; ``GET /v1/{parent}/models``; ``GET|DELETE /v1/{model}``
- ``POST|GET /v1/{parent}/endpoints`` (``endpointId``); ``GET|DELETE /v1/{endpoint}``
- ``POST /v1/{endpoint}:deployModel|:undeployModel|:predict|:rawPredict``
- ``GET /v1/{resource}/operations/{id}``, ``POST .../operations/{id}:cancel``
- ``POST /emulator/v1/{endpoint}/deployedModels/{id}:preempt`` (``{"replica": N}`` optional)
- ``GET /emulator/v1/{endpoint}/deployedModels/{id}/replicas``
- ``GET /emulator/v1/{endpoint}/ledger``: one row per serving replica life, with costs

``{parent}`` is ``projects/P/locations/L``; ``{model}`` ``{parent}/models/ID[@VERSION]``;
``{endpoint}`` ``{parent}/endpoints/ID``. ``/v1beta1/`` and ``/ui/`` (where the GAPIC REST
operations client polls) are accepted as ``/v1/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from google.cloud.aiplatform_v1.types import ListEndpointsResponse, ListModelsResponse
from google.protobuf import json_format

from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.serving.api import ServingService

_PARENT = r"projects/[^/]+/locations/[^/]+"
_MODEL = _PARENT + r"/models/[^/:]+"
_ENDPOINT = _PARENT + r"/endpoints/[^/:]+"
_OPERATION = rf"{_PARENT}(?:/(?:models|endpoints)/[^/:]+)?/operations/[^/:]+"
_V1 = r"^/(?:v1(?:beta1)?|ui)/"  # the REST operations client asks /ui/...
ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("POST", re.compile(rf"{_V1}(?P<parent>{_PARENT})/models:upload$"), "upload"),
    ("GET", re.compile(rf"{_V1}(?P<parent>{_PARENT})/models$"), "list_models"),
    ("GET", re.compile(rf"{_V1}(?P<name>{_OPERATION})$"), "get_operation"),
    ("POST", re.compile(rf"{_V1}(?P<name>{_OPERATION}):cancel$"), "cancel_operation"),
    ("GET", re.compile(rf"{_V1}(?P<name>{_MODEL})$"), "get_model"),
    ("DELETE", re.compile(rf"{_V1}(?P<name>{_MODEL})$"), "delete_model"),
    ("POST", re.compile(rf"{_V1}(?P<parent>{_PARENT})/endpoints$"), "create_endpoint"),
    ("GET", re.compile(rf"{_V1}(?P<parent>{_PARENT})/endpoints$"), "list_endpoints"),
    ("GET", re.compile(rf"{_V1}(?P<name>{_ENDPOINT})$"), "get_endpoint"),
    ("DELETE", re.compile(rf"{_V1}(?P<name>{_ENDPOINT})$"), "delete_endpoint"),
    ("POST", re.compile(rf"{_V1}(?P<name>{_ENDPOINT}):deployModel$"), "deploy"),
    ("POST", re.compile(rf"{_V1}(?P<name>{_ENDPOINT}):undeployModel$"), "undeploy"),
    ("POST", re.compile(rf"{_V1}(?P<name>{_ENDPOINT}):predict$"), "predict"),
    ("POST", re.compile(rf"{_V1}(?P<name>{_ENDPOINT}):rawPredict$"), "raw_predict"),
    (
        "POST",
        re.compile(rf"^/emulator/v1/(?P<name>{_ENDPOINT})/deployedModels/(?P<dm>[^/:]+):preempt$"),
        "preempt",
    ),
    (
        "GET",
        re.compile(rf"^/emulator/v1/(?P<name>{_ENDPOINT})/deployedModels/(?P<dm>[^/:]+)/replicas$"),
        "replicas",
    ),
    ("GET", re.compile(rf"^/emulator/v1/(?P<name>{_ENDPOINT})/ledger$"), "ledger"),
]

Reply = tuple[int, "dict[str, Any] | str | bytes", dict[str, str]]


def _json_body(raw: bytes | None) -> Any:
    if raw is None:
        raise ApiError("INVALID_ARGUMENT", "the request body is too large")
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise ApiError("INVALID_ARGUMENT", f"Invalid JSON payload received. {err}") from None


def _last(query: Mapping[str, list[str]], key: str) -> str:
    return (query.get(key) or [""])[-1]


def _int(query: Mapping[str, list[str]], key: str) -> int:
    text = _last(query, key)
    try:
        return int(text) if text else 0
    except ValueError:
        raise ApiError("INVALID_ARGUMENT", f"{key} must be an integer, got {text!r}", key) from None


class ServingRoutes:
    """The route hook of the emulator's HTTP server for the serving APIs."""

    def __init__(self, service: ServingService) -> None:
        self.service = service

    def __call__(
        self, method: str, target: str, raw: bytes | None, headers: Mapping[str, str]
    ) -> Reply | None:
        """Answer a request for a serving path; None when the path is not one of ours.

        Raises:
            ApiError: the request is refused (answered as a Google JSON error).
        """
        url = urlsplit(target)
        path = unquote(url.path)
        matched = [(m, p.match(path), a) for m, p, a in ROUTES]
        matched = [(m, match, a) for m, match, a in matched if match]
        if not matched:
            return None
        for route_method, match, action in matched:
            if route_method == method:
                query = parse_qs(url.query, keep_blank_values=True)
                ints = any("enum-encoding=int" in v for v in query.get("$alt", []))
                return self._act(action, match.groupdict(), query, raw, headers, ints)
        raise ApiError("UNIMPLEMENTED", f"{method} is not offered on {path}")

    def _act(
        self,
        action: str,
        params: dict[str, str],
        query: Mapping[str, list[str]],
        raw: bytes | None,
        headers: Mapping[str, str],
        ints: bool,
    ) -> Reply:
        svc = self.service

        def message(pb: Any) -> Reply:
            return 200, json_format.MessageToJson(pb, use_integers_for_enums=ints, indent=None), {}

        if action == "predict":
            return 200, svc.predict(params["name"], raw), {}
        if action == "raw_predict":
            status, body, extra = svc.raw_predict(
                params["name"], raw, headers.get("Content-Type", "")
            )
            return status, body, extra
        if action == "upload":
            return message(svc.upload_model(params["parent"], _json_body(raw)))
        if action in ("list_models", "list_endpoints"):
            lister = svc.list_models if action == "list_models" else svc.list_endpoints
            pbs, token = lister(
                params["parent"],
                _last(query, "filter"),
                _int(query, "pageSize"),
                _last(query, "pageToken"),
            )
            if action == "list_models":
                response = ListModelsResponse.pb()(next_page_token=token)
                response.models.extend(pbs)
            else:
                response = ListEndpointsResponse.pb()(next_page_token=token)
                response.endpoints.extend(pbs)
            return message(response)
        if action == "get_operation":
            return message(svc.get_operation(params["name"]))
        if action == "cancel_operation":
            _json_body(raw)
            return 200, svc.cancel_operation(params["name"]), {}
        if action == "get_model":
            return message(svc.get_model(params["name"]))
        if action == "delete_model":
            return message(svc.delete_model(params["name"]))
        if action == "create_endpoint":
            endpoint_id = _last(query, "endpointId") or _last(query, "endpoint_id")
            return message(svc.create_endpoint(params["parent"], _json_body(raw), endpoint_id))
        if action == "get_endpoint":
            return message(svc.get_endpoint(params["name"]))
        if action == "delete_endpoint":
            return message(svc.delete_endpoint(params["name"]))
        if action == "deploy":
            return message(svc.deploy_model(params["name"], _json_body(raw)))
        if action == "undeploy":
            return message(svc.undeploy_model(params["name"], _json_body(raw)))
        if action == "preempt":
            body = _json_body(raw)
            replica = body.get("replica") if isinstance(body, dict) else None
            if replica is not None and (not isinstance(replica, int) or isinstance(replica, bool)):
                raise ApiError("INVALID_ARGUMENT", f"replica must be an integer, got {replica!r}")
            return 200, svc.preempt_replica(params["name"], params["dm"], replica), {}
        if action == "replicas":
            return 200, {"replicas": svc.replica_status(params["name"], params["dm"])}, {}
        return 200, svc.ledger(params["name"]), {}
