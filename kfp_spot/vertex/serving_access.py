"""Who a deployment's serving replicas run as, and how its endpoint is reached, checked locally.

A DeployedModel's ``serviceAccount`` and an Endpoint's ``network`` name resources outside Vertex
AI, so both targets check their form only (as a CustomJob's, :mod:`kfp_spot.vertex.custom_job`);
an endpoint is reached through a peered VPC network or through Private Service Connect, not both.
Each rule raises the floor's :class:`~kfp_spot.vertex.values.InvalidFieldError` naming the request
field; the deployer and the emulator call them through :mod:`kfp_spot.vertex.model_endpoint`.

Pure: no I/O and no GAPIC client.
"""

from __future__ import annotations

from typing import Any

from kfp_spot.vertex.values import (
    InvalidFieldError,
    InvalidValueError,
    check_network_name,
    check_service_account,
)

__all__ = ["check_deployed_service_account", "check_endpoint_network"]


def check_deployed_service_account(email: Any) -> None:
    """A DeployedModel's ``serviceAccount``: the email of the account its container runs as.

    The API reference: "Specify the email address of the service account"; empty: none.

    Raises:
        InvalidFieldError: naming ``deployedModel.serviceAccount`` and the valid form.
    """
    if not email:
        return
    try:
        check_service_account(email)
    except InvalidValueError as exc:
        raise InvalidFieldError("deployedModel.serviceAccount", str(exc)) from None


def check_endpoint_network(endpoint: Any, field: str = "endpoint") -> None:
    """An Endpoint's ``network``: a VPC network's full name, and no Private Service Connect.

    The API reference: "Format: projects/{project}/global/networks/{network}"; "Only one of the
    fields, network or enable_private_service_connect, can be set"; "network and
    private_service_connect_config are mutually exclusive".

    Args:
        endpoint: the raw protobuf of a ``google.cloud.aiplatform_v1.types.Endpoint``.
        field: the request field holding it.

    Raises:
        InvalidFieldError: naming ``<field>.network``.
    """
    if not endpoint.network:
        return
    try:
        check_network_name(endpoint.network)
    except InvalidValueError as exc:
        raise InvalidFieldError(f"{field}.network", str(exc)) from None
    psc = endpoint.private_service_connect_config
    if endpoint.enable_private_service_connect or psc.enable_private_service_connect:
        raise InvalidFieldError(
            f"{field}.network",
            "is set together with Private Service Connect: an endpoint is reached either "
            "through a peered VPC network or through Private Service Connect, not both",
        )
