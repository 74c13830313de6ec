"""Deploy a model to a Vertex AI endpoint on Spot VMs: upload, endpoint, deploy, reattach, cancel.

Everything goes through the GAPIC ``ModelServiceClient`` and ``EndpointServiceClient`` (REST and
anonymous credentials for the local emulator's ``http://127.0.0.1:PORT``, as the launcher does).

One deployment is three steps, each found again by a retried task instead of being repeated:

1. **Model**: the artifact directory is uploaded with the serving image, labelled with a key
   unique to the task run (``kfp_spot_deployment``); a retry finds it by that label. A model
   given as ``uploaded_model`` (e.g. GCPC's ``ModelUploadOp`` output) is used as it is.
2. **Endpoint**: the given one, else one this run created (found by the same label), else a new
   one.
3. **DeployedModel**: ``dedicatedResources.spot = true``, machine type, min/max replicas, the
   traffic split. Its long-running operation is written to ``gcp_resources`` (GCPC's
   ``VertexLro`` entries) before the task waits on it; a retry reattaches to it, or finds the
   model this run uploaded already on the endpoint.

SIGTERM or SIGINT (pipeline cancellation) cancels the operation being waited on. A deploy that
still completes (the cancel came too late) is undeployed, so a cancelled task leaves no Spot
replicas running; the uploaded model and the endpoint (which cost nothing without replicas) stay,
for a retry to reuse.

Why one module: the three steps of a deployment (model, endpoint, deployed model) are found again
by the same label, reattached and cancelled by the same Deployer; splitting them would split one
retry story.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as retries

from kfp_spot import executors, fs, vertex
from kfp_spot.validation.component_inputs import check_input
from kfp_spot.vertex import model_endpoint as rules
from kfp_spot.vertex import pipeline_context, signals
from kfp_spot.vertex.client import Endpoint as ApiEndpoint
from kfp_spot.vertex.client import is_emulator_endpoint, make_client, resolve_endpoint
from kfp_spot.vertex.pipeline_context import LOCATION_PLACEHOLDER, PROJECT_ID_PLACEHOLDER
from kfp_spot.vertex.signals import cancel_on_signals
from kfp_spot.vertex.values import INT32_MAX, InvalidFieldError

if TYPE_CHECKING:  # GAPIC loads where a request is built or sent, not when the entry is imported
    from google.cloud.aiplatform_v1.services.endpoint_service import EndpointServiceClient
    from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient
    from google.cloud.aiplatform_v1.types.endpoint import Endpoint
    from google.cloud.aiplatform_v1.types.machine_resources import MachineSpec
    from google.cloud.aiplatform_v1.types.model import Model
    from google.longrunning import operations_pb2

log = logging.getLogger(__name__)

DEPLOYMENT_LABEL = "kfp_spot_deployment"
# Which input sets each field of the requests the deployer sends, for the floor's rules
# (kfp_spot.vertex.model_endpoint), which name request fields; the longest matching prefix wins.
REQUEST_FIELD_INPUTS = {
    "model": "model",
    "model.displayName": "model_display_name",
    "model.labels": "labels",
    "model.artifactUri": "model",
    "model.containerSpec": "serving_container_image_uri",
    "model.containerSpec.imageUri": "serving_container_image_uri",
    "model.containerSpec.env": "serving_container_env",
    "model.containerSpec.command": "serving_container_command",
    "model.containerSpec.args": "serving_container_args",
    "model.containerSpec.ports": "serving_container_ports",
    "model.encryptionSpec": "encryption_spec_key_name",
    "endpoint": "endpoint_display_name",
    "endpoint.labels": "labels",
    "endpoint.encryptionSpec": "encryption_spec_key_name",
    "deployedModel": "deployed_model_display_name",
    "deployedModel.model": "uploaded_model",
    "deployedModel.serviceAccount": "service_account",
    rules.DEDICATED_RESOURCES: "machine_type",
    f"{rules.DEDICATED_RESOURCES}.machineSpec.acceleratorType": "accelerator_type",
    f"{rules.DEDICATED_RESOURCES}.machineSpec.acceleratorCount": "accelerator_count",
    rules.MIN_REPLICA_COUNT: "min_replica_count",
    rules.MAX_REPLICA_COUNT: "max_replica_count",
    f"{rules.DEDICATED_RESOURCES}.spot": "spot",
    rules.TRAFFIC_SPLIT: "traffic_split",
}
# A path the floor names in a message, written as the input instead (longest first).
_PATHS_IN_MESSAGES = sorted(
    (
        (path, name)
        for path, name in REQUEST_FIELD_INPUTS.items()
        if "." in path and not any(other.startswith(f"{path}.") for other in REQUEST_FIELD_INPUTS)
    ),
    key=lambda item: -len(item[0]),
)


class DeployInputError(ValueError):
    """An input of deploy_spot_endpoint is invalid; names the input and what would be valid.

    Attributes:
        field: the input.
        reason: what is wrong and what would be valid.
        request_field: the request field the floor's rule named (empty for the deployer's own
            rules on its inputs).
    """

    def __init__(self, field_name: str, message: str, request_field: str = ""):
        super().__init__(f"deploy_spot_endpoint input {field_name!r}: {message}")
        self.field = field_name
        self.reason = message
        self.request_field = request_field


def input_error(exc: InvalidFieldError) -> DeployInputError:
    """A floor rule's refusal (a request field) as the error of the input that set the field."""
    parts = re.sub(r"\[\d+\]", "", exc.field).split(".")  # env[1].value: the env input's
    name = exc.field
    for n in range(len(parts), 0, -1):
        hit = REQUEST_FIELD_INPUTS.get(".".join(parts[:n]))
        if hit is not None:
            name = hit
            break
    reason = exc.reason
    for path, input_name in _PATHS_IN_MESSAGES:
        reason = reason.replace(path, input_name)
    return DeployInputError(name, reason, exc.field)


class DeployFailedError(RuntimeError):
    """The service refused or failed a step; the message is the service's own."""


class DeployInterruptedError(BaseException):
    """SIGTERM/SIGINT reached the deployer (pipeline cancellation); a BaseException on purpose."""

    def __init__(self, signum: int):
        super().__init__(f"received signal {signum}")
        self.signum = signum


@dataclass
class DeployRequest:
    """Everything one deployment needs (see the component's docstring for each input)."""

    project: str = PROJECT_ID_PLACEHOLDER
    location: str = LOCATION_PLACEHOLDER
    artifact_uri: str = ""
    uploaded_model: str = ""
    endpoint: str = ""
    model_display_name: str = "kfp-spot-model"
    endpoint_display_name: str = "kfp-spot-endpoint"
    deployed_model_display_name: str = ""
    serving_container_image_uri: str = executors.DEFAULT_PREDICTION_IMAGE
    serving_container_command: Sequence[str] = ()
    serving_container_args: Sequence[str] = ()
    serving_container_env: Mapping[str, str] = field(default_factory=dict)
    serving_container_ports: Sequence[int] = ()
    serving_container_predict_route: str = ""
    serving_container_health_route: str = ""
    machine_type: str = "n1-standard-4"
    accelerator_type: str = ""
    accelerator_count: int = 0
    min_replica_count: int = 2
    max_replica_count: int = 0
    traffic_split: Mapping[str, int] = field(default_factory=lambda: {"0": 100})
    spot: bool = True
    service_account: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    encryption_spec_key_name: str = ""
    api_endpoint: str = ""
    timeout_seconds: float = 3600.0
    poll_interval_seconds: float = 0.0
    run_key: str = ""
    gcp_resources_path: str = ""


@dataclass
class DeployResult:
    """What was deployed: resource names and the REST base for artifact URIs."""

    model: str  # projects/P/locations/L/models/ID
    endpoint: str
    deployed_model_id: str
    base_url: str
    reattached: bool = False


def _check(
    request: DeployRequest, target: vertex.Target, *, check_files: bool = True
) -> tuple[Any, Any]:
    """Validate the inputs; returns (Model or None, DeployedModel) protos. Nothing is called.

    The rules of the requests are the floor's (:mod:`kfp_spot.vertex.model_endpoint`, checked
    against ``target``, the emulator applying the same); their refusals name the input. The
    model directory is listed (Cloud Storage, the one read) only with ``check_files``.
    """
    from google.cloud.aiplatform_v1.types.endpoint import DeployedModel

    if not request.project:
        raise DeployInputError("project", "is required: the Google Cloud project ID or number")
    if not request.location:
        raise DeployInputError("location", "is required: a Vertex AI region such as us-central1")
    check_input(DeployInputError, "project", vertex.check_project_id, request.project)
    if not request.timeout_seconds > 0:  # 0 would time out (and cancel) the first operation
        raise DeployInputError(
            "timeout_seconds",
            "must be more than 0 (the longest wait per operation in seconds, e.g. 3600), "
            f"got {request.timeout_seconds:g}",
        )
    if bool(request.artifact_uri) == bool(request.uploaded_model):
        raise DeployInputError(
            "model",
            "give exactly one of `model` (the model directory, e.g. the launch step's model "
            "output) / `artifact_uri`, or `uploaded_model` (a google.VertexModel)",
        )
    for value, name, pattern in (
        (request.uploaded_model, "uploaded_model", rules.MODEL_NAME),
        (request.endpoint, "endpoint", rules.ENDPOINT_NAME),
    ):
        if not value:
            continue
        if not pattern.fullmatch(value):
            kind = "models/ID" if name == "uploaded_model" else "endpoints/ID"
            raise DeployInputError(
                name, f"{value!r} is not a resource name projects/P/locations/L/{kind}"
            )
        if rules.location_of(value) != request.location:
            raise DeployInputError(
                name,
                f"{value} is in {rules.location_of(value)}, not in location {request.location!r}",
            )
    if len(request.labels) > vertex.MAX_LABELS - 1:  # one is the deployment label
        raise DeployInputError(
            "labels", f"has {len(request.labels)} labels; at most {vertex.MAX_LABELS - 1}"
        )
    try:
        # The counts first: the proto takes only int32s.
        rules.check_replica_counts(request.min_replica_count, request.max_replica_count, target)
        deployed = DeployedModel(
            display_name=request.deployed_model_display_name,
            service_account=request.service_account,
            dedicated_resources={
                "machine_spec": _machine_spec(request),
                "min_replica_count": request.min_replica_count,
                "max_replica_count": request.max_replica_count or request.min_replica_count,
                "spot": request.spot,
            },
        )
        rules.check_dedicated_resources(deployed.dedicated_resources, target)
        rules.check_deployed_service_account(deployed.service_account)
        rules.check_traffic_split(request.traffic_split)
        # the model first: it is uploaded before the endpoint is made
        model = _model(request, target, check_files) if request.artifact_uri else None
        rules.check_endpoint(_new_endpoint(request), location=request.location)
    except InvalidFieldError as exc:
        raise input_error(exc) from None
    return model, deployed


def _new_endpoint(request: DeployRequest, labels: Mapping[str, str] | None = None) -> Endpoint:
    """The Endpoint to create: display name, labels and CMEK key, as GCPC's EndpointCreateOp."""
    from google.cloud.aiplatform_v1.types.endpoint import Endpoint

    endpoint = Endpoint(
        display_name=request.endpoint_display_name,
        labels=dict(request.labels if labels is None else labels),
    )
    if request.encryption_spec_key_name:
        endpoint.encryption_spec.kms_key_name = request.encryption_spec_key_name
    return endpoint


def _machine_spec(request: DeployRequest) -> MachineSpec:
    """The replicas' MachineSpec; the values the message cannot hold are refused here."""
    from google.cloud.aiplatform_v1.types.accelerator_type import AcceleratorType
    from google.cloud.aiplatform_v1.types.machine_resources import MachineSpec

    acc = request.accelerator_type
    if acc and acc not in AcceleratorType.__members__:
        raise DeployInputError(
            "accelerator_type",
            f"{acc!r} is not an accelerator type (e.g. NVIDIA_TESLA_T4, NVIDIA_L4, TPU_V5_LITEPOD)",
        )
    if not 0 <= request.accelerator_count <= INT32_MAX:
        raise DeployInputError(
            "accelerator_count", f"is {request.accelerator_count}; it must be 0..{INT32_MAX}"
        )
    return MachineSpec(
        machine_type=request.machine_type,
        accelerator_type=acc or 0,
        accelerator_count=request.accelerator_count,
    )


def _model(request: DeployRequest, target: vertex.Target, check_files: bool = True) -> Model:
    """The Model to upload, checked by the floor; the directory holds what its image loads."""
    from google.cloud.aiplatform_v1.types.model import Model

    uri = vertex.service_uri(fs.to_local_path(request.artifact_uri) or request.artifact_uri)
    model = Model(
        display_name=request.model_display_name,
        artifact_uri=uri,
        labels=dict(request.labels),
        container_spec={
            "image_uri": request.serving_container_image_uri,
            "command": list(request.serving_container_command),
            "args": list(request.serving_container_args),
            "env": [{"name": k, "value": v} for k, v in request.serving_container_env.items()],
            "ports": [{"container_port": p} for p in request.serving_container_ports],
            "predict_route": request.serving_container_predict_route,
            "health_route": request.serving_container_health_route,
        },
    )
    if request.encryption_spec_key_name:  # as GCPC's ModelUploadOp
        model.encryption_spec.kms_key_name = request.encryption_spec_key_name
    image = rules.check_model(model, target, location=request.location)
    if check_files and image is not None and image.artifacts:
        entries = _files(uri)
        try:
            rules.check_artifact_files(uri, entries, image)
        except InvalidFieldError as exc:
            hint = _layout_hint(uri, entries, image.artifacts)
            raise DeployInputError("model", f"{exc.reason} ({hint})", exc.field) from None
    return model


def _layout_hint(uri: str, entries: list[str], artifacts: tuple[str, ...]) -> str:
    """What to do about a model directory, listing ``entries``, without the one file it loads.

    A model saved one level down (``AIP_MODEL_DIR/model/model.joblib``, a common slip) is
    named with the directory to give instead; a directory of more than a few entries is not
    searched (one listing each).
    """
    present = [name for name in artifacts if name in entries]
    if len(present) > 1:
        return f"keep one of {' and '.join(present)}: the image loads exactly one"
    for entry in entries if len(entries) <= 3 else []:
        try:
            inner = fs.list_names(fs.join(uri, entry), timeout=STORAGE_TIMEOUT_SECONDS)
        except (OSError, asyncio.TimeoutError):  # a file, or unreachable: no hint from it
            continue
        found = [name for name in artifacts if name in inner]
        if len(found) == 1:
            return f"{found[0]} is in {entry}/: give that directory, {fs.join(uri, entry)}"
    return (
        f"save the model as {' or '.join(artifacts)} directly in AIP_MODEL_DIR, e.g. "
        "joblib.dump(model, os.path.join(os.environ['AIP_MODEL_DIR'], 'model.joblib'))"
    )


#: How long the check of a gs:// model directory waits for Cloud Storage, retries included.
STORAGE_TIMEOUT_SECONDS = 20.0


def _files(uri: str) -> list[str]:
    """The names of the files in the model directory ``uri``."""
    try:
        return fs.list_names(uri, timeout=STORAGE_TIMEOUT_SECONDS)
    except NotADirectoryError:
        raise DeployInputError(
            "model", f"the model directory {uri!r} is a file: give the directory that holds it"
        ) from None
    except FileNotFoundError:
        raise DeployInputError("model", f"the model directory {uri!r} does not exist") from None
    except (OSError, asyncio.TimeoutError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DeployInputError(
            "model",
            f"the model directory {uri!r} could not be listed: Cloud Storage did not answer "
            f"within {STORAGE_TIMEOUT_SECONDS:g} s ({reason}); check the URI and the network",
        ) from None


def _status_name(exc: api_exceptions.GoogleAPICallError) -> str:
    """The error's status as a name (``BAD_REQUEST``, ``NOT_FOUND``), as the REST client has it."""
    if exc.grpc_status_code is not None:
        return str(exc.grpc_status_code.name)
    try:
        return HTTPStatus(int(exc.code or 0)).name
    except ValueError:
        return str(exc.code or "")


READ_RETRY_SECONDS = 60.0
"""How long a read (a get, a list, an operation's poll) rides out transient errors: an
emulator restarted in the middle of a deploy is answering again well within it."""


def _transient(exc: BaseException) -> bool:
    if not isinstance(exc, Exception):
        return False
    return retries.if_transient_error(exc) or isinstance(exc, (OSError, api_exceptions.BadGateway))


def _versioned(name: str, version_id: str) -> str:
    """``projects/.../models/ID@VERSION``: the deploy request names the version it means."""
    return f"{name}@{version_id}" if version_id else str(name)


def _uploaded(op: operations_pb2.Operation) -> str:
    """The model version a done upload operation created."""
    from google.cloud.aiplatform_v1.types.model_service import UploadModelResponse

    response = UploadModelResponse.deserialize(op.response.value)
    return _versioned(response.model, response.model_version_id)


class Deployer:
    """Runs one deployment (see the module docstring).

    Args:
        request: the inputs.
        sleep: how the deployer waits between polls (tests pass their own).
        check_files: list the model directory for the file its prebuilt image loads; False for
            a check made before the run (``kfp-spot submit``), when the directory is not made
            yet. Every other input is checked either way, without a call.
    """

    def __init__(
        self,
        request: DeployRequest,
        *,
        sleep: Callable[[float], None] = signals.sleep,
        check_files: bool = True,
    ):
        self.request = request
        self.api: ApiEndpoint
        try:
            # GCPC's placeholders reach us unresolved outside Vertex AI Pipelines: settled per
            # target, as the launcher settles them (local-project/us-central1 on the emulator).
            emulator = is_emulator_endpoint(request.api_endpoint)
            for name in ("project", "location", "service_account", "encryption_spec_key_name"):
                value = check_input(
                    DeployInputError,
                    name,
                    pipeline_context.resolve,
                    name,
                    getattr(request, name),
                    emulator=emulator,
                )
                setattr(request, name, value)
            self.api = resolve_endpoint(request.location, request.api_endpoint)
        except InvalidFieldError as exc:
            raise DeployInputError(exc.field, exc.reason) from None
        self.model_pb, self.deployed_pb = _check(request, self.api.target, check_files=check_files)
        self.parent = f"projects/{request.project}/locations/{request.location}"
        self.key = hashlib.sha256(request.run_key.encode()).hexdigest()[:32]
        self._sleep = sleep
        self._models: ModelServiceClient | None = None
        self._endpoints: EndpointServiceClient | None = None
        self._resources: list[dict[str, str]] = []
        interval = request.poll_interval_seconds
        self.poll = interval if interval > 0 else (0.2 if self.api.local else 10.0)
        self._read = retries.Retry(
            predicate=_transient, initial=0.2, maximum=5.0, timeout=READ_RETRY_SECONDS
        )

    @property
    def models(self) -> ModelServiceClient:
        """The ModelServiceClient (made on first use: credentials are looked up only then)."""
        from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient

        if self._models is None:
            self._models = make_client(ModelServiceClient, self.api)
        return self._models

    @property
    def endpoints(self) -> EndpointServiceClient:
        """The EndpointServiceClient (made on first use)."""
        from google.cloud.aiplatform_v1.services.endpoint_service import EndpointServiceClient

        if self._endpoints is None:
            self._endpoints = make_client(EndpointServiceClient, self.api)
        return self._endpoints

    # gcp_resources ----------------------------------------------------------------------------

    def _uri(self, name: str) -> str:
        return f"{self.api.base_url}/v1/{name}"

    def _record(self, kind: str, name: str) -> None:
        """Add a resource to gcp_resources (GCPC's format) before waiting on it."""
        entry = {"resourceType": kind, "resourceUri": self._uri(name)}
        if entry not in self._resources:
            self._resources.append(entry)
        if self.request.gcp_resources_path:
            fs.atomic_write(
                self.request.gcp_resources_path,
                json.dumps({"resources": self._resources}, indent=2),
            )

    def _recorded(self) -> list[str]:
        """Resource names an earlier attempt of this task recorded, oldest first."""
        path = self.request.gcp_resources_path
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (FileNotFoundError, IsADirectoryError):
            return []
        try:
            resources = json.loads(text)["resources"] if text.strip() else []
        except (ValueError, KeyError, TypeError) as exc:
            raise DeployFailedError(f"{path} is not a gcp_resources document: {exc}") from None
        self._resources = [r for r in resources if isinstance(r, dict)]
        names = []
        for res in self._resources:
            uri = str(res.get("resourceUri", ""))
            if "/v1/" in uri:
                names.append(uri.split("/v1/", 1)[1])
        return names

    # steps ------------------------------------------------------------------------------------

    def run(self) -> DeployResult:
        """Upload (or reuse) the model, create (or reuse) the endpoint, deploy on Spot.

        Raises:
            DeployFailedError: the service refused or failed a step (its message).
            DeployInterruptedError: after cancelling (and if need be undeploying) on a signal.
        """
        if self.request.artifact_uri:  # a model uploaded here with that image: stderr
            executors.warn_prediction_image(self.request.serving_container_image_uri)
        with cancel_on_signals(DeployInterruptedError):
            recorded = self._recorded()
            model = self._model(recorded)
            endpoint = self._endpoint(recorded)
            deployed_id, reattached = self._deploy(model, endpoint, recorded)
        return DeployResult(model, endpoint, deployed_id, self.api.base_url, reattached)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except api_exceptions.GoogleAPICallError as exc:
            raise DeployFailedError(f"{what}: {_status_name(exc)} {exc.message}") from exc
        except api_exceptions.RetryError as exc:  # was the retry's own message, a URL and a pool
            raise DeployFailedError(
                f"{what}: no answer from {self.api.base_url} within {READ_RETRY_SECONDS:g} s "
                "(is api_endpoint right, and, for the emulator, is it running?); last error: "
                f"{type(exc.cause).__name__}: {' '.join(str(exc.cause).split())[:200]}"
            ) from exc

    def _labelled(self, lister: Callable[..., Any]) -> Any | None:
        """The resource of this run (label ``kfp_spot_deployment``), checked client-side too."""
        request = {"parent": self.parent, "filter": f'labels.{DEPLOYMENT_LABEL}="{self.key}"'}
        for item in self._call("list", lister, request=request, retry=self._read):
            if item.labels.get(DEPLOYMENT_LABEL) == self.key:
                return item
        return None

    def _model(self, recorded: list[str]) -> str:
        from google.cloud.aiplatform_v1.types.model import Model

        if self.request.uploaded_model:
            model = self._call(
                "get the uploaded model",
                self.models.get_model,
                name=self.request.uploaded_model,
                retry=self._read,
            )
            if "@" in self.request.uploaded_model:  # the version (or alias) it names
                return self.request.uploaded_model
            return _versioned(model.name, model.version_id)
        found = self._labelled(self.models.list_models)
        if found is not None:
            log.info("reusing model %s uploaded by an earlier attempt", found.name)
            return _versioned(found.name, found.version_id)
        for name in recorded:  # an upload that was still running
            if "/models/" in name and "/operations/" in name:
                op = self._wait(self.models, name, "upload")
                if not op.error.code:
                    return _uploaded(op)
        model = Model.deserialize(Model.serialize(self.model_pb))
        model.labels[DEPLOYMENT_LABEL] = self.key
        lro = self._call(
            "upload the model", self.models.upload_model, parent=self.parent, model=model
        )
        self._record("VertexLro", lro.operation.name)
        op = self._wait(self.models, lro.operation.name, "upload")
        self._raise_for(op, "uploading the model")
        name = _uploaded(op)
        log.info("uploaded %s (%s)", name, self.request.serving_container_image_uri)
        return name

    def _endpoint(self, recorded: list[str]) -> str:
        from google.cloud.aiplatform_v1.types.endpoint import Endpoint

        if self.request.endpoint:
            endpoint = self._call(
                "get the endpoint",
                self.endpoints.get_endpoint,
                name=self.request.endpoint,
                retry=self._read,
            )
            self._record("VertexEndpoint", endpoint.name)
            return str(endpoint.name)
        for name in recorded:  # the endpoint an earlier attempt created or used
            if rules.ENDPOINT_NAME.fullmatch(name):
                with contextlib.suppress(api_exceptions.NotFound):
                    endpoint = self.endpoints.get_endpoint(name=name, retry=self._read)
                    log.info("reusing endpoint %s recorded by an earlier attempt", name)
                    self._record("VertexEndpoint", endpoint.name)
                    return str(endpoint.name)
        found = self._labelled(self.endpoints.list_endpoints)
        if found is not None:
            log.info("reusing endpoint %s created by an earlier attempt", found.name)
            self._record("VertexEndpoint", found.name)
            return str(found.name)
        endpoint = _new_endpoint(self.request, {**self.request.labels, DEPLOYMENT_LABEL: self.key})
        lro = self._call(
            "create the endpoint",
            self.endpoints.create_endpoint,
            parent=self.parent,
            endpoint=endpoint,
        )
        op = self._wait(self.endpoints, lro.operation.name, "create endpoint")
        self._raise_for(op, "creating the endpoint")
        name = str(Endpoint.deserialize(op.response.value).name)
        self._record("VertexEndpoint", name)
        log.info("created endpoint %s", name)
        return name

    def _deploy(self, model: str, endpoint: str, recorded: list[str]) -> tuple[str, bool]:
        from google.cloud.aiplatform_v1.types.endpoint import DeployedModel
        from google.cloud.aiplatform_v1.types.endpoint_service import DeployModelResponse

        bare = model.split("@", 1)[0]
        current = self._call(
            "get the endpoint", self.endpoints.get_endpoint, name=endpoint, retry=self._read
        )
        mine = [d for d in current.deployed_models if d.model.split("@", 1)[0] == bare]
        if mine and not self.request.uploaded_model:
            log.info("model %s is deployed on %s already (%s)", bare, endpoint, mine[0].id)
            return mine[0].id, True
        for name in reversed(recorded):  # a deploy an earlier attempt was waiting on
            if name.startswith(endpoint + "/operations/"):
                op = self._get_operation(self.endpoints, name)
                if op.metadata.type_url.endswith("DeployModelOperationMetadata"):
                    log.info("reattaching to the deploy operation %s", name)
                    op = self._wait_deploy(name)
                    if not op.error.code:
                        return DeployModelResponse.deserialize(
                            op.response.value
                        ).deployed_model.id, True
                    log.warning("the earlier deploy ended with %s; deploying again", op.error)
                    break
        deployed = DeployedModel.deserialize(DeployedModel.serialize(self.deployed_pb))
        deployed.model = model
        lro = self._call(
            "deploy the model",
            self.endpoints.deploy_model,
            endpoint=endpoint,
            deployed_model=deployed,
            traffic_split=dict(self.request.traffic_split),
        )
        with self._cancelled_if_interrupted(self.endpoints, lro.operation.name, deploy=True):
            self._record("VertexLro", lro.operation.name)
            res = deployed.dedicated_resources
            log.info(
                "deploying on %s x %s (%s, %d-%d replicas): %s",
                res.machine_spec.machine_type,
                "Spot" if res.spot else "standard",
                endpoint,
                res.min_replica_count,
                res.max_replica_count,
                lro.operation.name,
            )
        op = self._wait_deploy(lro.operation.name)
        self._raise_for(op, "deploying the model")
        return DeployModelResponse.deserialize(op.response.value).deployed_model.id, False

    # operations -------------------------------------------------------------------------------

    def _get_operation(self, client: Any, name: str) -> operations_pb2.Operation:
        return self._call(
            f"get operation {name}",
            client.get_operation,
            request={"name": name},
            retry=self._read,
        )

    def _wait(
        self, client: Any, name: str, what: str, *, deploy: bool = False
    ) -> operations_pb2.Operation:
        """Poll ``name`` until done; on a signal, cancel it and re-raise."""
        deadline = time.monotonic() + self.request.timeout_seconds
        with self._cancelled_if_interrupted(client, name, deploy=deploy):
            while True:
                op = self._get_operation(client, name)
                if op.done:
                    return op
                if time.monotonic() > deadline:
                    self._cancel(client, name)
                    raise DeployFailedError(
                        f"{what} did not finish within timeout_seconds="
                        f"{self.request.timeout_seconds:g} ({name}); it was cancelled"
                    )
                self._sleep(self.poll)

    @contextlib.contextmanager
    def _cancelled_if_interrupted(
        self, client: Any, name: str, *, deploy: bool = False
    ) -> Iterator[None]:
        """On a signal while the operation ``name`` runs, cancel it and re-raise.

        Covers the wait on it and, for a deploy, the moments between starting it and that wait:
        otherwise the deploy, and its Spot replicas, would go on after the task has ended. A
        ``deploy`` that completed before the cancel is undeployed.
        """
        try:
            yield
        except DeployInterruptedError:
            log.warning("interrupted: cancelling %s", name)
            self._cancel(client, name)
            if deploy:
                self._undeploy_if_done(name)
            raise

    def _wait_deploy(self, name: str) -> operations_pb2.Operation:
        return self._wait(self.endpoints, name, "the deployment", deploy=True)

    def _cancel(self, client: Any, name: str) -> None:
        """Ask the service to cancel ``name``, retrying transient errors for up to 20 s.

        A cancel lost to one 503 would leave the deploy going on, and its Spot VMs billing,
        after the task has ended. The bound keeps it within the grace a cancelled task gets.
        """
        retry = retries.Retry(predicate=_transient, initial=0.2, maximum=2.0, timeout=20.0)
        try:
            client.cancel_operation(request={"name": name}, retry=retry)
        except (api_exceptions.GoogleAPIError, OSError) as exc:
            log.error(
                "could not cancel %s (%s): cancel it, or undeploy its model, by hand", name, exc
            )

    def _undeploy_if_done(self, name: str) -> None:
        """After a cancel: a deploy that still completed is undeployed (no Spot VMs left)."""
        from google.cloud.aiplatform_v1.types.endpoint_service import DeployModelResponse

        deadline = time.monotonic() + 60.0
        with contextlib.suppress(api_exceptions.GoogleAPICallError, OSError):
            while time.monotonic() < deadline:
                op = self._get_operation(self.endpoints, name)
                if op.done:
                    break
                time.sleep(self.poll)
            else:
                log.error("the cancelled deploy %s has not ended; check the endpoint", name)
                return
            if op.error.code:
                log.warning("the deploy was cancelled (%s)", op.error.message)
                return
            deployed = DeployModelResponse.deserialize(op.response.value).deployed_model
            endpoint = name.split("/operations/", 1)[0]
            log.warning("the deploy completed before the cancel: undeploying %s", deployed.id)
            self.endpoints.undeploy_model(endpoint=endpoint, deployed_model_id=deployed.id)

    @staticmethod
    def _raise_for(op: operations_pb2.Operation, what: str) -> None:
        if op.error.code:
            raise DeployFailedError(f"{what} failed ({op.name}): {op.error.message}")
