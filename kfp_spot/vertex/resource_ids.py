"""The IDs a caller may choose for the Vertex AI resources it creates, as the API reference states.

Each is the last part of the resource name, given in the create request: a Model's ``modelId``
(``models:upload``), an Endpoint's ``endpointId`` (a query parameter of endpoint create) and a
DeployedModel's ``id`` (``:deployModel``). Empty: the service picks one. A Model's
``versionAliases`` name a version the same way (``models/ID@ALIAS``), and a Model's resource name
(``MODEL_NAME``) is made of them. Each rule raises the floor's
:class:`~kfp_spot.vertex.values.InvalidFieldError` naming the request field and the form.

Pure: no I/O and no GAPIC client.
"""

from __future__ import annotations

import re
from typing import Any

from kfp_spot.vertex.values import InvalidFieldError, show

__all__ = [
    "DEFAULT_ALIAS",
    "MODEL_NAME",
    "MODEL_NAME_FORM",
    "check_deployed_model_id",
    "check_endpoint_id",
    "check_model_id",
    "check_version_aliases",
]

# projects/P/locations/L/models/ID[@VERSION]: groups parent, id, version (a version ID or alias).
MODEL_NAME = re.compile(r"(projects/[^/]+/locations/[^/]+)/models/([^/:@]+)(?:@([^/:@]+))?")
MODEL_NAME_FORM = "projects/PROJECT/locations/LOCATION/models/MODEL[@VERSION_ID_OR_ALIAS]"

# UploadModelRequest.model_id: "up to 63 characters, and valid characters are [a-z0-9_-]. The first
# character cannot be a number or hyphen."
MODEL_ID = re.compile(r"[a-z_][a-z0-9_-]{0,62}")
MODEL_ID_FORM = "1-63 of [a-z0-9_-], the first a lowercase letter or '_' (not a digit or '-')"
# CreateEndpointRequest.endpoint_id: "If the first character is a letter, this value may be up to
# 63 characters, and valid characters are [a-z0-9-]. The last character must be a letter or
# number. If the first character is a number, this value may be up to 9 characters, and valid
# characters are [0-9] with no leading zeros."
ENDPOINT_ID = re.compile(r"[1-9][0-9]{0,8}|[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?")
ENDPOINT_ID_FORM = (
    "1-9 digits not starting with 0, or 1-63 of [a-z0-9-] starting with a letter and ending "
    "with a letter or digit"
)

# DeployedModel.id: "This value should be 1-10 characters, and valid characters are /[0-9]/."
DEPLOYED_MODEL_ID = re.compile(r"[0-9]{1,10}")
DEPLOYED_MODEL_ID_FORM = "1-10 digits [0-9]"

# Model.version_aliases: "The format is [a-z][a-zA-Z0-9-]{0,126}[a-z0-9] to distinguish from
# version_id. A default version alias will be created for the first version of the model, and
# there must be exactly one default version alias for a model." ``default`` has that form and may
# be sent (the SDK's ``is_default_version`` sends it); the first version gets it either way.
VERSION_ALIAS = re.compile(r"[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]")
VERSION_ALIAS_FORM = (
    "2-128 of [a-zA-Z0-9-], starting with a lowercase letter and ending with a lowercase letter "
    "or digit (so never a version ID)"
)
DEFAULT_ALIAS = "default"


def _check(value: Any, pattern: re.Pattern[str], form: str, field: str) -> None:
    if value and (not isinstance(value, str) or pattern.fullmatch(value) is None):
        raise InvalidFieldError(field, f"{show(value)} is not a valid ID: {form}")


def check_model_id(model_id: Any, field: str = "modelId") -> None:
    """An UploadModelRequest's ``modelId`` (empty: the service picks one).

    Raises:
        InvalidFieldError: naming ``field`` and the valid form.
    """
    _check(model_id, MODEL_ID, MODEL_ID_FORM, field)


def check_endpoint_id(endpoint_id: Any, field: str = "endpointId") -> None:
    """A CreateEndpointRequest's ``endpointId`` (empty: the service picks one).

    Raises:
        InvalidFieldError: naming ``field`` and the valid form.
    """
    _check(endpoint_id, ENDPOINT_ID, ENDPOINT_ID_FORM, field)


def check_deployed_model_id(deployed_model_id: Any, field: str = "deployedModel.id") -> None:
    """A DeployModelRequest's ``deployedModel.id`` (empty: the service picks one).

    Raises:
        InvalidFieldError: naming ``field`` and the valid form.
    """
    _check(deployed_model_id, DEPLOYED_MODEL_ID, DEPLOYED_MODEL_ID_FORM, field)


def check_version_aliases(aliases: Any, field: str = "model.versionAliases") -> None:
    """A Model's ``versionAliases``: each in the form Vertex AI gives.

    Raises:
        InvalidFieldError: naming ``field[i]`` and the valid form.
    """
    for i, alias in enumerate(aliases):
        if not isinstance(alias, str) or VERSION_ALIAS.fullmatch(alias) is None:
            raise InvalidFieldError(
                f"{field}[{i}]", f"{show(alias)} is not a version alias: {VERSION_ALIAS_FORM}"
            )
