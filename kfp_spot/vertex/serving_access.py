"""Who a deployment's serving replicas run as, checked locally.

A DeployedModel's ``serviceAccount`` names a resource outside Vertex AI, so both targets check
its form only (as a CustomJob's, :mod:`kfp_spot.vertex.custom_job`). The rule raises the floor's
:class:`~kfp_spot.vertex.values.InvalidFieldError` naming the request field; the deployer and the
emulator call it through :mod:`kfp_spot.vertex.model_endpoint`.

Pure: no I/O and no GAPIC client.
"""

from __future__ import annotations

from typing import Any

from kfp_spot.vertex.values import InvalidFieldError, InvalidValueError, check_service_account

__all__ = ["check_deployed_service_account"]


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
