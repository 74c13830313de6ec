"""The emulated Model, Endpoint and Prediction services of Vertex AI ``v1``.

- ModelService: ``models:upload`` (a long-running operation), get, list, delete.
- EndpointService: create (an operation), get, list, delete, ``:deployModel`` and
  ``:undeployModel`` (operations that finish once the replicas answer, or are gone).
- PredictionService: ``:predict`` and ``:rawPredict``, routed by the endpoint's traffic split to a
  deployed model and, in turn, to one of its ready replicas.
- Operations: ``GET .../operations/ID`` and ``:cancel`` (a cancelled deploy stops its replicas).

Deployed models run as :class:`~kfp_spot.emulator.serving.pool.ReplicaPool` s; Spot replicas
are preempted on the emulator's policy and on request. Requests are refused with Vertex's status
codes as :class:`~kfp_spot.emulator.errors.ApiError`.
"""

from __future__ import annotations

import base64
import dataclasses
import http.client
import json
import logging
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.cloud.aiplatform_v1.types import (
    CreateEndpointOperationMetadata,
    DeleteOperationMetadata,
    DeployedModel,
    DeployedModelRef,
    DeployModelOperationMetadata,
    DeployModelRequest,
    DeployModelResponse,
    Endpoint,
    Model,
    UndeployModelOperationMetadata,
    UndeployModelRequest,
    UndeployModelResponse,
    UploadModelOperationMetadata,
    UploadModelRequest,
    UploadModelResponse,
)
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from kfp_spot import executors, fs
from kfp_spot.accounting import pricing
from kfp_spot.emulator import billing, filters, names, replicas
from kfp_spot.emulator.errors import ApiError, decode_json, parse_message
from kfp_spot.emulator.policy import PreemptionPolicy
from kfp_spot.emulator.serving import store as st
from kfp_spot.emulator.serving.pool import (
    PoolIdentity,
    PoolSettings,
    ReplicaLaunch,
    ReplicaPool,
)
from kfp_spot.serving.env import serving_python
from kfp_spot.validation import InvalidJobSpecError, check_machine_spec

log = logging.getLogger(__name__)

MAX_REPLICAS = 16  # serving replicas of one deployed model, each a local process
MAX_PREDICT_BYTES = 1536 * 1024  # Vertex: a prediction request must not exceed 1.5 MB
PREDICT_TIMEOUT = 60.0
PREDICTOR = Path(__file__).resolve().parents[2] / "serving" / "predictor.py"
_PARENT = r"projects/[^/]+/locations/[^/]+"
_MODEL = re.compile(rf"({_PARENT})/models/([^/:@]+)(?:@([^/:]+))?")
_ENDPOINT = re.compile(rf"({_PARENT})/endpoints/([^/:]+)")
_SCOPED = re.compile(rf"({_PARENT})(/.*)?")
_PREDICT_FIELDS = {"instances", "parameters"}
CODE_INVALID_ARGUMENT = 3
CODE_CANCELLED = 1
CODE_FAILED_PRECONDITION = 9


def canonical(name: str) -> str:
    """``name`` with its ``projects/P/locations/L`` prefix written with the project number.

    Vertex accepts a project by ID or number and answers with the number; the store keeps
    names in that form, so both spellings reach the same resource.
    """
    match = _SCOPED.fullmatch(name or "")
    if match is None:
        return name
    return names.parse_parent(match.group(1)).canonical + (match.group(2) or "")


def _parse(body: Any, message_cls: Any, field: str = "*") -> Any:
    """A decoded JSON body as a ``message_cls`` (proto-plus class), refused as Vertex refuses it.

    ``field`` is the request field the body binds to; ``*`` (the whole request) names nested
    fields by their own paths (``model.display_name``).
    """
    try:
        return parse_message(body, message_cls.pb(), field)
    except ApiError as err:
        if field != "*" or not err.field or not err.field.startswith("*."):
            raise
        where = err.field[2:]
        message = err.message.replace(f"'{err.field}'", f"'{where}'")
        raise ApiError(err.status, message, where) from None


def _stamp(pb_time: Any, when: float) -> None:
    pb_time.FromNanoseconds(int(when * 1e9))


def _operation(name: str, metadata_cls: Any) -> Any:
    op = operations_pb2.Operation(name=name, done=False)
    meta = metadata_cls.pb()()
    _stamp(meta.generic_metadata.create_time, time.time())
    _stamp(meta.generic_metadata.update_time, time.time())
    op.metadata.Pack(meta)
    return op


class ServingService:
    """Models, endpoints, deployed models and their replicas (see the module docstring).

    Args:
        root: the serving part of the state dir (``serving.sqlite``, logs, model copies).
        policy: automatic preemptions of Spot replicas (the emulator's, shared with training).
        grace_period: SIGTERM -> SIGKILL for a preempted or undeployed replica.
        shutdown_grace: the same when the emulator stops.
        env_cache_dir: where the serving environments are cached.
        container_runtime: the container runtime probe (custom serving containers need one).
        restart_delay: seconds before a preempted replica comes back (a new Spot VM).
    """

    def __init__(
        self,
        root: Path,
        *,
        policy: PreemptionPolicy,
        grace_period: float,
        shutdown_grace: float,
        env_cache_dir: Path,
        container_runtime: Callable[[], str | None],
        restart_delay: float = 0.0,
    ) -> None:
        self.root = Path(root)
        self.store = st.ServingStore(self.root / "serving.sqlite")
        self.env_cache_dir = env_cache_dir
        self.container_runtime = container_runtime
        self.shutdown_grace = shutdown_grace
        self.settings = PoolSettings(
            store=self.store,
            policy=policy,
            grace_period=grace_period,
            shutdown_grace=shutdown_grace,
            restart_delay=restart_delay,
            log_dir=self.root / "logs",
        )
        self._pools: dict[str, ReplicaPool] = {}
        self._lock = threading.RLock()
        self._stopping = False
        self._conns = threading.local()

    # lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Close lives a dead emulator left open, stop its orphans, bring deployments back."""
        open_lives = self.store.open_lives()
        replicas.stop_orphans(
            [{"pid": lv.pid, "token": lv.token} for lv in open_lives if lv.pid and lv.token],
            self.shutdown_grace,
        )
        for lv in open_lives:
            self.store.update_life(
                lv.deployed_model_id,
                lv.replica,
                lv.life,
                end_time=lv.last_seen or lv.start_time,
                end_reason="EMULATOR_RESTARTED",
            )
        for dep in self.store.deployments():
            if dep.state == st.UNDEPLOYING:
                self._finish_undeploy(dep.id, None)
            else:
                self._launch(dep.id)

    def stop(self) -> None:
        """Stop every replica (lives end EMULATOR_RESTARTED); deployments resume next start."""
        with self._lock:
            self._stopping = True
            pools = list(self._pools.values())
        for pool in pools:
            pool.stop("EMULATOR_RESTARTED", self.shutdown_grace)
        self.store.close()

    # names ------------------------------------------------------------------------------------

    @staticmethod
    def _parent(parent: str) -> str:
        """``projects/P/locations/L`` as the store keeps it (P the project number)."""
        try:
            return names.parse_parent(parent).canonical
        except ValueError as err:
            raise ApiError("INVALID_ARGUMENT", f"parent: {err}", "parent") from None

    def _model_row(self, name: str) -> st.Row:
        match = _MODEL.fullmatch(canonical(name))
        if not match:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"{name!r} is not a Model name; expected "
                "projects/PROJECT/locations/LOCATION/models/ID[@VERSION]",
                "name",
            )
        row = self.store.get("models", match.group(2))
        version = match.group(3)
        if (
            row is None
            or row.deleted
            or row.parent != match.group(1)
            or version not in (None, "1", "default")
        ):
            raise ApiError("NOT_FOUND", f"Model {name} does not exist.", "name")
        return row

    def _endpoint_row(self, name: str) -> st.Row:
        match = _ENDPOINT.fullmatch(canonical(name))
        if not match:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"{name!r} is not an Endpoint name; expected "
                "projects/PROJECT/locations/LOCATION/endpoints/ID",
                "name",
            )
        row = self.store.get("endpoints", match.group(2))
        if row is None or row.deleted or row.parent != match.group(1):
            raise ApiError("NOT_FOUND", f"Endpoint {name} does not exist.", "name")
        return row

    # views ------------------------------------------------------------------------------------

    def _model_pb(self, row: st.Row) -> Any:
        pb = Model.pb()()
        pb.ParseFromString(row.spec)
        for dep in self.store.deployments(states=(st.DEPLOYED, st.UNDEPLOYING)):
            dm = self._dm_pb(dep)
            served = _MODEL.fullmatch(dm.model)
            if served is not None and served.group(2) == row.id:
                ref = DeployedModelRef.pb()(
                    endpoint=f"{row.parent}/endpoints/{dep.endpoint_id}", deployed_model_id=dep.id
                )
                pb.deployed_models.append(ref)
        return pb

    def _dm_pb(self, dep: st.DeploymentRow) -> Any:
        pb = DeployedModel.pb()()
        pb.ParseFromString(dep.spec)
        return pb

    def _endpoint_pb(self, row: st.Row) -> Any:
        pb = Endpoint.pb()()
        pb.ParseFromString(row.spec)
        for dep in self.store.deployments(row.id, (st.DEPLOYED, st.UNDEPLOYING)):
            dm = self._dm_pb(dep)
            pool = self._pools.get(dep.id)
            dm.status.available_replica_count = pool.ready_count() if pool else 0
            _stamp(dm.status.last_update_time, time.time())
            pb.deployed_models.append(dm)
        return pb

    # ModelService -----------------------------------------------------------------------------

    def upload_model(self, parent: str, body: Any) -> Any:
        """``models:upload``: validate, store the Model; a done operation (or its error)."""
        parent = self._parent(parent)
        request = _parse(body, UploadModelRequest)
        model = request.model
        if request.parent_model:
            raise ApiError(
                "UNIMPLEMENTED",
                "parentModel (a new version of an existing model) is not emulated; upload a new "
                "model instead",
                "parent_model",
            )
        if not model.display_name:
            raise ApiError(
                "INVALID_ARGUMENT", "model.displayName is required", "model.display_name"
            )
        image_uri = model.container_spec.image_uri
        if not image_uri:
            raise ApiError(
                "INVALID_ARGUMENT",
                "model.containerSpec.imageUri is required: a prebuilt prediction image such as "
                f"{executors.DEFAULT_PREDICTION_IMAGE} or your own serving container",
                "model.container_spec.image_uri",
            )
        try:
            image = executors.prediction_image(image_uri)
        except executors.PredictionImageError as err:
            raise ApiError("INVALID_ARGUMENT", str(err), "model.container_spec.image_uri") from None
        if image is not None and not model.artifact_uri:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"model.artifactUri is required with the prebuilt image {image.name}: the "
                "directory holding " + " or ".join(image.artifacts),
                "model.artifact_uri",
            )
        model_id = request.model_id or names.new_id()
        name = f"{parent}/models/{model_id}"
        op = _operation(f"{name}/operations/{names.new_id()}", UploadModelOperationMetadata)
        problem = self._artifact_problem(model.artifact_uri, image) if model.artifact_uri else None
        if problem:
            op.error.code = CODE_INVALID_ARGUMENT
            op.error.message = problem
        else:
            now = time.time()
            model.name = name
            model.version_id = "1"
            model.version_aliases[:] = ["default"]
            for field in ("create_time", "update_time", "version_create_time"):
                _stamp(getattr(model, field), now)
            model.supported_deployment_resources_types[:] = [1]  # DEDICATED_RESOURCES
            model.etag = base64.b64encode(secrets.token_bytes(8)).decode()
            if not self.store.insert("models", model_id, parent, model.SerializeToString()):
                raise ApiError("ALREADY_EXISTS", f"Model {name} already exists.", "model_id")
            op.response.Pack(UploadModelResponse.pb()(model=name, model_version_id="1"))
        op.done = True
        self.store.put_operation(op.name, op.SerializeToString(), True)
        return op

    @staticmethod
    def _artifact_problem(uri: str, image: executors.PredictionImage | None) -> str | None:
        """Why the artifact directory cannot be served by ``image`` (None when it can)."""
        local = fs.to_local_path(uri)
        if local is None and not uri.startswith("gs://"):
            return (
                f"model.artifactUri {uri!r} must be a gs:// URI (or, on the local emulator, an "
                "absolute local path)"
            )
        try:
            filesystem, path = fs.filesystem(local or uri)
            names = [p.rstrip("/").rsplit("/", 1)[-1] for p in filesystem.ls(path, detail=False)]
        except (FileNotFoundError, NotADirectoryError):
            return f"model.artifactUri {uri!r} is not a directory the service can read"
        if image is None or not image.served_locally:
            return None
        present = [n for n in image.artifacts if n in names]
        if len(present) != 1:
            return (
                f"The model directory {uri} is expected to contain exactly one of: "
                f"[{', '.join(image.artifacts)}] for {image.name}; it contains "
                f"{sorted(names) or 'no files'}"
            )
        return None

    def get_model(self, name: str) -> Any:
        """The Model ``name`` (``@1`` or ``@default`` version suffixes accepted)."""
        return self._model_pb(self._model_row(name))

    def list_models(
        self, parent: str, filter_text: str = "", page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Any], str]:
        """A page of the parent's models, newest first, and the next page token."""
        pbs = [self._model_pb(r) for r in self.store.rows("models", self._parent(parent))]
        return _page(pbs, filter_text, page_size, page_token)

    def delete_model(self, name: str) -> Any:
        """Delete a model that no endpoint serves; a done operation."""
        row = self._model_row(name)
        pb = self._model_pb(row)
        if pb.deployed_models:
            where = ", ".join(f"{r.endpoint} ({r.deployed_model_id})" for r in pb.deployed_models)
            raise ApiError(
                "FAILED_PRECONDITION",
                f"Model {pb.name} is deployed to {where}; undeploy it before deleting it",
                "name",
            )
        self.store.mark_deleted("models", row.id)
        return self._done_delete(pb.name)

    def _done_delete(self, resource: str) -> Any:
        op = _operation(f"{resource}/operations/{names.new_id()}", DeleteOperationMetadata)
        op.done = True
        op.response.Pack(empty_pb2.Empty())
        self.store.put_operation(op.name, op.SerializeToString(), True)
        return op

    # EndpointService --------------------------------------------------------------------------

    def create_endpoint(self, parent: str, body: Any, endpoint_id: str = "") -> Any:
        """Create an endpoint; a done operation whose response is the Endpoint."""
        parent = self._parent(parent)
        pb = _parse(body, Endpoint, "endpoint")
        if not pb.display_name:
            raise ApiError("INVALID_ARGUMENT", "endpoint.displayName is required", "display_name")
        if pb.deployed_models or pb.traffic_split:
            raise ApiError(
                "INVALID_ARGUMENT",
                "deployedModels and trafficSplit are output only on create; deploy models with "
                ":deployModel",
                "deployed_models",
            )
        if endpoint_id and not re.fullmatch(r"[1-9][0-9]{0,18}|[a-z][a-z0-9-]{0,62}", endpoint_id):
            raise ApiError(
                "INVALID_ARGUMENT",
                f"endpointId {endpoint_id!r} must be digits (not starting with 0) or lower-case "
                "letters, digits and hyphens starting with a letter",
                "endpoint_id",
            )
        row_id = endpoint_id or names.new_id()
        name = f"{parent}/endpoints/{row_id}"
        now = time.time()
        pb.name = name
        _stamp(pb.create_time, now)
        _stamp(pb.update_time, now)
        pb.etag = base64.b64encode(secrets.token_bytes(8)).decode()
        if not self.store.insert("endpoints", row_id, parent, pb.SerializeToString()):
            raise ApiError("ALREADY_EXISTS", f"Endpoint {name} already exists.", "endpoint_id")
        op = _operation(f"{name}/operations/{names.new_id()}", CreateEndpointOperationMetadata)
        op.done = True
        op.response.Pack(pb)
        self.store.put_operation(op.name, op.SerializeToString(), True)
        return op

    def get_endpoint(self, name: str) -> Any:
        """The Endpoint ``name`` with its deployed models and traffic split."""
        return self._endpoint_pb(self._endpoint_row(name))

    def list_endpoints(
        self, parent: str, filter_text: str = "", page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Any], str]:
        """A page of the parent's endpoints, newest first, and the next page token."""
        pbs = [self._endpoint_pb(r) for r in self.store.rows("endpoints", self._parent(parent))]
        return _page(pbs, filter_text, page_size, page_token)

    def delete_endpoint(self, name: str) -> Any:
        """Delete an endpoint without deployed models; a done operation."""
        row = self._endpoint_row(name)
        if self.store.deployments(row.id):
            raise ApiError(
                "FAILED_PRECONDITION",
                f"Endpoint {name} has deployed models (or one being deployed); undeploy them "
                "before deleting it",
                "name",
            )
        self.store.mark_deleted("endpoints", row.id)
        return self._done_delete(name)

    def deploy_model(self, endpoint_name: str, body: Any) -> Any:
        """``:deployModel``: validate, start the replicas; an operation done once they answer."""
        row = self._endpoint_row(endpoint_name)
        endpoint_name = canonical(endpoint_name)
        request = _parse(body, DeployModelRequest)
        dm = request.deployed_model
        model_row = self._deployable_model(row, dm.model)
        model = self._model_pb(model_row)
        self._check_resources(dm, model)
        live = self.store.deployments(row.id)
        split = dict(request.traffic_split)
        if split:
            ids = {d.id for d in live if d.state == st.DEPLOYED}
            _check_split(split, ids | {"0"}, "traffic_split")
        dm_id = names.new_id()
        dm.id = dm_id
        dm.model = model.name
        dm.model_version_id = "1"
        dm.display_name = dm.display_name or model.display_name
        _stamp(dm.create_time, time.time())
        if not dm.dedicated_resources.max_replica_count:
            dm.dedicated_resources.max_replica_count = dm.dedicated_resources.min_replica_count
        op = _operation(
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
        self._launch(dm_id)
        return op

    def _deployable_model(self, endpoint: st.Row, model_name: str) -> st.Row:
        if not model_name:
            raise ApiError(
                "INVALID_ARGUMENT",
                "deployedModel.model is required: projects/P/locations/L/models/ID",
                "deployed_model.model",
            )
        model_name = canonical(model_name)
        match = _MODEL.fullmatch(model_name)
        if match and match.group(1) != endpoint.parent:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"deployedModel.model {model_name} is not in {endpoint.parent}, the endpoint's "
                "project and location",
                "deployed_model.model",
            )
        try:
            return self._model_row(model_name)
        except ApiError as err:
            raise ApiError(err.status, err.message, "deployed_model.model") from None

    def _check_resources(self, dm: Any, model: Any) -> None:
        if dm.WhichOneof("prediction_resources") != "dedicated_resources":
            raise ApiError(
                "INVALID_ARGUMENT",
                "Model with a custom container or prebuilt image supports only "
                "deployedModel.dedicatedResources (machineSpec, minReplicaCount, ...)",
                "deployed_model.dedicated_resources",
            )
        res = dm.dedicated_resources
        where = "deployed_model.dedicated_resources"
        try:
            check_machine_spec(
                res.machine_spec,
                f"{where}.machine_spec",
                spot=res.spot,
                spot_off=f"{where}.spot false",
            )
        except InvalidJobSpecError as err:
            raise ApiError("INVALID_ARGUMENT", str(err), err.field) from None
        if res.min_replica_count < 1:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"{where}.min_replica_count is {res.min_replica_count}; it must be >= 1",
                f"{where}.min_replica_count",
            )
        if res.max_replica_count and res.max_replica_count < res.min_replica_count:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"{where}.max_replica_count ({res.max_replica_count}) is less than "
                f"min_replica_count ({res.min_replica_count})",
                f"{where}.max_replica_count",
            )
        if res.min_replica_count > MAX_REPLICAS:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"{where}.min_replica_count is {res.min_replica_count}; the local emulator runs "
                f"every replica as a process on this machine and allows at most {MAX_REPLICAS}",
                f"{where}.min_replica_count",
            )
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
        row = self._endpoint_row(endpoint_name)
        endpoint_name = canonical(endpoint_name)
        request = _parse(body, UndeployModelRequest)
        dep = self.store.deployment(request.deployed_model_id)
        if dep is None or dep.endpoint_id != row.id or dep.state != st.DEPLOYED:
            raise ApiError(
                "NOT_FOUND" if dep is None or dep.state == st.GONE else "FAILED_PRECONDITION",
                f"Endpoint {endpoint_name} has no deployed model {request.deployed_model_id!r}"
                + ("" if dep is None or dep.state == st.GONE else f" ready ({dep.state})"),
                "deployed_model_id",
            )
        endpoint = self._endpoint_pb(row)
        split = dict(request.traffic_split) or dict(endpoint.traffic_split)
        if request.traffic_split:
            others = {d.id for d in self.store.deployments(row.id) if d.state == st.DEPLOYED}
            _check_split(split, others, "traffic_split")
        remaining = {k: v for k, v in split.items() if k != dep.id}
        if split.get(dep.id) and remaining:
            raise ApiError(
                "FAILED_PRECONDITION",
                f"deployed model {dep.id} still has {split[dep.id]}% of the traffic; pass a "
                "trafficSplit that gives it 0 (the others adding up to 100)",
                "traffic_split",
            )
        op = _operation(
            f"{endpoint_name}/operations/{names.new_id()}", UndeployModelOperationMetadata
        )
        self.store.put_operation(op.name, op.SerializeToString(), False)
        self.store.set_deployment(
            dep.id, state=st.UNDEPLOYING, operation=op.name, traffic_split=json.dumps(remaining)
        )
        threading.Thread(
            target=self._finish_undeploy, args=(dep.id, None), name=f"undeploy-{dep.id}"
        ).start()
        return op

    # deployments ------------------------------------------------------------------------------

    def _launch(self, dm_id: str) -> None:
        """Start (or restart) the replicas of a deployment, in the background."""
        threading.Thread(target=self._launch_now, args=(dm_id,), name=f"deploy-{dm_id}").start()

    def _launch_now(self, dm_id: str) -> None:
        dep = self.store.deployment(dm_id)
        assert dep is not None
        try:
            launch = self._replica_launch(dep)
        except (OSError, ValueError, RuntimeError) as err:
            self._deploy_failed(dm_id, f"The deployed model could not be prepared: {err}")
            return
        dm = self._dm_pb(dep)
        res = dm.dedicated_resources
        ms = res.machine_spec
        # Each replica is one VM of the machine spec, billed for its own lives.
        rates = pricing.hourly_rates(
            [
                pricing.Pool(
                    ms.machine_type,
                    billing.accelerator_name(ms.accelerator_type),
                    ms.accelerator_count,
                )
            ]
        )
        identity = PoolIdentity(
            deployed_model_id=dm_id,
            endpoint_id=dep.endpoint_id,
            seq=dep.seq,
            replica_count=res.min_replica_count,
            machine_type=ms.machine_type,
            spot=res.spot,
            spot_usd_per_hour=rates.spot_usd_per_hour,
            on_demand_usd_per_hour=rates.on_demand_usd_per_hour,
        )
        settings = dataclasses.replace(self.settings, log_dir=self.settings.log_dir / dm_id)
        pool = ReplicaPool(
            settings,
            identity,
            launch,
            on_ready=lambda: self._deploy_ready(dm_id),
            on_failed=lambda message: self._deploy_failed(dm_id, message),
        )
        with self._lock:
            if self._stopping:
                return
            self._pools[dm_id] = pool
        pool.start()

    def _replica_launch(self, dep: st.DeploymentRow) -> ReplicaLaunch:
        dm = self._dm_pb(dep)
        model = self._model_pb(self._model_row(dm.model))
        spec = model.container_spec
        endpoint_id = dep.endpoint_id
        predict_route = spec.predict_route or (
            f"/v1/endpoints/{endpoint_id}/deployedModels/{dep.id}:predict"
        )
        health_route = spec.health_route or f"/v1/endpoints/{endpoint_id}/deployedModels/{dep.id}"
        local_copy = self.root / "models" / dep.id
        if model.artifact_uri and not (local_copy / ".complete").exists():
            shutil.rmtree(local_copy, ignore_errors=True)
            filesystem, path = fs.filesystem(
                fs.to_local_path(model.artifact_uri) or model.artifact_uri
            )
            filesystem.get(path.rstrip("/") + "/", str(local_copy) + "/", recursive=True)
            (local_copy / ".complete").write_text(model.artifact_uri)
        aip = {
            "AIP_MODE": "PREDICTION",
            "AIP_HEALTH_ROUTE": health_route,
            "AIP_PREDICT_ROUTE": predict_route,
            "AIP_DEPLOYED_MODEL_ID": dep.id,
            "AIP_ENDPOINT_ID": endpoint_id,
            "AIP_MACHINE_TYPE": dm.dedicated_resources.machine_spec.machine_type,
        }
        if model.artifact_uri:
            aip["AIP_STORAGE_URI"] = str(local_copy)
        user = {e.name: e.value for e in spec.env}
        image = executors.prediction_image(spec.image_uri)
        if image is not None:
            python = str(serving_python(image, self.env_cache_dir))
            aip["KFP_SPOT_SERVING_FRAMEWORK"] = image.framework
            env = replicas.process_env(os.environ, aip, user)
            return ReplicaLaunch(
                lambda _port: [python, str(PREDICTOR)], env, health_route, predict_route
            )
        runtime = self.container_runtime()
        if runtime is None:
            raise RuntimeError("no container runtime (docker or podman) answers")
        env = {**aip, **user}

        def container(port: int) -> list[str]:
            cmd = [runtime, "run", "--rm", "--network=host"]
            if model.artifact_uri:
                cmd += ["-v", f"{local_copy}:{local_copy}:ro"]
            for key, value in {**env, "AIP_HTTP_PORT": str(port)}.items():
                cmd += ["-e", f"{key}={value}"]
            if spec.command:
                cmd += ["--entrypoint", spec.command[0], spec.image_uri, *spec.command[1:]]
            else:
                cmd.append(spec.image_uri)
            return cmd + list(spec.args)

        return ReplicaLaunch(
            container, replicas.process_env(os.environ, {}, {}), health_route, predict_route
        )

    def _deploy_ready(self, dm_id: str) -> None:
        dep = self.store.deployment(dm_id)
        assert dep is not None
        if dep.state != st.DEPLOYING:
            return  # brought back after an emulator restart: already on its endpoint
        body, _done, cancel = self.store.operation(dep.operation) or (b"", True, False)
        if cancel:
            self._cancel_deploy(dm_id)
            return
        row = self.store.get("endpoints", dep.endpoint_id)
        assert row is not None
        endpoint = Endpoint.pb()()
        endpoint.ParseFromString(row.spec)
        split = json.loads(dep.traffic_split)
        if split:
            endpoint.traffic_split.clear()
            endpoint.traffic_split.update({k: int(v) for k, v in split.items()})
        _stamp(endpoint.update_time, time.time())
        op = operations_pb2.Operation()
        op.ParseFromString(body)
        op.done = True
        op.response.Pack(DeployModelResponse.pb()(deployed_model=self._dm_pb(dep)))
        with self.store.transaction() as db:
            db.execute(
                "UPDATE endpoints SET spec = ? WHERE id = ?", (endpoint.SerializeToString(), row.id)
            )
            db.execute("UPDATE deployments SET state = ? WHERE id = ?", (st.DEPLOYED, dm_id))
            db.execute(
                "UPDATE operations SET body = ?, done = 1 WHERE name = ?",
                (op.SerializeToString(), op.name),
            )
        log.info("deployed model %s is serving on endpoint %s", dm_id, dep.endpoint_id)

    def _deploy_failed(self, dm_id: str, message: str, code: int = CODE_INVALID_ARGUMENT) -> None:
        dep = self.store.deployment(dm_id)
        assert dep is not None
        with self._lock:
            pool = self._pools.pop(dm_id, None)
        if pool is not None:
            threading.Thread(target=pool.stop, args=("FAILED", 0.0), daemon=True).start()
        found = self.store.operation(dep.operation)
        op = operations_pb2.Operation()
        if found:
            op.ParseFromString(found[0])
        op.done = True
        op.error.code = code
        op.error.message = message
        with self.store.transaction() as db:
            db.execute("UPDATE deployments SET state = ? WHERE id = ?", (st.GONE, dm_id))
            db.execute(
                "UPDATE operations SET body = ?, done = 1 WHERE name = ?",
                (op.SerializeToString(), op.name),
            )
        log.warning("deploying model %s failed: %s", dm_id, message)

    def _cancel_deploy(self, dm_id: str) -> None:
        with self._lock:
            pool = self._pools.pop(dm_id, None)
        if pool is not None:
            pool.stop("CANCELLED")
        self._deploy_failed(dm_id, "CANCELLED", CODE_CANCELLED)

    def _finish_undeploy(self, dm_id: str, _unused: object) -> None:
        with self._lock:
            pool = self._pools.pop(dm_id, None)
        if pool is not None:
            pool.stop("UNDEPLOYED")
        dep = self.store.deployment(dm_id)
        assert dep is not None
        row = self.store.get("endpoints", dep.endpoint_id)
        assert row is not None
        endpoint = Endpoint.pb()()
        endpoint.ParseFromString(row.spec)
        endpoint.traffic_split.clear()
        endpoint.traffic_split.update({k: int(v) for k, v in json.loads(dep.traffic_split).items()})
        _stamp(endpoint.update_time, time.time())
        found = self.store.operation(dep.operation)
        op = operations_pb2.Operation()
        if found:
            op.ParseFromString(found[0])
        op.done = True
        op.response.Pack(UndeployModelResponse.pb()())
        with self.store.transaction() as db:
            db.execute(
                "UPDATE endpoints SET spec = ? WHERE id = ?", (endpoint.SerializeToString(), row.id)
            )
            db.execute("UPDATE deployments SET state = ? WHERE id = ?", (st.GONE, dm_id))
            db.execute(
                "UPDATE operations SET body = ?, done = 1 WHERE name = ?",
                (op.SerializeToString(), op.name),
            )

    # operations -------------------------------------------------------------------------------

    def get_operation(self, name: str) -> Any:
        """The operation ``name`` (``.../operations/ID``)."""
        found = self.store.operation(canonical(name))
        if found is None:
            raise ApiError("NOT_FOUND", f"Operation {name} does not exist.", "name")
        op = operations_pb2.Operation()
        op.ParseFromString(found[0])
        return op

    def cancel_operation(self, name: str) -> dict[str, Any]:
        """Ask a running operation to stop: a deploy stops its replicas and ends CANCELLED."""
        name = canonical(name)
        self.get_operation(name)
        if not self.store.request_cancel(name):
            return {}  # done already: cancelling a finished operation is a no-op, as on Vertex
        for dep in self.store.deployments(states=(st.DEPLOYING,)):
            if dep.operation == name:
                threading.Thread(target=self._cancel_deploy, args=(dep.id,), daemon=True).start()
        return {}

    # PredictionService ------------------------------------------------------------------------

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
        model = self._model_pb(self._model_row(dm.model))
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
        model = _MODEL.fullmatch(dm.model)
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
        for key in body:
            if key not in _PREDICT_FIELDS:
                raise ApiError(
                    "INVALID_ARGUMENT",
                    f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.',
                    key,
                )
        return body

    def _route(self, endpoint_name: str) -> tuple[st.DeploymentRow, Any]:
        row = self._endpoint_row(endpoint_name)
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
                return dep, self._dm_pb(dep)
            pick -= weight
        raise AssertionError("unreachable")  # pragma: no cover

    def _forward(
        self, dep: st.DeploymentRow, dm: Any, body: bytes, content_type: str
    ) -> tuple[int, bytes, str]:
        """Send ``body`` to a ready replica, around replicas that are down; (status, body, type)."""
        pool = self._pools.get(dep.id)
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

    # emulator extensions ----------------------------------------------------------------------

    def _live(self, endpoint_name: str, dm_id: str) -> tuple[st.DeploymentRow, ReplicaPool | None]:
        row = self._endpoint_row(endpoint_name)
        dep = self.store.deployment(dm_id)
        if dep is None or dep.endpoint_id != row.id or dep.state == st.GONE:
            raise ApiError(
                "NOT_FOUND", f"Endpoint {endpoint_name} has no deployed model {dm_id!r}", "name"
            )
        return dep, self._pools.get(dm_id)

    def preempt_replica(
        self, endpoint_name: str, dm_id: str, replica: int | None = None
    ) -> dict[str, Any]:
        """Preempt one replica of a Spot deployed model (the given one, else a ready one)."""
        dep, pool = self._live(endpoint_name, dm_id)
        if not self._dm_pb(dep).dedicated_resources.spot:
            raise ApiError(
                "FAILED_PRECONDITION",
                f"deployed model {dm_id} does not run on Spot VMs (dedicatedResources.spot is "
                "false); only Spot replicas are preempted",
                "dedicated_resources.spot",
            )
        if pool is None:
            raise ApiError(
                "FAILED_PRECONDITION", f"the replicas of {dm_id} are being prepared", "replica"
            )
        try:
            which = pool.preempt(replica)
        except LookupError as err:
            raise ApiError("FAILED_PRECONDITION", str(err), "replica") from None
        return {"deployedModelId": dm_id, **which}

    def replica_status(self, endpoint_name: str, dm_id: str) -> list[dict[str, Any]]:
        """The replicas of a deployed model right now (PREPARING before their processes)."""
        dep, pool = self._live(endpoint_name, dm_id)
        if pool is not None:
            return pool.status()
        count = self._dm_pb(dep).dedicated_resources.min_replica_count
        return [
            {"replica": i, "life": 0, "state": "PREPARING", "port": None, "pid": None}
            for i in range(count)
        ]

    def endpoint_names(self) -> list[str]:
        """Every endpoint of every project, oldest first."""
        return [f"{r.parent}/endpoints/{r.id}" for r in reversed(self.store.rows("endpoints"))]

    def ledger(self, endpoint_name: str) -> dict[str, Any]:
        """The serving ledger of an endpoint: one row per replica life, and totals."""
        row = self._endpoint_row(endpoint_name)
        now = time.time()
        rows = [_life_row(lv, now) for lv in self.store.lives(row.id)]
        total = {
            key: round(sum(r[key] for r in rows), 6)
            for key in ("billableSeconds", "spotCost", "onDemandCost", "cost", "savings")
        }
        total["preemptions"] = sum(r["endReason"] == "PREEMPTED" for r in rows)
        return {"lives": rows, "total": total}


def _life_row(lv: st.LifeRow, now: float) -> dict[str, Any]:
    """One serving ledger line (camelCase): a replica life and what it cost."""
    stop = lv.end_time if lv.end_time is not None else now
    billable = max(0.0, stop - lv.start_time)
    rates = pricing.Rates(lv.spot_usd_per_hour, lv.on_demand_usd_per_hour)
    return {
        "deployedModelId": lv.deployed_model_id,
        "replica": lv.replica,
        "life": lv.life,
        "startTime": billing.rfc3339(lv.start_time),
        "readyTime": billing.rfc3339(lv.ready_time),
        "endTime": billing.rfc3339(lv.end_time),
        "endReason": lv.end_reason,
        "billableSeconds": round(billable, 3),
        "machineType": lv.machine_type,
        "strategy": lv.strategy,
        **pricing.attempt_cost(billable, rates, lv.strategy).to_ledger(),
    }


def _check_split(split: dict[str, int], allowed: set[str], field: str) -> None:
    unknown = sorted(set(split) - allowed)
    if unknown:
        raise ApiError(
            "INVALID_ARGUMENT",
            f"{field} names {unknown}, which are not deployed models of this endpoint; use "
            f'their ids ({sorted(allowed - {"0"}) or "none yet"}) and "0" for the model '
            "being deployed",
            field,
        )
    if any(not 0 <= v <= 100 for v in split.values()) or sum(split.values()) != 100:
        raise ApiError(
            "INVALID_ARGUMENT",
            f"{field} {split} must give percentages 0..100 that add up to 100",
            field,
        )


def _page(
    pbs: list[Any], filter_text: str, page_size: int, page_token: str
) -> tuple[list[Any], str]:
    try:
        predicate = filters.compile_filter(filter_text or "")
    except filters.FilterError as err:
        raise ApiError("INVALID_ARGUMENT", f"filter: {err}", "filter") from None
    if page_size < 0:
        raise ApiError("INVALID_ARGUMENT", f"pageSize is {page_size}; it must be >= 0", "page_size")
    matching = [
        pb
        for pb in pbs
        if predicate(
            filters.Record(
                "",
                pb.display_name,
                dict(pb.labels),
                pb.create_time.ToNanoseconds() / 1e9,
            )
        )
    ]
    offset = 0
    if page_token:
        try:
            offset = int(base64.urlsafe_b64decode(page_token.encode()).decode())
        except (ValueError, UnicodeDecodeError):
            raise ApiError(
                "INVALID_ARGUMENT", "pageToken is not a token this service returned", "page_token"
            ) from None
    size = min(page_size or 100, 1000)
    more = offset + size < len(matching)
    token = base64.urlsafe_b64encode(str(offset + size).encode()).decode() if more else ""
    return matching[offset : offset + size], token
