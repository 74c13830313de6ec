"""The emulated PredictionService: ``:predict`` and ``:rawPredict``.

A request is routed by the endpoint's traffic split to a deployed model and, in turn, to one of
its ready replicas (around replicas that are down: preempted or restarting), over a kept-alive
connection per replica port and thread. Answers carry the deployed model's identity as Vertex's
do (fields for ``:predict``, ``X-Vertex-AI-*`` headers for ``:rawPredict``).
"""

from __future__ import annotations

import http.client
import json
import secrets
import threading
from collections.abc import Callable
from typing import Any

from google.cloud.aiplatform_v1.types.endpoint import Endpoint

from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.payloads import decode_json, refuse_unknown
from kfp_spot.emulator.serving import store as st
from kfp_spot.emulator.serving.catalog import MODEL_NAME, Catalog
from kfp_spot.emulator.serving.pool import ReplicaPool
from kfp_spot.vertex.model_endpoint import PREDICT_REQUEST_BYTES

MAX_PREDICT_BYTES = PREDICT_REQUEST_BYTES  # Vertex: a prediction request must not exceed 1.5 MB
PREDICT_TIMEOUT = 60.0
_PREDICT_FIELDS = {"instances", "parameters"}


class PredictionApi:
    """Predictions forwarded to serving replicas (see the module docstring).

    Args:
        catalog: the serving resources (store, lookups and views).
        pool: the replica pool of a deployed model (None while it is being prepared).
        failure: why a deployed model has no replica since the emulator started (None: it has).
    """

    def __init__(
        self,
        catalog: Catalog,
        pool: Callable[[str], ReplicaPool | None],
        failure: Callable[[str], str | None] = lambda _dm_id: None,
    ) -> None:
        self.catalog = catalog
        self.store = catalog.store
        self.pool = pool
        self.failure = failure
        self._conns = threading.local()

    def predict(self, endpoint_name: str, raw: bytes) -> dict[str, Any]:
        """``:predict``: ``{"instances": [...]}`` -> ``{"predictions": [...], ...}``."""
        body = self._predict_body(raw)
        instances = body.get("instances")
        if not isinstance(instances, list) or not instances:
            raise ApiError(
                "INVALID_ARGUMENT",
                'instances must be a non-empty list: {"instances": [...], "parameters": {...}}',
                "instances",
            )
        dep, dm = self._route(endpoint_name)
        payload = {"instances": instances}
        if "parameters" in body:
            payload["parameters"] = body["parameters"]
        _status, answer, _ = self._forward(
            dep, dm, json.dumps(payload).encode(), "application/json"
        )
        try:
            result = json.loads(answer)
        except ValueError:
            raise ApiError(
                "INTERNAL", f"the model server of deployed model {dep.id} answered non-JSON"
            ) from None
        if not isinstance(result, dict) or "predictions" not in result:
            raise ApiError(
                "INTERNAL",
                f"the model server of deployed model {dep.id} answered without predictions: "
                f"{answer[:300]!r}",
            )
        model = self.catalog.model_pb(self.catalog.model_row(dm.model))
        out = {"predictions": result["predictions"]}
        if "metadata" in result:
            out["metadata"] = result["metadata"]
        out.update(
            {
                "deployedModelId": dep.id,
                "model": model.name,
                "modelDisplayName": model.display_name,
                "modelVersionId": dm.model_version_id or "1",
            }
        )
        return out

    def raw_predict(
        self, endpoint_name: str, raw: bytes, content_type: str
    ) -> tuple[int, bytes, dict[str, str]]:
        """``:rawPredict``: the body goes to a replica as is; its answer comes back as is."""
        if len(raw) > MAX_PREDICT_BYTES:
            raise ApiError(
                "INVALID_ARGUMENT", f"the request must not exceed {MAX_PREDICT_BYTES} bytes"
            )
        dep, dm = self._route(endpoint_name)
        status, answer, ctype = self._forward(dep, dm, raw, content_type or "application/json")
        model = MODEL_NAME.fullmatch(dm.model)
        headers = {
            "Content-Type": ctype,
            "X-Vertex-AI-Deployed-Model-Id": dep.id,
            "X-Vertex-AI-Model": f"{model.group(1)}/models/{model.group(2)}" if model else dm.model,
            "X-Vertex-AI-Model-Version-Id": dm.model_version_id or "1",
        }
        return status, answer, headers

    @staticmethod
    def _predict_body(raw: bytes) -> dict[str, Any]:
        if len(raw) > MAX_PREDICT_BYTES:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"the request must not exceed {MAX_PREDICT_BYTES} bytes (1.5 MB)",
            )
        body = decode_json(raw, "*") if raw.strip() else {}
        if not isinstance(body, dict):
            raise ApiError("INVALID_ARGUMENT", "the body must be a JSON object (PredictRequest)")
        refuse_unknown(key for key in body if key not in _PREDICT_FIELDS)
        return body

    def _route(self, endpoint_name: str) -> tuple[st.DeploymentRow, Any]:
        row = self.catalog.endpoint_row(endpoint_name)
        endpoint = Endpoint.pb()()
        endpoint.ParseFromString(row.spec)
        deployed = {d.id: d for d in self.store.deployments(row.id, (st.DEPLOYED,))}
        if not deployed:
            raise ApiError(
                "FAILED_PRECONDITION",
                f"Endpoint {endpoint_name} has no deployed model to serve the request",
            )
        weights = {k: v for k, v in endpoint.traffic_split.items() if v > 0 and k in deployed}
        if not weights:
            raise ApiError(
                "FAILED_PRECONDITION",
                f"Endpoint {endpoint_name} gives no deployed model any traffic (trafficSplit is "
                f"{dict(endpoint.traffic_split) or 'empty'})",
            )
        pick = secrets.randbelow(sum(weights.values()))
        for dm_id, weight in sorted(weights.items()):
            if pick < weight:
                dep = deployed[dm_id]
                return dep, self.catalog.dm_pb(dep)
            pick -= weight
        raise AssertionError("unreachable")  # pragma: no cover

    def _forward(
        self, dep: st.DeploymentRow, dm: Any, body: bytes, content_type: str
    ) -> tuple[int, bytes, str]:
        """Send ``body`` to a ready replica, around replicas that are down; (status, body, type)."""
        pool = self.pool(dep.id)
        tried: list[tuple[int, int]] = []
        while pool is not None:
            choice = pool.pick(tried)
            if choice is None:
                break
            index, life, port = choice
            tried.append((index, life))
            try:
                status, answer, ctype = self._post(
                    port, pool.launch.predict_route, body, content_type
                )
            except OSError:
                pool.mark_down(index, life)
                continue
            if status >= 500 and status != 503:
                raise ApiError(
                    "INTERNAL",
                    f"the model server of deployed model {dep.id} answered {status}: "
                    f"{answer[:500].decode('utf-8', 'replace')}",
                )
            if status >= 400:
                raise ApiError(
                    "FAILED_PRECONDITION" if status != 503 else "UNAVAILABLE",
                    f"The model server of deployed model {dep.id} answered {status}: "
                    f"{answer[:500].decode('utf-8', 'replace')}",
                )
            return status, answer, ctype
        failure = self.failure(dep.id)
        if failure:
            raise ApiError(
                "UNAVAILABLE",
                f"deployed model {dep.id} has no replica: it could not be brought back when the "
                f"emulator started ({failure}); undeploy it and deploy a model that serves",
            )
        raise ApiError(
            "UNAVAILABLE",
            f"no replica of deployed model {dep.id} is ready to serve (preempted or restarting; "
            "deploy with minReplicaCount >= 2 to ride out Spot preemptions)",
        )

    def _post(
        self, port: int, route: str, body: bytes, content_type: str
    ) -> tuple[int, bytes, str]:
        conns: dict[int, http.client.HTTPConnection] = self._conns.__dict__.setdefault(
            "by_port", {}
        )
        for fresh in (False, True):
            conn = conns.get(port)
            if conn is None or fresh:
                if conn is not None:
                    conn.close()
                conn = conns[port] = http.client.HTTPConnection(
                    "127.0.0.1", port, timeout=PREDICT_TIMEOUT
                )
            try:
                conn.request("POST", route, body, {"Content-Type": content_type})
                response = conn.getresponse()
                data = response.read()
                return response.status, data, response.getheader("Content-Type", "application/json")
            except (http.client.HTTPException, OSError):
                conn.close()
                conns.pop(port, None)
                if fresh:
                    raise OSError(f"replica on port {port} did not answer") from None
        raise AssertionError("unreachable")  # pragma: no cover
