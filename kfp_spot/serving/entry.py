"""The one call the deploy_spot_endpoint component makes: ``deploy_spot_endpoint(**inputs)``.

Artifacts are duck-typed (``.uri``, ``.metadata``): this module never imports kfp.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
from collections.abc import Mapping
from typing import Any

from kfp_spot import fs
from kfp_spot.serving.deploy import (
    Deployer,
    DeployInputError,
    DeployInterruptedError,
    DeployRequest,
    DeployResult,
)
from kfp_spot.validation.inputs import report_input_errors

log = logging.getLogger(__name__)


def input_defaults() -> dict[str, Any]:
    """Each input's default: the runtime's (``DeployRequest``); the component repeats them."""
    out = {}
    for f in dataclasses.fields(DeployRequest):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


_DEFAULTS = input_defaults()


def _text(inputs: Mapping[str, Any], name: str, *, empty_is_default: bool = True) -> str:
    value = inputs.get(name)
    missing = value is None or (empty_is_default and value == "")
    return str(_DEFAULTS.get(name, "") if missing else value)


def _seconds(inputs: Mapping[str, Any], name: str) -> float:
    value = inputs.get(name)
    if value is None or value == "":
        return float(_DEFAULTS[name])
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DeployInputError(name, f"expected a number of seconds, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise DeployInputError(name, f"expected a number of seconds >= 0, got {value!r}")
    return number


def _json(name: str, inputs: Mapping[str, Any], kind: type) -> Any:
    """Lists and dicts may arrive as JSON text (from YAML or the CLI) or as objects."""
    value = inputs.get(name)
    if value is None or value == "":
        return kind(_DEFAULTS.get(name, kind()))
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
    if not math.isfinite(number) or number != int(number):
        raise DeployInputError(name, f"expected an integer, got {value!r}")
    return int(number)


def _count(inputs: Mapping[str, Any], name: str) -> int:
    return _int(name, inputs.get(name), int(_DEFAULTS[name]))


def _split(value: Any) -> dict[str, int]:
    raw = _json("traffic_split", {"traffic_split": value}, dict) or dict(_DEFAULTS["traffic_split"])
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
    model_uri = str(getattr(model, "uri", "") or "")
    if model_uri:
        if artifact_uri:
            raise DeployInputError("artifact_uri", "give `model` or `artifact_uri`, not both")
        artifact_uri = model_uri
    endpoint_out = inputs.get("endpoint")
    gcp_resources = str(inputs.get("gcp_resources") or "")
    return DeployRequest(
        # An empty project or location is a mistake, not "the pipeline's" (the placeholder).
        project=_text(inputs, "project", empty_is_default=False),
        location=_text(inputs, "location", empty_is_default=False),
        artifact_uri=artifact_uri,
        uploaded_model=_resource_name(inputs.get("uploaded_model"), "uploaded_model"),
        endpoint=_resource_name(inputs.get("target_endpoint"), "target_endpoint"),
        model_display_name=_text(inputs, "model_display_name"),
        endpoint_display_name=_text(inputs, "endpoint_display_name"),
        deployed_model_display_name=_text(inputs, "deployed_model_display_name"),
        serving_container_image_uri=_text(inputs, "serving_container_image_uri"),
        serving_container_command=[
            str(a) for a in _json("serving_container_command", inputs, list)
        ],
        serving_container_args=[str(a) for a in _json("serving_container_args", inputs, list)],
        serving_container_env={
            str(k): str(v) for k, v in _json("serving_container_env", inputs, dict).items()
        },
        serving_container_ports=[
            _int("serving_container_ports", p, 0)
            for p in _json("serving_container_ports", inputs, list)
        ],
        serving_container_predict_route=_text(inputs, "serving_container_predict_route"),
        serving_container_health_route=_text(inputs, "serving_container_health_route"),
        machine_type=_text(inputs, "machine_type"),
        accelerator_type=_text(inputs, "accelerator_type"),
        accelerator_count=_count(inputs, "accelerator_count"),
        min_replica_count=_count(inputs, "min_replica_count"),
        max_replica_count=_count(inputs, "max_replica_count"),
        traffic_split=_split(inputs.get("traffic_split")),
        spot=bool(_DEFAULTS["spot"] if inputs.get("spot") is None else inputs.get("spot")),
        service_account=_text(inputs, "service_account"),
        labels={str(k): str(v) for k, v in _json("labels", inputs, dict).items()},
        api_endpoint=_text(inputs, "api_endpoint"),
        timeout_seconds=_seconds(inputs, "timeout_seconds"),
        poll_interval_seconds=_seconds(inputs, "poll_interval_seconds"),
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
    with report_input_errors(DeployInputError):  # in a KFP task: one line, no traceback
        request = build_request(**inputs)
        if request.artifact_uri:
            local = fs.to_local_path(request.artifact_uri)
            request.artifact_uri = local or request.artifact_uri
        deployer = Deployer(request)  # every input checked before any API call
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
