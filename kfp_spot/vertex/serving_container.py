"""The rules Vertex AI applies to a Model's ``containerSpec``, checked locally.

The serving image (a prebuilt prediction image, or a custom container given as a valid image
reference), its environment variable names, its ports and gRPC ports, and its deployment timeout
("Limit for deployment timeout is 2 hours"): a Model upload breaking one is refused
with a 400 naming the field, so the deployer and the emulator refuse it before any replica
starts (the emulator started a container of an unusable reference, and failed only then).

Pure: no I/O and no GAPIC client.
"""

from __future__ import annotations

from typing import Any

from kfp_spot import executors
from kfp_spot.vertex.values import (
    InvalidFieldError,
    InvalidValueError,
    check_image_reference,
    check_process_text,
    is_env_name,
    show,
)

__all__ = ["MAX_DEPLOYMENT_TIMEOUT_S", "MAX_PORT", "check_container_spec"]

MAX_PORT = 65535
"""``containerSpec.ports[].containerPort`` (and ``grpcPorts``): a port number, 1 to 65535."""
MAX_DEPLOYMENT_TIMEOUT_S = 2 * 3600
"""``containerSpec.deploymentTimeout``: "Limit for deployment timeout is 2 hours"."""


def check_container_spec(model: Any, field: str) -> executors.PredictionImage | None:
    """A Model's serving container: image, environment variables, command and args, ports.

    Args:
        model: a ``google.cloud.aiplatform_v1.types.Model`` (proto-plus) or its raw protobuf.
        field: the request field holding it (``model`` in an UploadModelRequest).

    Returns:
        The prebuilt prediction image it names (None for a custom container).

    Raises:
        InvalidFieldError: the first rule it breaks, naming the field.
    """
    where = f"{field}.containerSpec"
    spec = model.container_spec
    image_uri = spec.image_uri
    if not image_uri:
        raise InvalidFieldError(
            f"{where}.imageUri",
            "is required: a prebuilt prediction image such as "
            f"{executors.DEFAULT_PREDICTION_IMAGE} or your own serving container",
        )
    try:
        image = executors.prediction_image(image_uri)
        if image is None:
            check_image_reference(image_uri)
    except (executors.PredictionImageError, InvalidValueError) as exc:
        raise InvalidFieldError(f"{where}.imageUri", str(exc)) from None
    for var in spec.env:
        if not is_env_name(var.name):
            raise InvalidFieldError(
                f"{where}.env",
                f"{show(var.name)} is not a valid variable name: letters, digits and '_', "
                "not starting with a digit",
            )
    # A NUL reached the replica's start, which raised: the deployment never ended.
    # The routes reach the replica as AIP_PREDICT_ROUTE and AIP_HEALTH_ROUTE.
    for name, values in (
        ("command", spec.command),
        ("args", spec.args),
        ("env", [var.value for var in spec.env]),
        ("predictRoute", [spec.predict_route]),
        ("healthRoute", [spec.health_route]),
    ):
        for i, value in enumerate(values):
            try:
                check_process_text(value)
            except InvalidValueError as exc:
                suffix = {"env": f"[{i}].value", "command": f"[{i}]", "args": f"[{i}]"}
                raise InvalidFieldError(f"{where}.{name}{suffix.get(name, '')}", str(exc)) from None
    for name, ports in (("ports", spec.ports), ("grpcPorts", spec.grpc_ports)):
        for port in ports:
            if not 1 <= port.container_port <= MAX_PORT:
                raise InvalidFieldError(
                    f"{where}.{name}",
                    f"containerPort {port.container_port} is not a port number: 1 to {MAX_PORT}",
                )
    _check_deployment_timeout(model, f"{where}.deploymentTimeout")
    return image


def _check_deployment_timeout(model: Any, field: str) -> None:
    pb = getattr(type(model), "pb", None)
    spec = (pb(model) if callable(pb) else model).container_spec  # the raw Duration
    if not spec.HasField("deployment_timeout"):
        return
    timeout = spec.deployment_timeout
    seconds = timeout.seconds + timeout.nanos / 1e9
    if not 0 <= seconds <= MAX_DEPLOYMENT_TIMEOUT_S:
        raise InvalidFieldError(
            field,
            f"is {seconds:g}s; a deployment timeout is at most 2 hours "
            f"({MAX_DEPLOYMENT_TIMEOUT_S}s) and never negative",
        )
