"""The one call the deploy_spot_endpoint component makes: ``deploy_spot_endpoint(**inputs)``.

Artifacts are duck-typed (``.uri``, ``.metadata``): this module never imports kfp.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from kfp_spot import fs, lightimports
from kfp_spot.serving.deploy import (
    DEPLOYMENT_LABEL,
    Deployer,
    DeployInputError,
    DeployInterruptedError,
    DeployRequest,
    DeployResult,
)
from kfp_spot.validation.component_inputs import InputReader, dataclass_defaults, inputs_of
from kfp_spot.validation.inputs import report_input_errors
from kfp_spot.vertex import pipeline_context
from kfp_spot.vertex.client import check_poll_interval

log = logging.getLogger(__name__)


def input_defaults() -> dict[str, Any]:
    """Each input's default: the runtime's (``DeployRequest``); the component repeats them."""
    return dataclass_defaults(DeployRequest)


_DEFAULTS = input_defaults()


def _split(read: InputReader) -> dict[str, int]:
    raw = read.json_value("traffic_split", dict) or dict(_DEFAULTS["traffic_split"])
    out = {}
    for key, pct in raw.items():
        number = read.as_number("traffic_split", pct)
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
    read = InputReader(inputs, _DEFAULTS, DeployInputError)
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
        project=read.text("project", empty_is_default=False),
        location=read.text("location", empty_is_default=False),
        artifact_uri=artifact_uri,
        uploaded_model=_resource_name(inputs.get("uploaded_model"), "uploaded_model"),
        endpoint=_resource_name(inputs.get("target_endpoint"), "target_endpoint"),
        model_display_name=read.text("model_display_name"),
        endpoint_display_name=read.text("endpoint_display_name"),
        deployed_model_display_name=read.text("deployed_model_display_name"),
        serving_container_image_uri=read.text("serving_container_image_uri"),
        serving_container_command=read.strings("serving_container_command"),
        serving_container_args=read.strings("serving_container_args"),
        serving_container_env=read.string_map("serving_container_env"),
        serving_container_ports=[
            read.as_integer("serving_container_ports", p)
            for p in read.json_value("serving_container_ports", list)
        ],
        serving_container_predict_route=read.text("serving_container_predict_route"),
        serving_container_health_route=read.text("serving_container_health_route"),
        machine_type=read.text("machine_type"),
        accelerator_type=read.text("accelerator_type"),
        accelerator_count=read.integer("accelerator_count"),
        min_replica_count=read.integer("min_replica_count"),
        max_replica_count=read.integer("max_replica_count"),
        traffic_split=_split(read),
        spot=read.boolean("spot"),
        service_account=read.text("service_account"),
        # The pipeline run's system labels too, as GCPC's ModelUploadOp and EndpointCreateOp.
        labels=read.checked(  # too many with the run's: input 'labels', not a traceback
            "labels",
            pipeline_context.merge_system_labels,
            read.string_map("labels"),
            os.environ,
            added=len([DEPLOYMENT_LABEL]),  # on the Model, beside these
            what="Model",
        ),
        encryption_spec_key_name=read.text("encryption_spec_key_name"),
        api_endpoint=read.text("api_endpoint"),
        timeout_seconds=read.number("timeout_seconds"),  # more than 0: checked with the request
        poll_interval_seconds=_poll_interval(read),
        run_key=str(getattr(endpoint_out, "uri", "") or gcp_resources),
        gcp_resources_path=gcp_resources,
    )


def _poll_interval(read: InputReader) -> float:
    """``poll_interval_seconds``, no shorter than Vertex AI's quota allows (the emulator: any)."""
    seconds = read.number("poll_interval_seconds", minimum=0)
    with inputs_of(DeployInputError):
        return check_poll_interval(seconds, read.text("api_endpoint"))


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
    lightimports.defer_gapic_packages()  # the task loads its three services and types alone
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
