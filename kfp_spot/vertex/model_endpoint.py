"""The rules Vertex AI applies to Models, Endpoints and DeployedModels, checked locally.

``deploy_spot_endpoint`` checks its request with these functions before any API call (against the
:class:`~kfp_spot.vertex.custom_job.Target` its ``api_endpoint`` names); the emulator checks every
``models:upload``, endpoint create, ``:deployModel`` and ``:undeployModel`` with the same
functions against :data:`~kfp_spot.vertex.custom_job.EMULATOR`. So one bad deployment is refused
by both, naming the same request field.

Every rule raises the floor's neutral :class:`~kfp_spot.vertex.values.InvalidFieldError`; its
``field`` is the protobuf JSON path of the offending field in the request (camelCase, as in the
REST API), e.g. ``deployedModel.dedicatedResources.maxReplicaCount`` or ``trafficSplit``. The
deployer maps it to its input, the emulator to a 400 in Vertex's form.

Where the emulator's limits differ from Vertex AI's, the ``Target`` says so: it starts at most
:attr:`Target.max_serving_replicas <kfp_spot.vertex.custom_job.Target.max_serving_replicas>`
replicas of one deployed model (each is a process on this machine); Vertex AI documents no fixed
maximum (a count past the project's quota fails the deployment), so its limit is the field's
type, int32.

Pure: no I/O (the caller lists a model directory and passes the file names) and no GAPIC client.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from kfp_spot import executors
from kfp_spot.vertex.autoscaling import check_autoscaling_metric_specs
from kfp_spot.vertex.custom_job import InvalidJobSpecError, Target, check_machine_spec
from kfp_spot.vertex.resource_ids import (
    MODEL_NAME,
    check_deployed_model_id,
    check_endpoint_id,
    check_model_id,
    check_version_aliases,
)
from kfp_spot.vertex.serving_access import check_deployed_service_account, check_endpoint_network
from kfp_spot.vertex.serving_container import check_container_spec
from kfp_spot.vertex.storage import check_output_uri
from kfp_spot.vertex.values import (
    INT32_MAX,
    MAX_DISPLAY_NAME,
    InvalidFieldError,
    InvalidValueError,
    check_kms_key_name,
    check_labels,
)

__all__ = [
    "DEDICATED_RESOURCES",
    "ENDPOINT_NAME",
    "MAX_REPLICA_COUNT",
    "MIN_REPLICA_COUNT",
    "MODEL_NAME",
    "PREDICT_REQUEST_BYTES",
    "TRAFFIC_SPLIT",
    "check_artifact_files",
    "check_artifact_uri",
    "check_dedicated_resources",
    "check_deployed_model",
    "check_deployed_service_account",
    "check_display_name",
    "check_encryption_spec",
    "check_endpoint",
    "check_endpoint_id",
    "check_model",
    "check_model_id",
    "check_replica_counts",
    "check_traffic_split",
    "location_of",
]

# The largest prediction request an endpoint takes: "the service itself will accept instances up
# to the payload limit size (currently, 1.5MB)",
# https://cloud.google.com/sdk/gcloud/reference/ai/endpoints/predict
PREDICT_REQUEST_BYTES = 1536 * 1024

# projects/P/locations/L/endpoints/ID: groups parent, id.
ENDPOINT_NAME = re.compile(r"(projects/[^/]+/locations/[^/]+)/endpoints/([^/:@]+)")
# Deployed model ids are int64s, written in decimal.
_DEPLOYED_MODEL_ID = re.compile(r"[1-9][0-9]{0,18}")

# Fields of a DeployModelRequest the rules name.
DEDICATED_RESOURCES = "deployedModel.dedicatedResources"
MIN_REPLICA_COUNT = f"{DEDICATED_RESOURCES}.minReplicaCount"
MAX_REPLICA_COUNT = f"{DEDICATED_RESOURCES}.maxReplicaCount"
TRAFFIC_SPLIT = "trafficSplit"
_FILES_SHOWN = 10  # of a model directory's files, in an error
NEW_MODEL_KEY = "0"  # a DeployModelRequest's trafficSplit key for the model being deployed


def _raw(message: Any) -> Any:
    """The raw protobuf message behind a proto-plus message (or the message itself)."""
    pb = getattr(type(message), "pb", None)
    return pb(message) if callable(pb) else message


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_display_name(name: Any, field: str) -> None:
    """A Model's or Endpoint's ``displayName``: required, at most 128 characters (any UTF-8).

    Raises:
        InvalidFieldError: naming ``field``.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidFieldError(field, "is required: give it a non-empty name")
    if len(name) > MAX_DISPLAY_NAME:
        raise InvalidFieldError(
            field, f"is {len(name)} characters long; at most {MAX_DISPLAY_NAME} are allowed"
        )


def check_artifact_uri(uri: str, target: Target, field: str = "model.artifactUri") -> None:
    """Where a Model's files are: a ``gs://`` directory, or a local path where ``target`` allows.

    The rules of a job's output directory (:func:`~kfp_spot.vertex.storage.check_output_uri`):
    an absolute local path only on a target that runs on this machine
    (:attr:`Target.local_output_paths`).

    Raises:
        InvalidFieldError: naming ``field``.
    """
    try:
        check_output_uri(uri, local_paths=target.local_output_paths)
    except InvalidValueError as exc:
        raise InvalidFieldError(field, str(exc)) from None


def check_encryption_spec(resource: Any, field: str, location: str | None) -> None:
    """A Model's or Endpoint's CMEK key, when set: a Cloud KMS key in ``location`` (if given).

    Raises:
        InvalidFieldError: naming ``<field>.encryptionSpec.kmsKeyName``.
    """
    key = resource.encryption_spec.kms_key_name
    if not key:
        return
    try:
        region = check_kms_key_name(key)
    except InvalidValueError as exc:
        raise InvalidFieldError(f"{field}.encryptionSpec.kmsKeyName", str(exc)) from None
    if location is not None and region != location:
        raise InvalidFieldError(
            f"{field}.encryptionSpec.kmsKeyName",
            f"the key is in {region!r} but the resource is in {location!r}: Vertex AI needs a "
            "key in the resource's own region",
        )


def check_model(
    model: Any, target: Target, field: str = "model", location: str | None = None
) -> executors.PredictionImage | None:
    """A Model to upload: display name, labels, version aliases, serving container, artifact URI.

    Args:
        model: a ``google.cloud.aiplatform_v1.types.Model`` (proto-plus) or its raw protobuf.
        target: where it is uploaded.
        field: the request field holding it (``model`` in an UploadModelRequest).
        location: the region it is uploaded to (checks a CMEK key's region).

    Returns:
        The prebuilt prediction image it names (None for a custom container).

    Raises:
        InvalidFieldError: the first rule it breaks, naming the field.
    """
    check_display_name(model.display_name, f"{field}.displayName")
    check_labels(dict(model.labels), f"{field}.labels")
    check_version_aliases(model.version_aliases, f"{field}.versionAliases")
    check_encryption_spec(model, field, location)
    image = check_container_spec(model, field)
    uri_field = f"{field}.artifactUri"
    if image is not None and not model.artifact_uri:
        raise InvalidFieldError(
            uri_field,
            f"is required with the prebuilt image {image.name}: the directory holding "
            + " or ".join(image.artifacts),
        )
    if model.artifact_uri:
        check_artifact_uri(model.artifact_uri, target, uri_field)
    return image


def check_artifact_files(
    uri: str,
    files: Collection[str],
    image: executors.PredictionImage | None,
    field: str = "model.artifactUri",
) -> None:
    """A prebuilt image's model directory holds exactly one of the files the image loads.

    Args:
        uri: the directory (named in the error).
        files: the names of the files in it (the caller lists it).
        image: the Model's prebuilt image; a custom container (None) loads what it likes.
        field: the field naming the directory.

    Raises:
        InvalidFieldError: naming ``field``, the files the image loads and those found.
    """
    if image is None or not image.artifacts:
        return
    present = [n for n in image.artifacts if n in files]
    if len(present) != 1:
        shown = sorted(files)[:_FILES_SHOWN]
        more = f" and {len(files) - len(shown)} more" if len(files) > len(shown) else ""
        raise InvalidFieldError(
            field,
            f"the model directory {uri} is expected to contain exactly one of: "
            f"[{', '.join(image.artifacts)}] for {image.name}; it contains "
            f"{shown or 'no files'}{more}",
        )


def check_endpoint(endpoint: Any, field: str = "endpoint", location: str | None = None) -> None:
    """An Endpoint to create: display name, labels, CMEK key, network; no deployed models yet.

    ``location``, when given, is the endpoint's region: a CMEK key must be in it.

    Raises:
        InvalidFieldError: the first rule it breaks, naming the field.
    """
    check_display_name(endpoint.display_name, f"{field}.displayName")
    check_labels(dict(endpoint.labels), f"{field}.labels")
    check_encryption_spec(endpoint, field, location)
    check_endpoint_network(_raw(endpoint), field)
    if len(endpoint.deployed_models) or len(endpoint.traffic_split):
        raise InvalidFieldError(
            f"{field}.deployedModels",
            "deployedModels and trafficSplit are output only on create; deploy models with "
            ":deployModel",
        )


def location_of(name: str) -> str:
    """The location ``L`` of a resource name ``projects/P/locations/L/...``."""
    return name.split("/")[3]


def check_replica_counts(min_count: Any, max_count: Any, target: Target) -> None:
    """``minReplicaCount`` and ``maxReplicaCount`` of a DeployedModel's dedicated resources.

    ``minReplicaCount`` is at least 1 and at most what ``target`` starts for one deployed model;
    ``maxReplicaCount`` is 0 (it then defaults to ``minReplicaCount``) or at least
    ``minReplicaCount``; both are int32s.

    Raises:
        InvalidFieldError: naming the count.
    """
    limit = target.max_serving_replicas
    if not _is_int(min_count) or not 1 <= min_count <= limit:
        why = "" if limit == INT32_MAX else f" on {target.name} ({target.serving_replicas_why})"
        raise InvalidFieldError(MIN_REPLICA_COUNT, f"is {min_count!r}; it must be 1..{limit}{why}")
    if not _is_int(max_count) or max_count < 0 or max_count > INT32_MAX:
        raise InvalidFieldError(
            MAX_REPLICA_COUNT,
            f"is {max_count!r}; it must be 0 (= {MIN_REPLICA_COUNT}) or a count up to {INT32_MAX}",
        )
    if max_count and max_count < min_count:
        raise InvalidFieldError(
            MAX_REPLICA_COUNT,
            f"is {max_count}, less than {MIN_REPLICA_COUNT} ({min_count}); it must be 0 "
            f"(= {MIN_REPLICA_COUNT}) or at least that",
        )


def check_deployed_model(deployed: Any, target: Target) -> None:
    """A DeployedModel of a DeployModelRequest: its model's name and its dedicated resources.

    Models with a prebuilt image or a custom container take ``dedicatedResources`` only (machine
    spec by :func:`~kfp_spot.vertex.custom_job.check_machine_spec`, the training rules; replica
    counts by :func:`check_replica_counts`).

    Args:
        deployed: a ``google.cloud.aiplatform_v1.types.DeployedModel`` or its raw protobuf.
        target: where it is deployed.

    Raises:
        InvalidFieldError: the first rule it breaks, naming the field.
    """
    pb = _raw(deployed)
    if not pb.model:
        raise InvalidFieldError(
            "deployedModel.model", "is required: projects/P/locations/L/models/ID"
        )
    if MODEL_NAME.fullmatch(pb.model) is None:
        raise InvalidFieldError(
            "deployedModel.model",
            f"{pb.model!r} is not a Model name projects/P/locations/L/models/ID[@VERSION]",
        )
    check_deployed_model_id(pb.id)
    check_deployed_service_account(pb.service_account)
    if pb.WhichOneof("prediction_resources") != "dedicated_resources":
        raise InvalidFieldError(
            DEDICATED_RESOURCES,
            "is required: a Model with a custom container or prebuilt image supports only "
            "dedicatedResources (machineSpec, minReplicaCount, ...)",
        )
    check_dedicated_resources(pb.dedicated_resources, target)


def check_dedicated_resources(resources: Any, target: Target) -> None:
    """A DeployedModel's ``dedicatedResources``: its machine, replica counts and autoscaling.

    The machine by :func:`~kfp_spot.vertex.custom_job.check_machine_spec` (the training rules:
    types, accelerators, no Spot on a TPU Pod), the counts by :func:`check_replica_counts`, the
    metric specs by :func:`~kfp_spot.vertex.autoscaling.check_autoscaling_metric_specs`.

    Args:
        resources: a ``DedicatedResources`` (proto-plus) or its raw protobuf.
        target: where it is deployed.

    Raises:
        InvalidFieldError: the first rule it breaks, naming the field.
    """
    res = _raw(resources)
    try:
        check_machine_spec(
            res.machine_spec,
            f"{DEDICATED_RESOURCES}.machineSpec",
            spot=res.spot,
            known_machines_only=target.known_machines_only,
            spot_off=f"{DEDICATED_RESOURCES}.spot false",
        )
    except InvalidJobSpecError as exc:
        raise InvalidFieldError(exc.field, exc.message) from None
    check_replica_counts(res.min_replica_count, res.max_replica_count, target)
    check_autoscaling_metric_specs(
        res.autoscaling_metric_specs, f"{DEDICATED_RESOURCES}.autoscalingMetricSpecs"
    )


def check_traffic_split(
    split: Mapping[Any, Any],
    deployed_ids: Collection[str] | None = None,
    *,
    deploying: bool = True,
    field: str = TRAFFIC_SPLIT,
) -> None:
    """A trafficSplit: deployed model id -> percent 0..100, adding up to 100 (or empty).

    Args:
        split: the split; empty leaves the endpoint's split as it is.
        deployed_ids: the ids of the endpoint's deployed models, when the caller knows them (the
            service does); else a key need only have an id's form.
        deploying: a DeployModelRequest's split, where ``"0"`` is the model being deployed.
        field: the request field.

    Raises:
        InvalidFieldError: naming ``field``.
    """
    if not split:
        return
    for key, value in split.items():
        if deploying and key == NEW_MODEL_KEY:
            pass
        elif deployed_ids is not None and key not in deployed_ids:
            known = sorted(deployed_ids) or "none"
            new = ' and "0" for the model being deployed' if deploying else ""
            raise InvalidFieldError(
                field,
                f"names {key!r}, which is not a deployed model of this endpoint; use their ids "
                f"({known}){new}",
            )
        elif not isinstance(key, str) or _DEPLOYED_MODEL_ID.fullmatch(key) is None:
            new = ' nor "0" (the model being deployed)' if deploying else ""
            raise InvalidFieldError(field, f"key {key!r} is not a deployed model id{new}")
        if not _is_int(value) or not 0 <= value <= 100:
            raise InvalidFieldError(field, f"{key!r}: {value!r} is not a percentage 0..100")
    total = sum(split.values())
    if total != 100:
        raise InvalidFieldError(field, f"{dict(split)} adds up to {total}, not 100")
