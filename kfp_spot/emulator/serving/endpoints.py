"""The emulated EndpointService: create, get, list, delete, ``:deployModel``, ``:undeployModel``.

Create and delete answer done operations; a deploy's operation is done once its replicas answer
(or fail), an undeploy's once they are gone (:class:`~.deployments.Deployments` finishes both).
Requests are checked by the floor's rules (:mod:`kfp_spot.vertex.model_endpoint`, the rules
``deploy_spot_endpoint`` checks too) against :data:`~kfp_spot.vertex.EMULATOR`: display names,
labels, dedicated resources, replica counts, traffic splits. What is checked here is what needs
the store (the model and the deployed models an endpoint has) and what this machine can run.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from google.cloud.aiplatform_v1.types.endpoint import Endpoint
from google.cloud.aiplatform_v1.types.endpoint_service import (
    CreateEndpointOperationMetadata,
    CreateEndpointRequest,
    DeployModelOperationMetadata,
    DeployModelRequest,
    UndeployModelOperationMetadata,
    UndeployModelRequest,
)

from kfp_spot import executors
from kfp_spot.emulator import names
from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.serving import store as st
from kfp_spot.emulator.serving.catalog import (
    DEPLOYED_MODEL_OUTPUT_ONLY,
    ENDPOINT_OUTPUT_ONLY,
    MODEL_NAME,
    Catalog,
    ListQuery,
    canonical,
    clear_output_only,
    new_operation,
    parse_request,
    rule_refusal,
    stamp,
)
from kfp_spot.emulator.serving.deployments import Deployments
from kfp_spot.vertex.custom_job import EMULATOR
from kfp_spot.vertex.model_endpoint import (
    check_deployed_model,
    check_endpoint,
    check_endpoint_id,
    check_traffic_split,
    location_of,
)
from kfp_spot.vertex.values import InvalidFieldError


class EndpointApi:
    """Endpoints of the serving store and the models deployed to them (see the module docstring).

    Args:
        catalog: the serving resources (store, lookups and views).
        deployments: the replica pools, which finish deploys and undeploys.
        container_runtime: the container runtime probe (custom serving containers need one).
    """

    def __init__(
        self,
        catalog: Catalog,
        deployments: Deployments,
        container_runtime: Callable[[], str | None],
    ) -> None:
        self.catalog = catalog
        self.store = catalog.store
        self.deployments = deployments
        self.container_runtime = container_runtime

    def endpoint_pb(self, row: st.Row) -> Any:
        """The Endpoint of ``row`` with its deployed models and their ready replica counts."""
        pb = Endpoint.pb()()
        pb.ParseFromString(row.spec)
        for dep in self.store.deployments(row.id, (st.DEPLOYED, st.UNDEPLOYING)):
            dm = self.catalog.dm_pb(dep)
            dm.status.available_replica_count = self.deployments.ready_count(dep.id)
            stamp(dm.status.last_update_time, time.time())
            pb.deployed_models.append(dm)
        return pb

    def create_endpoint(self, parent: str, body: Any, endpoint_id: str = "") -> Any:
        """Create an endpoint; a done operation whose response is the Endpoint."""
        parent = self.catalog.parent(parent)
        pb = parse_request(body, Endpoint, "endpoint")
        clear_output_only(pb, ENDPOINT_OUTPUT_ONLY)  # ignored, as the service does
        try:
            check_endpoint(pb, location=location_of(parent))
            check_endpoint_id(endpoint_id)
        except InvalidFieldError as err:
            raise rule_refusal(err, CreateEndpointRequest) from None
        row_id = endpoint_id or names.new_id()
        name = f"{parent}/endpoints/{row_id}"
        now = time.time()
        pb.name = name
        stamp(pb.create_time, now)
        stamp(pb.update_time, now)
        pb.etag = base64.b64encode(secrets.token_bytes(8)).decode()
        if not self.store.insert("endpoints", row_id, parent, pb.SerializeToString()):
            raise ApiError("ALREADY_EXISTS", f"Endpoint {name} already exists.", "endpoint_id")
        op = new_operation(f"{name}/operations/{names.new_id()}", CreateEndpointOperationMetadata)
        op.done = True
        op.response.Pack(pb)
        self.store.put_operation(op.name, op.SerializeToString(), True)
        return op

    def get_endpoint(self, name: str) -> Any:
        """The Endpoint ``name`` with its deployed models and traffic split."""
        return self.endpoint_pb(self.catalog.endpoint_row(name))

    def list_endpoints(self, parent: str, query: ListQuery) -> tuple[list[Any], str]:
        """A page of the parent's endpoints (newest first unless ordered) and the next token."""
        return self.catalog.list_page("endpoints", parent, self.endpoint_pb, query)

    def delete_endpoint(self, name: str) -> Any:
        """Delete an endpoint without deployed models; a done operation."""
        row = self.catalog.endpoint_row(name)
        if self.store.deployments(row.id):
            raise ApiError(
                "FAILED_PRECONDITION",
                f"Endpoint {name} has deployed models (or one being deployed); undeploy them "
                "before deleting it",
                "name",
            )
        self.store.mark_deleted("endpoints", row.id)
        return self.catalog.done_delete(name)

    def deploy_model(self, endpoint_name: str, body: Any) -> Any:
        """``:deployModel``: validate, start the replicas; an operation done once they answer."""
        row = self.catalog.endpoint_row(endpoint_name)
        endpoint_name = canonical(endpoint_name)
        request = parse_request(body, DeployModelRequest)
        dm = request.deployed_model
        clear_output_only(dm, DEPLOYED_MODEL_OUTPUT_ONLY)  # ignored, as the service does
        live = self.store.deployments(row.id)
        split = dict(request.traffic_split)
        try:
            check_deployed_model(dm, EMULATOR)
            ids = {d.id for d in live if d.state == st.DEPLOYED}
            check_traffic_split(split, ids, deploying=True)
        except InvalidFieldError as err:
            raise rule_refusal(err, DeployModelRequest) from None
        model_row = self._deployable_model(row, dm.model)
        model = self.catalog.model_pb(model_row)
        self._check_runnable(model)
        dm_id = names.new_id()
        dm.id = dm_id
        dm.model = model.name
        dm.model_version_id = "1"
        dm.display_name = dm.display_name or model.display_name
        stamp(dm.create_time, time.time())
        if not dm.dedicated_resources.max_replica_count:
            dm.dedicated_resources.max_replica_count = dm.dedicated_resources.min_replica_count
        op = new_operation(
            f"{endpoint_name}/operations/{names.new_id()}", DeployModelOperationMetadata
        )
        self.store.put_operation(op.name, op.SerializeToString(), False)
        self.store.insert_deployment(
            dm_id,
            row.id,
            dm.SerializeToString(),
            op.name,
            json.dumps({(dm_id if k == "0" else k): v for k, v in split.items()}),
        )
        self.deployments.launch(dm_id)
        return op

    def _deployable_model(self, endpoint: st.Row, model_name: str) -> st.Row:
        model_name = canonical(model_name)
        match = MODEL_NAME.fullmatch(model_name)
        if match and match.group(1) != endpoint.parent:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"deployedModel.model {model_name} is not in {endpoint.parent}, the endpoint's "
                "project and location",
                "deployed_model.model",
            )
        try:
            return self.catalog.model_row(model_name)
        except ApiError as err:
            raise ApiError(err.status, err.message, "deployed_model.model") from None

    def _check_runnable(self, model: Any) -> None:
        """What the emulator cannot run (Vertex AI can): refused as FAILED_PRECONDITION."""
        image = executors.prediction_image(model.container_spec.image_uri)
        if image is not None and not image.served_locally:
            raise ApiError(
                "FAILED_PRECONDITION",
                f"the local emulator serves scikit-learn and XGBoost prebuilt images and custom "
                f"containers, not {image.name}",
                "deployed_model.model",
            )
        if image is None and not self.container_runtime():
            raise ApiError(
                "FAILED_PRECONDITION",
                f"model {model.name} uses the custom container {model.container_spec.image_uri}; "
                "running it needs a container runtime (docker or podman) and none answers here",
                "deployed_model.model",
            )

    def undeploy_model(self, endpoint_name: str, body: Any) -> Any:
        """``:undeployModel``: an operation done once the deployed model's replicas are gone."""
        row = self.catalog.endpoint_row(endpoint_name)
        endpoint_name = canonical(endpoint_name)
        request = parse_request(body, UndeployModelRequest)
        dep = self.store.deployment(request.deployed_model_id)
        if dep is None or dep.endpoint_id != row.id or dep.state != st.DEPLOYED:
            raise ApiError(
                "NOT_FOUND" if dep is None or dep.state == st.GONE else "FAILED_PRECONDITION",
                f"Endpoint {endpoint_name} has no deployed model {request.deployed_model_id!r}"
                + ("" if dep is None or dep.state == st.GONE else f" ready ({dep.state})"),
                "deployed_model_id",
            )
        endpoint = self.endpoint_pb(row)
        split = dict(request.traffic_split) or dict(endpoint.traffic_split)
        if request.traffic_split:
            others = {d.id for d in self.store.deployments(row.id) if d.state == st.DEPLOYED}
            try:
                check_traffic_split(split, others, deploying=False)
            except InvalidFieldError as err:
                raise rule_refusal(err, UndeployModelRequest) from None
        remaining = {k: v for k, v in split.items() if k != dep.id}
        if split.get(dep.id) and remaining:
            raise ApiError(
                "FAILED_PRECONDITION",
                f"deployed model {dep.id} still has {split[dep.id]}% of the traffic; pass a "
                "trafficSplit that gives it 0 (the others adding up to 100)",
                "traffic_split",
            )
        op = new_operation(
            f"{endpoint_name}/operations/{names.new_id()}", UndeployModelOperationMetadata
        )
        self.store.put_operation(op.name, op.SerializeToString(), False)
        self.store.set_deployment(
            dep.id, state=st.UNDEPLOYING, operation=op.name, traffic_split=json.dumps(remaining)
        )
        threading.Thread(
            target=self.deployments.finish_undeploy, args=(dep.id,), name=f"undeploy-{dep.id}"
        ).start()
        return op
