"""The emulated ModelService: ``models:upload`` (a done operation), get, list, delete.

An upload is refused as Vertex refuses it, by the floor's rules
(:mod:`kfp_spot.vertex.model_endpoint`, which ``deploy_spot_endpoint`` checks too): a display
name, labels, a prediction image and, for a prebuilt one, an artifact directory holding exactly
one of the files that image serves (listed here, judged there).

Listing a ``gs://`` artifact directory is bounded (:data:`STORAGE_TIMEOUT_SECONDS`): when Cloud
Storage (or ``STORAGE_EMULATOR_HOST``) cannot be reached the upload is answered 503 UNAVAILABLE,
as Google's APIs answer for a backend they cannot reach, instead of waiting out the storage
client's retries and failing with a 500.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from typing import Any

from google.cloud.aiplatform_v1.types.model_service import (
    UploadModelOperationMetadata,
    UploadModelRequest,
    UploadModelResponse,
)

from kfp_spot import executors, fs
from kfp_spot.emulator import names
from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.serving.catalog import (
    CODE_INVALID_ARGUMENT,
    MODEL_OUTPUT_ONLY,
    Catalog,
    ListQuery,
    clear_output_only,
    new_operation,
    parse_request,
    rule_refusal,
    stamp,
)
from kfp_spot.vertex.custom_job import EMULATOR
from kfp_spot.vertex.model_endpoint import (
    MODEL_NAME,
    check_artifact_files,
    check_model,
    check_model_id,
    location_of,
)
from kfp_spot.vertex.resource_ids import DEFAULT_ALIAS
from kfp_spot.vertex.values import InvalidFieldError

#: How long an upload waits for the listing of a ``gs://`` artifact directory (retries included).
STORAGE_TIMEOUT_SECONDS = 5.0


class ModelApi:
    """Models of the serving store (see the module docstring).

    Args:
        catalog: the serving resources (store, lookups and views).
    """

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.store = catalog.store

    def upload_model(self, parent: str, body: Any) -> Any:
        """``models:upload``: validate, store the Model; a done operation (or its error)."""
        parent = self.catalog.parent(parent)
        request = parse_request(body, UploadModelRequest)
        model = request.model
        clear_output_only(model, MODEL_OUTPUT_ONLY)  # ignored, as the service does
        if request.parent_model:
            raise ApiError(
                "UNIMPLEMENTED",
                "parentModel (a new version of an existing model) is not emulated; upload a new "
                "model instead",
                "parent_model",
            )
        try:
            check_model_id(request.model_id)
            image = check_model(model, EMULATOR, location=location_of(parent))
        except InvalidFieldError as err:
            raise rule_refusal(err, UploadModelRequest) from None
        model_id = request.model_id or names.new_id()
        name = f"{parent}/models/{model_id}"
        op = new_operation(f"{name}/operations/{names.new_id()}", UploadModelOperationMetadata)
        # Checked before the operation exists: an unreachable storage is no operation of ours.
        problem = _artifact_problem(model.artifact_uri, image) if model.artifact_uri else None
        if problem:
            op.error.code = CODE_INVALID_ARGUMENT
            op.error.message = problem
        else:
            now = time.time()
            model.name = name
            model.version_id = "1"
            # The user's aliases are kept; a new model's first version is the default one.
            if DEFAULT_ALIAS not in model.version_aliases:
                model.version_aliases.append(DEFAULT_ALIAS)
            for field in ("create_time", "update_time", "version_create_time"):
                stamp(getattr(model, field), now)
            model.supported_deployment_resources_types[:] = [1]  # DEDICATED_RESOURCES
            model.etag = base64.b64encode(secrets.token_bytes(8)).decode()
            if not self.store.insert("models", model_id, parent, model.SerializeToString()):
                raise ApiError("ALREADY_EXISTS", f"Model {name} already exists.", "model_id")
            op.response.Pack(UploadModelResponse.pb()(model=name, model_version_id="1"))
        op.done = True
        self.store.put_operation(op.name, op.SerializeToString(), True)
        return op

    def get_model(self, name: str) -> Any:
        """The Model ``name`` (``@1`` or ``@`` one of its version aliases accepted)."""
        return self.catalog.model_pb(self.catalog.model_row(name))

    def list_models(self, parent: str, query: ListQuery) -> tuple[list[Any], str]:
        """A page of the parent's models (newest first unless ordered) and the next page token."""
        return self.catalog.list_page("models", parent, self.catalog.model_pb, query)

    def delete_model(self, name: str) -> Any:
        """Delete a model that no endpoint serves or is being deployed to; a done operation.

        As Vertex AI's "can't be deleted because it's deployed or being deployed": a model
        deleted while its deploy ran left the deployment serving a model that was gone.
        """
        row = self.catalog.model_row(name)
        pb = self.catalog.model_pb(row)
        live = [
            (f"{row.parent}/endpoints/{dep.endpoint_id}", dep.id)
            for dep in self.store.deployments()  # deploying, deployed or undeploying
            if (served := MODEL_NAME.fullmatch(self.catalog.dm_pb(dep).model)) is not None
            and served.group(2) == row.id
        ]
        if live:
            where = ", ".join(f"{endpoint} ({dm_id})" for endpoint, dm_id in live)
            raise ApiError(
                "FAILED_PRECONDITION",
                f"Model {pb.name} is deployed or being deployed to {where}; undeploy it before "
                "deleting it (a deploy in progress: cancel its operation)",
                "name",
            )
        self.store.mark_deleted("models", row.id)
        return self.catalog.done_delete(pb.name)


def _artifact_problem(uri: str, image: executors.PredictionImage | None) -> str | None:
    """Why the artifact directory cannot be served by ``image`` (None when it can).

    Raises:
        ApiError: UNAVAILABLE when the storage holding ``uri`` does not answer in time.
    """
    try:
        names = fs.list_names(fs.to_local_path(uri) or uri, timeout=STORAGE_TIMEOUT_SECONDS)
    except (FileNotFoundError, NotADirectoryError):
        return f"model.artifactUri {uri!r} is not a directory the service can read"
    except (OSError, asyncio.TimeoutError) as exc:
        # Connection refused, DNS, a reset, or no answer within the bound (FSTimeoutError).
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ApiError(
            "UNAVAILABLE",
            f"model.artifactUri {uri!r}: Cloud Storage did not answer within "
            f"{STORAGE_TIMEOUT_SECONDS:g} s ({reason}); retry when it is reachable",
            "model.artifact_uri",
        ) from None
    try:
        check_artifact_files(uri, names, image)
    except InvalidFieldError as err:
        return err.reason
    return None
