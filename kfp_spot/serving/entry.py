"""The one call the deploy_spot_endpoint component makes: ``deploy_spot_endpoint(**inputs)``.

Artifacts are duck-typed (``.uri``, ``.metadata``): this module never imports kfp.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from kfp_spot import fs
from kfp_spot.executors import DEFAULT_PREDICTION_IMAGE
from kfp_spot.serving.deploy import (
    Deployer,
    DeployInputError,
    DeployInterruptedError,
    DeployRequest,
    DeployResult,
)

log = logging.getLogger(__name__)


def _json(name: str, value: Any, kind: type, default: Any) -> Any:
    """Lists and dicts may arrive as JSON text (from YAML or the CLI) or as objects."""
    if value is None or value == "":
        return default
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise DeployInputError(name, f"expected a {kind.__name__} (or its JSON)") from None
    if not isinstance(value, kind):
        raise DeployInputError(name, f"expected a {kind.__name__}, got {type(value).__name__}")
    return value


def _int(name: str, value: Any, default: int) -> int:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise DeployInputError(name, f"expected an integer, got {value!r}")
    try:
        number = float(value)  # kfp.local hands integers back as floats
    except (TypeError, ValueError):
        raise DeployInputError(name, f"expected an integer, got {value!r}") from None
    if number != int(number):
        raise DeployInputError(name, f"expected an integer, got {value!r}")
    return int(number)


def _split(value: Any) -> dict[str, int]:
    raw = _json("traffic_split", value, dict, {"0": 100}) or {"0": 100}
    out = {}
    for key, pct in raw.items():
        try:
            number = float(pct)
        except (TypeError, ValueError):
            raise DeployInputError("traffic_split", f"{key!r}: {pct!r} is not a number") from None
        if number != int(number):
            raise DeployInputError("traffic_split", f"{key!r}: {pct!r} is not a whole percentage")
        out[str(key)] = int(number)
    return out


def _resource_name(artifact: Any, name: str) -> str:
    if artifact is None:
        return ""
    metadata = dict(getattr(artifact, "metadata", None) or {})
    value = str(metadata.get("resourceName") or "")
    if not value:
        raise DeployInputError(name, "the artifact has no metadata resourceName")
    return value


def build_request(**inputs: Any) -> DeployRequest:
    """Turn the component's inputs into a DeployRequest; errors name the input."""
    model = inputs.get("model")
    artifact_uri = str(inputs.get("artifact_uri") or "")
    if model is not None and getattr(model, "uri", ""):
        if artifact_uri:
            raise DeployInputError("artifact_uri", "give `model` or `artifact_uri`, not both")
        artifact_uri = str(model.uri)
    endpoint_out = inputs.get("endpoint")
    gcp_resources = str(inputs.get("gcp_resources") or "")
    return DeployRequest(
        project=str(inputs.get("project") or ""),
        location=str(inputs.get("location") or "us-central1"),
        artifact_uri=artifact_uri,
        uploaded_model=_resource_name(inputs.get("uploaded_model"), "uploaded_model"),
        endpoint=_resource_name(inputs.get("target_endpoint"), "target_endpoint"),
        model_display_name=str(inputs.get("model_display_name") or "kfp-spot-model"),
        endpoint_display_name=str(inputs.get("endpoint_display_name") or "kfp-spot-endpoint"),
        deployed_model_display_name=str(inputs.get("deployed_model_display_name") or ""),
        serving_container_image_uri=str(
            inputs.get("serving_container_image_uri") or DEFAULT_PREDICTION_IMAGE
        ),
        serving_container_command=[
            str(a)
            for a in _json(
                "serving_container_command", inputs.get("serving_container_command"), list, []
            )
        ],
        serving_container_args=[
            str(a)
            for a in _json("serving_container_args", inputs.get("serving_container_args"), list, [])
        ],
        serving_container_env={
            str(k): str(v)
            for k, v in _json(
                "serving_container_env", inputs.get("serving_container_env"), dict, {}
            ).items()
        },
        serving_container_ports=[
            _int("serving_container_ports", p, 0)
            for p in _json(
                "serving_container_ports", inputs.get("serving_container_ports"), list, []
            )
        ],
        serving_container_predict_route=str(inputs.get("serving_container_predict_route") or ""),
        serving_container_health_route=str(inputs.get("serving_container_health_route") or ""),
        machine_type=str(inputs.get("machine_type") or "n1-standard-4"),
        accelerator_type=str(inputs.get("accelerator_type") or ""),
        accelerator_count=_int("accelerator_count", inputs.get("accelerator_count"), 0),
        min_replica_count=_int("min_replica_count", inputs.get("min_replica_count"), 2),
        max_replica_count=_int("max_replica_count", inputs.get("max_replica_count"), 0),
        traffic_split=_split(inputs.get("traffic_split")),
        spot=True if inputs.get("spot") is None else bool(inputs.get("spot")),
        service_account=str(inputs.get("service_account") or ""),
        labels={str(k): str(v) for k, v in _json("labels", inputs.get("labels"), dict, {}).items()},
        api_endpoint=str(inputs.get("api_endpoint") or ""),
        timeout_seconds=float(inputs.get("timeout_seconds") or 3600.0),
        poll_interval_seconds=float(inputs.get("poll_interval_seconds") or 0.0),
        run_key=str(getattr(endpoint_out, "uri", "") or gcp_resources),
        gcp_resources_path=gcp_resources,
    )


def set_outputs(
    result: DeployResult, request: DeployRequest, endpoint: Any, vertex_model: Any
) -> None:
    """Fill the google.VertexEndpoint and google.VertexModel outputs as GCPC's ops do."""
    model_name = result.model if "@" in result.model else f"{result.model}@1"
    if vertex_model is not None:
        vertex_model.uri = f"{result.base_url}/v1/{model_name}"
        vertex_model.metadata["resourceName"] = model_name
    if endpoint is not None:
        endpoint.uri = f"{result.base_url}/v1/{result.endpoint}"
        endpoint.metadata["resourceName"] = result.endpoint
        endpoint.metadata["deployedModelId"] = result.deployed_model_id
        endpoint.metadata["spot"] = request.spot
        endpoint.metadata["machineType"] = request.machine_type
        endpoint.metadata["minReplicaCount"] = request.min_replica_count


def deploy_spot_endpoint(**inputs: Any) -> str:
    """Deploy on Spot VMs and set the component's outputs; returns the deployed model id.

    Raises:
        DeployInputError: an input is invalid (nothing was called).
        DeployFailedError: the service refused or failed a step.
        SystemExit: on SIGTERM/SIGINT, after cancelling (and undeploying what completed).
    """
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    request = build_request(**inputs)
    if request.artifact_uri:
        local = fs.to_local_path(request.artifact_uri)
        request.artifact_uri = local or request.artifact_uri
    deployer = Deployer(request)
    try:
        result = deployer.run()
    except DeployInterruptedError as exc:
        log.warning("deploy interrupted by signal %d; its operation was cancelled", exc.signum)
        raise SystemExit(128 + exc.signum) from None
    set_outputs(result, request, inputs.get("endpoint"), inputs.get("vertex_model"))
    how = "reattached to" if result.reattached else "deployed"
    print(
        f"deploy_spot_endpoint: {how} {result.model} on {result.endpoint} as deployed model "
        f"{result.deployed_model_id} ({request.min_replica_count} x {request.machine_type}, "
        f"{'Spot' if request.spot else 'standard'})",
        file=sys.stderr,
    )
    return result.deployed_model_id
