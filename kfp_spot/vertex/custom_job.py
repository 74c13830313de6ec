"""The rules Vertex AI applies to a CustomJob before it accepts it, checked locally.

The emulator calls :func:`validate_custom_job` on every create, so it refuses what Vertex AI
refuses, with the field named. The launcher calls :func:`validate_for_submission` on the job it
built before it submits, so a bad spec fails in milliseconds instead of after a round trip; a
machine type missing from kfp-spot's table (a subset of what Vertex offers) is logged and left to
the service to judge.

Where the emulator and Vertex AI differ, a :class:`Target` says so, in this module only:
:data:`VERTEX_AI` and :data:`EMULATOR`. The emulator's one extension is local output paths (its jobs
run on this machine: :mod:`kfp_spot.vertex.storage`); what it lacks is the Vertex AI resources a
job can name (persistent resources, TensorBoards), so a job naming one is refused there, as Vertex
refuses a job naming one that does not exist. Resources outside Vertex AI (service accounts, VPC
networks, Cloud KMS keys) are checked for their form only, by both: the emulator cannot see them.

Field names in errors are protobuf JSON paths (camelCase, as in the REST API), e.g.
``jobSpec.workerPoolSpecs[0].machineSpec.machineType``.

Why one module: the rules of one message (CustomJob), walked in field order, with the one Target
switch between Vertex AI and the emulator; single-value rules, regions and storage rules are
already separate modules.
"""

from __future__ import annotations

import enum
import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from kfp_spot import executors, machines
from kfp_spot.vertex.regions import check_region
from kfp_spot.vertex.resource_ids import MODEL_NAME, MODEL_NAME_FORM
from kfp_spot.vertex.storage import check_output_uri, check_package_uri, service_uri
from kfp_spot.vertex.values import (
    BOOT_DISK_TYPES,
    INT32_MAX,
    MAX_BOOT_DISK_GB,
    MAX_DISPLAY_NAME,
    MAX_ENV_VARS,
    MAX_PACKAGE_URIS,
    MAX_WORKER_POOLS,
    MIN_BOOT_DISK_GB,
    RESERVATION_NAME_KEY,
    TPU_TOPOLOGY,
    InvalidFieldError,
    InvalidValueError,
    check_image_reference,
    check_kms_key_name,
    check_labels,
    check_metadata_context_name,
    check_network_attachment,
    check_network_name,
    check_network_short_name,
    check_persistent_resource_id,
    check_process_text,
    check_project_id,
    check_reservation_name,
    check_reserved_ip_range,
    check_service_account,
    check_tensorboard_name,
    is_env_name,
    is_module_name,
    show,
)

# Compute Engine's machine type names: lowercase letters, digits and hyphens (n1-standard-4,
# ct5lp-hightpu-4t, a3-megagpu-8g). A name of another form is no machine type of any release:
# refused here rather than judged by the service after a round trip.
MACHINE_TYPE_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")

__all__ = [
    "EMULATOR",
    "VERTEX_AI",
    "InvalidJobSpecError",
    "Target",
    "check_accelerator_type",
    "check_machine_spec",
    "to_service_uris",
    "validate_custom_job",
    "validate_for_submission",
]

log = logging.getLogger(__name__)

_ON_DEMAND = "scheduling.strategy ON_DEMAND"  # how a CustomJob leaves Spot


@functools.cache
def _strategies() -> dict[int, str]:
    """Scheduling strategies by number, from the API's enum.

    GAPIC's types load on the first job checked (whoever built that job has loaded them), not
    when a rule is imported: importing ``google.cloud.aiplatform_v1`` costs seconds.
    """
    from google.cloud.aiplatform_v1.types.custom_job import Scheduling

    # proto-plus enums are IntEnums (proto ships no types, so mypy sees neither as iterable).
    return {int(s): s.name for s in cast("type[enum.IntEnum]", Scheduling.Strategy)}


@functools.cache
def _accelerators() -> dict[int, str]:
    """Accelerator types by number, from the API's enum (loaded on first use, as above)."""
    from google.cloud.aiplatform_v1.types.accelerator_type import AcceleratorType

    return {int(a): a.name for a in cast("type[enum.IntEnum]", AcceleratorType)}


def check_accelerator_type(name: Any) -> None:
    """``name`` is one of the API's accelerator types, e.g. ``NVIDIA_TESLA_T4``.

    Raises:
        InvalidValueError: naming the valid types.
    """
    valid = [a for n, a in _accelerators().items() if n]
    if name not in valid:
        raise InvalidValueError(f"unknown accelerator {show(name)}; valid: " + ", ".join(valid))


class InvalidJobSpecError(ValueError):
    """A CustomJob the service would reject.

    Attributes:
        field: the protobuf JSON path of the offending field, e.g. ``displayName``.
        message: what is wrong and what would be valid.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Target:
    """The service a CustomJob is sent to, and where its rules differ from Vertex AI's.

    Attributes:
        name: how errors call it.
        local_output_paths: ``baseOutputDirectory``, ``packageUris`` (and a Model's
            ``artifactUri``) may be an absolute local path, ``file:///`` or ``gs:///ABS/PATH``
            (the jobs and serving replicas run on this machine).
        hosts_vertex_resources: it can hold the persistent resources and TensorBoards a job names.
        known_machines_only: it runs only the machine types in kfp-spot's table (it prices what it
            runs), so a type missing from the table is refused before any call; elsewhere the
            service judges it.
        max_serving_replicas: the most replicas it starts for one deployed model
            (``dedicatedResources.minReplicaCount``, :mod:`kfp_spot.vertex.model_endpoint`).
            Vertex AI documents no fixed maximum (a count past the project's quota fails the
            deployment), so its limit is the field's type, int32.
        serving_replicas_why: why it has that limit, said in the error.
        max_job_replicas: the most replicas (VMs) of one CustomJob, over all its worker pools.
            Vertex AI documents no fixed maximum: a job is bounded by the project's per-region
            training quotas (CPUs, GPUs, TPUs), which it checks when it schedules the job. Its
            limit here is a sanity bound, far above any quota a project is granted, that stops a
            slipped digit (``replica_count=1000000``) before a request is sent.
        job_replicas_why: why it has that limit, said in the error.
    """

    name: str
    local_output_paths: bool
    hosts_vertex_resources: bool
    known_machines_only: bool
    max_serving_replicas: int = INT32_MAX
    serving_replicas_why: str = "minReplicaCount is an int32"
    max_job_replicas: int = 10_000
    job_replicas_why: str = (
        "a sanity bound of kfp-spot's: Vertex AI documents no fixed maximum, your project's "
        "training quotas decide"
    )


VERTEX_AI = Target(
    "Vertex AI", local_output_paths=False, hosts_vertex_resources=True, known_machines_only=False
)
EMULATOR = Target(
    "the local emulator",
    local_output_paths=True,
    hosts_vertex_resources=False,
    known_machines_only=True,
    max_serving_replicas=16,
    serving_replicas_why="it runs every serving replica as a process on this machine",
    max_job_replicas=64,
    job_replicas_why="it runs each replica as a process on this machine",
)


def _pb(job: Any) -> Any:
    """The raw protobuf message behind a proto-plus message (or the message itself)."""
    pb = getattr(type(job), "pb", None)
    return pb(job) if callable(pb) else job


def to_service_uris(job: Any) -> None:
    """Rewrite ``job``'s storage URIs in place to the form the service reads.

    Every ``pythonPackageSpec.packageUris`` entry and ``baseOutputDirectory.outputUriPrefix`` goes
    through :func:`kfp_spot.vertex.storage.service_uri`: ``/gcs/BUCKET/PATH`` (a KFP artifact's
    path on Vertex AI Pipelines) becomes ``gs://BUCKET/PATH``, ``file:///PATH`` becomes ``/PATH``.
    What is still not a location the target reads is left for :func:`validate_for_submission` to
    refuse, naming the field.

    Args:
        job: a ``google.cloud.aiplatform_v1.types.CustomJob`` (proto-plus) or its raw protobuf.
    """
    spec = _pb(job).job_spec
    for pool in spec.worker_pool_specs:
        if pool.HasField("python_package_spec"):
            uris = pool.python_package_spec.package_uris
            uris[:] = [service_uri(uri) for uri in uris]
    if spec.HasField("base_output_directory"):
        out = spec.base_output_directory
        out.output_uri_prefix = service_uri(out.output_uri_prefix)


def validate_custom_job(job: Any, location: str | None = None) -> None:
    """Check ``job`` against the rules Vertex AI applies when a CustomJob is created.

    What the emulator enforces (:data:`EMULATOR`): every machine type must be in kfp-spot's table,
    since the emulator prices and runs only what it knows; local output paths are accepted; a
    persistent resource or TensorBoard is refused (the emulator hosts none).

    Args:
        job: a ``google.cloud.aiplatform_v1.types.CustomJob`` (proto-plus) or its raw protobuf.
        location: the region the job is created in (a CMEK key must be in it); None: unchecked.

    Raises:
        InvalidJobSpecError: the first rule the job breaks, naming the field and what is valid.
    """
    _validate(
        _pb(job),
        known_machines_only=EMULATOR.known_machines_only,
        target=EMULATOR,
        location=location,
    )


def validate_for_submission(
    job: Any, target: Target = VERTEX_AI, location: str | None = None
) -> None:
    """Check ``job`` before it is submitted to ``target``.

    The same rules as the service applies, but kfp-spot's machine table is a subset of what Vertex
    AI offers, so a machine type the table does not know is logged as a warning and the service
    decides (the emulator refuses it on create, naming the field, as Vertex does for a type it
    does not offer). Checks that need the machine's facts are skipped for that pool.

    Args:
        job: the CustomJob (proto-plus or raw protobuf).
        target: :data:`VERTEX_AI`, or :data:`EMULATOR` for a job bound for the local emulator.
        location: the region the job is submitted to (a CMEK key must be in it); None: unchecked.

    Raises:
        InvalidJobSpecError: the first rule the job breaks, naming the field and what is valid.
    """
    _validate(_pb(job), known_machines_only=False, target=target, location=location)


def _validate(
    pb: Any, *, known_machines_only: bool, target: Target, location: str | None = None
) -> None:
    if not pb.display_name.strip():
        raise InvalidJobSpecError("displayName", "is required: give the job a non-empty name")
    if len(pb.display_name) > MAX_DISPLAY_NAME:
        raise InvalidJobSpecError(
            "displayName",
            f"is {len(pb.display_name)} characters long; at most {MAX_DISPLAY_NAME} are allowed",
        )
    try:
        check_labels(pb.labels)
    except InvalidFieldError as exc:
        raise InvalidJobSpecError(exc.field, exc.reason) from None
    if pb.HasField("encryption_spec"):
        key_region = _check_field(
            "encryptionSpec.kmsKeyName", check_kms_key_name, pb.encryption_spec.kms_key_name
        )
        if location is not None and key_region != location:
            # EncryptionSpec.kms_key_name: "The key needs to be in the same region as where the
            # compute resource is created."
            raise InvalidJobSpecError(
                "encryptionSpec.kmsKeyName",
                f"the key is in {key_region!r} but the job is created in {location!r}: Vertex AI "
                "needs a Cloud KMS key in the job's own region",
            )
    if not pb.HasField("job_spec"):
        raise InvalidJobSpecError("jobSpec", "is required and needs at least one workerPoolSpecs")
    spec = pb.job_spec
    spot = _check_scheduling(spec)
    pools = list(spec.worker_pool_specs)
    if not pools:
        raise InvalidJobSpecError(
            "jobSpec.workerPoolSpecs",
            "needs at least one worker pool (the first pool runs the primary replica)",
        )
    if len(pools) > MAX_WORKER_POOLS:
        raise InvalidJobSpecError(
            "jobSpec.workerPoolSpecs",
            f"has {len(pools)} pools; at most {MAX_WORKER_POOLS} are allowed "
            "(primary, workers, parameter servers, evaluators)",
        )
    replicas = sum(max(pool.replica_count, 0) for pool in pools)
    if replicas > target.max_job_replicas:
        raise InvalidJobSpecError(
            "jobSpec.workerPoolSpecs",
            f"asks for {replicas} replicas; {target.name} allows at most "
            f"{target.max_job_replicas} per job ({target.job_replicas_why})",
        )
    for index, pool in enumerate(pools):
        if index > 0 and pool.ByteSize() == 0:
            continue  # an empty placeholder pool, as the SDK sends for unused pool slots
        where = f"jobSpec.workerPoolSpecs[{index}]"
        _check_pool(pool, where, index, spot, known_machines_only, target)
    if spec.HasField("base_output_directory"):
        prefix = spec.base_output_directory.output_uri_prefix
        where = "jobSpec.baseOutputDirectory.outputUriPrefix"
        _check_field(where, check_output_uri, prefix, local_paths=target.local_output_paths)
        _check_field(where, check_process_text, prefix)  # AIP_MODEL_DIR and its siblings
    _check_resources(spec, target)
    _check_nfs_mounts(spec, pools)
    _check_lustre_mounts(pools)
    _check_flex_start_fields(spec)


def _check_field(field: str, check: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a value rule, reporting its refusal against ``field``; returns what the rule returns."""
    try:
        return check(*args, **kwargs)
    except InvalidValueError as exc:
        raise InvalidJobSpecError(field, str(exc)) from None


def _check_nfs_mounts(spec: Any, pools: list[Any]) -> None:
    """NFS mounts (``WorkerPoolSpec.nfsMounts``): every field set, and a network to reach them.

    Vertex AI's "Mount a Network File System share": the job names the network Vertex AI reaches
    the share through (VPC peering: ``network``; or a Private Service Connect interface), and
    ``path`` "has to start with '/'".
    """
    for index, pool in enumerate(pools):
        for i, mount in enumerate(pool.nfs_mounts):
            where = f"jobSpec.workerPoolSpecs[{index}].nfsMounts[{i}]"
            for name, camel in (
                ("server", "server"),
                ("path", "path"),
                ("mount_point", "mountPoint"),
            ):
                if not getattr(mount, name):
                    raise InvalidJobSpecError(f"{where}.{camel}", "is required")
            if not mount.path.startswith("/"):
                raise InvalidJobSpecError(
                    f"{where}.path",
                    f"{show(mount.path)} must be an absolute path exported by the NFS server "
                    "(starting with '/')",
                )
            if not spec.network and not spec.HasField("psc_interface_config"):
                raise InvalidJobSpecError(
                    "jobSpec.network",
                    f"is required to mount {where}: name the VPC network that reaches the NFS "
                    "server (projects/PROJECT_NUMBER/global/networks/NETWORK), or set "
                    "pscInterfaceConfig",
                )


def _check_lustre_mounts(pools: list[Any]) -> None:
    """Lustre mounts (``WorkerPoolSpec.lustreMounts``): every field given.

    Each field of a ``LustreMount`` is "Required" in the API reference.
    """
    for index, pool in enumerate(pools):
        for i, mount in enumerate(pool.lustre_mounts):
            where = f"jobSpec.workerPoolSpecs[{index}].lustreMounts[{i}]"
            for name, camel, what in (
                ("instance_ip", "instanceIp", "the Lustre instance's IP address"),
                ("volume_handle", "volumeHandle", "the Lustre volume's unique identifier"),
                ("filesystem", "filesystem", "the Lustre file system's name"),
                ("mount_point", "mountPoint", "the directory under /mnt/lustre/ to mount it at"),
            ):
                if not getattr(mount, name):
                    raise InvalidJobSpecError(f"{where}.{camel}", f"is required: {what}")


def _check_resources(spec: Any, target: Target) -> None:
    """The other resources a job names: persistent resource, TensorBoard, networking."""
    if spec.persistent_resource_id:
        field = "jobSpec.persistentResourceId"
        _check_field(field, check_persistent_resource_id, spec.persistent_resource_id)
        if not target.hosts_vertex_resources:
            raise InvalidJobSpecError(
                field,
                f"persistent resource {spec.persistent_resource_id!r} not found: {target.name} "
                "has no persistent resources (leave it empty to run on fresh VMs)",
            )
    if spec.tensorboard:
        _check_field("jobSpec.tensorboard", check_tensorboard_name, spec.tensorboard)
        if not spec.service_account:
            # Vertex: "custom_job.job_spec.service_account must be specified when uploading to
            # TensorBoard" (the default service agent cannot write to it).
            raise InvalidJobSpecError(
                "jobSpec.serviceAccount",
                "is required when jobSpec.tensorboard is set: TensorBoard uploads run as a "
                "service account you name (with the Vertex AI TensorBoard writer role)",
            )
        if not target.hosts_vertex_resources:
            raise InvalidJobSpecError(
                "jobSpec.tensorboard",
                f"TensorBoard {spec.tensorboard!r} not found: {target.name} has no TensorBoards "
                "(the job's AIP_TENSORBOARD_LOG_DIR is still set; leave tensorboard empty)",
            )
    if spec.protected_artifact_location_id:
        _check_field(
            "jobSpec.protectedArtifactLocationId", check_region, spec.protected_artifact_location_id
        )
    for name, camel in (("experiment", "experiment"), ("experiment_run", "experimentRun")):
        value = getattr(spec, name)
        if not value:
            continue
        _check_field(f"jobSpec.{camel}", check_metadata_context_name, value)
        if not target.hosts_vertex_resources:
            raise InvalidJobSpecError(
                f"jobSpec.{camel}",
                f"{value!r} not found: {target.name} has no Vertex AI Experiments (leave it "
                "empty; the job's metrics still reach its outputs)",
            )
    for i, model in enumerate(spec.models):
        # CustomJobSpec.models: "Format: projects/{project}/locations/{location}/models/{model}",
        # with "@2" or "@golden" for a version.
        if MODEL_NAME.fullmatch(model) is None:
            raise InvalidJobSpecError(
                f"jobSpec.models[{i}]", f"{show(model)} is not a Model name: {MODEL_NAME_FORM}"
            )
    # The module docstring's "checked for their form only": a service account and a network.
    if spec.service_account:
        _check_field("jobSpec.serviceAccount", check_service_account, spec.service_account)
    if spec.network:
        _check_field("jobSpec.network", check_network_name, spec.network)
    for i, name in enumerate(spec.reserved_ip_ranges):
        _check_field(f"jobSpec.reservedIpRanges[{i}]", check_reserved_ip_range, name)
    if spec.HasField("psc_interface_config"):
        attachment = spec.psc_interface_config.network_attachment
        if attachment:
            _check_field(
                "jobSpec.pscInterfaceConfig.networkAttachment", check_network_attachment, attachment
            )
        for i, peering in enumerate(spec.psc_interface_config.dns_peering_configs):
            where = f"jobSpec.pscInterfaceConfig.dnsPeeringConfigs[{i}]"
            for name, camel in (
                ("domain", "domain"),
                ("target_project", "targetProject"),
                ("target_network", "targetNetwork"),
            ):
                if not getattr(peering, name):
                    raise InvalidJobSpecError(f"{where}.{camel}", "is required")
            if not peering.domain.endswith("."):
                raise InvalidJobSpecError(
                    f"{where}.domain",
                    f"{show(peering.domain)} must end with a dot, e.g. 'my-internal-domain.corp.'",
                )
            # "The project ID hosting the Cloud DNS managed zone"; "The VPC network name".
            _check_field(f"{where}.targetProject", check_project_id, peering.target_project)
            _check_field(f"{where}.targetNetwork", check_network_short_name, peering.target_network)


def _check_scheduling(spec: Any) -> bool:
    if not spec.HasField("scheduling"):
        return False
    scheduling = spec.scheduling
    if scheduling.strategy not in _strategies():
        valid = ", ".join(f"{name} ({num})" for num, name in _strategies().items() if num)
        raise InvalidJobSpecError(
            "jobSpec.scheduling.strategy",
            f"{scheduling.strategy} is not a scheduling strategy; valid: {valid}",
        )
    for name, camel in (("timeout", "timeout"), ("max_wait_duration", "maxWaitDuration")):
        if scheduling.HasField(name):
            duration = getattr(scheduling, name)
            if duration.seconds < 0 or duration.nanos < 0:
                raise InvalidJobSpecError(
                    f"jobSpec.scheduling.{camel}", "must be a non-negative duration, e.g. '3600s'"
                )
    return _strategies()[scheduling.strategy] == "SPOT"


def _check_pool(
    pool: Any, where: str, index: int, spot: bool, known_machines_only: bool, target: Target
) -> None:
    has_container = pool.HasField("container_spec")
    has_python = pool.HasField("python_package_spec")
    if has_container == has_python:
        raise InvalidJobSpecError(
            where,
            "set exactly one of containerSpec or pythonPackageSpec"
            + (" (both are set)" if has_container else " (neither is set)"),
        )
    if pool.replica_count < 1:
        raise InvalidJobSpecError(
            f"{where}.replicaCount", f"is {pool.replica_count}; it must be at least 1"
        )
    if index == 0 and pool.replica_count != 1:
        raise InvalidJobSpecError(
            f"{where}.replicaCount",
            f"is {pool.replica_count}; the first worker pool runs the primary replica and must "
            "have replicaCount 1 (put more workers in workerPoolSpecs[1])",
        )
    _check_machine(pool.machine_spec, f"{where}.machineSpec", spot, known_machines_only)
    if pool.HasField("disk_spec"):
        _check_disk(pool.disk_spec, f"{where}.diskSpec")
    if has_container:
        _check_container(pool.container_spec, f"{where}.containerSpec")
    else:
        _check_python(pool.python_package_spec, f"{where}.pythonPackageSpec", target)


def _check_disk(spec: Any, where: str) -> None:
    # Empty fields take the service's defaults (pd-ssd, 100 GB).
    if spec.boot_disk_type and spec.boot_disk_type not in BOOT_DISK_TYPES:
        raise InvalidJobSpecError(
            f"{where}.bootDiskType",
            f"{show(spec.boot_disk_type)} is not a boot disk type; valid: "
            + ", ".join(BOOT_DISK_TYPES),
        )
    size = spec.boot_disk_size_gb
    if size and not MIN_BOOT_DISK_GB <= size <= MAX_BOOT_DISK_GB:
        raise InvalidJobSpecError(
            f"{where}.bootDiskSizeGb",
            f"is {size}; boot disk size must be within the range of "
            f"[{MIN_BOOT_DISK_GB}, {MAX_BOOT_DISK_GB}] GB (0: the service's default of 100)",
        )


_UNESCAPED_APOSTROPHE = re.compile(r"(?<!\\)'")


def _check_no_nul(values: Any, field: Callable[[int], str]) -> None:
    """:func:`check_process_text` on each of ``values``; ``field(i)`` names the i-th."""
    for i, value in enumerate(values):
        _check_field(field(i), check_process_text, value)


def _check_env(env: Any, where: str) -> None:
    if len(env) > MAX_ENV_VARS:
        raise InvalidJobSpecError(
            f"{where}.env",
            f"has {len(env)} variables; Vertex AI takes at most {MAX_ENV_VARS} (the ones "
            "kfp-spot adds, such as KFP_SPOT_RESUME_FROM, count too): pass settings as "
            "arguments or in a file instead",
        )
    _check_no_nul([var.value for var in env], lambda i: f"{where}.env[{i}].value")
    for i, var in enumerate(env):
        if not is_env_name(var.name):
            raise InvalidJobSpecError(
                f"{where}.env[{i}].name",
                f"{show(var.name)} is not a valid variable name: letters, digits and '_', "
                "not starting with a digit",
            )
        # Vertex AI's own 400 (field env[i].value), met by users passing a Python repr such as
        # "['a', 'b']": JSON's double quotes, or \' where the value needs one, go through.
        if _UNESCAPED_APOSTROPHE.search(var.value):
            raise InvalidJobSpecError(
                f"{where}.env[{i}].value",
                f"Env vars cannot contain any unescaped apostrophe character ' "
                f"({var.name}={show(var.value)}): write it as \\' or pass JSON, whose strings "
                "are in double quotes",
            )


def _check_container(spec: Any, where: str) -> None:
    if not spec.image_uri:
        raise InvalidJobSpecError(
            f"{where}.imageUri", "is required, e.g. 'us-docker.pkg.dev/PROJECT/REPO/IMAGE:TAG'"
        )
    _check_field(f"{where}.imageUri", check_image_reference, spec.image_uri)
    _check_no_nul(spec.command, lambda i: f"{where}.command[{i}]")
    _check_no_nul(spec.args, lambda i: f"{where}.args[{i}]")
    _check_env(spec.env, where)


def _check_python(spec: Any, where: str, target: Target) -> None:
    if not spec.executor_image_uri:
        raise InvalidJobSpecError(
            f"{where}.executorImageUri",
            "is required: a prebuilt training image, e.g. "
            "'us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest'",
        )
    problem = executors.executor_image_problem(spec.executor_image_uri)
    if problem:
        raise InvalidJobSpecError(f"{where}.executorImageUri", problem)
    uris = list(spec.package_uris)
    if not uris:
        raise InvalidJobSpecError(
            f"{where}.packageUris", "needs at least one package URI (gs://BUCKET/trainer.tar.gz)"
        )
    if len(uris) > MAX_PACKAGE_URIS:
        raise InvalidJobSpecError(
            f"{where}.packageUris",
            f"has {len(uris)} URIs; at most {MAX_PACKAGE_URIS} are allowed",
        )
    for i, uri in enumerate(uris):
        if not uri.strip():
            raise InvalidJobSpecError(f"{where}.packageUris[{i}]", "is empty: give a package URI")
        _check_field(
            f"{where}.packageUris[{i}]",
            check_package_uri,
            uri,
            local_paths=target.local_output_paths,
        )
    if not is_module_name(spec.python_module):
        raise InvalidJobSpecError(
            f"{where}.pythonModule",
            f"{show(spec.python_module)} is not a Python module name; give a dotted name such as "
            "'trainer.task'",
        )
    _check_no_nul(spec.args, lambda i: f"{where}.args[{i}]")
    _check_env(spec.env, where)


def _accelerator_name(value: int) -> str:
    return _accelerators().get(value, str(value))


def check_machine_spec(
    spec: Any,
    where: str,
    *,
    spot: bool,
    known_machines_only: bool = True,
    spot_off: str = "",
) -> None:
    """The rules of one ``MachineSpec`` outside a CustomJob, e.g. a DeployedModel's.

    The same rules as a worker pool's machine: machine type, accelerator type and count, TPU
    topology, and no Spot on a TPU Pod.

    Args:
        spec: a ``google.cloud.aiplatform_v1.types.MachineSpec`` (proto-plus) or its raw protobuf.
        where: the field path of ``spec`` that errors name, e.g.
            ``deployedModel.dedicatedResources.machineSpec``.
        spot: whether the machine runs on Spot VMs.
        known_machines_only: refuse a machine type missing from kfp-spot's table (the emulator,
            which prices what it runs); False logs it and leaves it to the service.
        spot_off: how the caller's resource turns Spot off (e.g. ``dedicatedResources.spot
            false``), named in the TPU Pod error instead of a CustomJob's scheduling strategy.

    Raises:
        InvalidJobSpecError: the first rule ``spec`` breaks, naming the field and what is valid.
    """
    try:
        _check_machine(_pb(spec), where, spot, known_machines_only)
    except InvalidJobSpecError as err:
        if not spot_off or _ON_DEMAND not in err.message:
            raise
        raise InvalidJobSpecError(err.field, err.message.replace(_ON_DEMAND, spot_off)) from None


def _check_machine(spec: Any, where: str, spot: bool, known_machines_only: bool) -> None:
    name = spec.machine_type
    acc_value = int(spec.accelerator_type)
    acc = _accelerator_name(acc_value) if acc_value else ""
    count = spec.accelerator_count
    if acc_value and acc_value not in _accelerators():
        raise InvalidJobSpecError(
            f"{where}.acceleratorType", f"{acc_value} is not an accelerator type"
        )
    if count < 0:
        raise InvalidJobSpecError(f"{where}.acceleratorCount", f"is {count}; it cannot be negative")
    if count and not acc:
        raise InvalidJobSpecError(
            f"{where}.acceleratorType",
            f"is unset but acceleratorCount is {count}: set the accelerator type, or count 0",
        )
    if acc and not count:
        raise InvalidJobSpecError(
            f"{where}.acceleratorCount",
            f"is 0 but acceleratorType is {acc}: set how many accelerators (at least 1)",
        )
    if acc in END_OF_SUPPORT_ACCELERATORS:
        raise InvalidJobSpecError(
            f"{where}.acceleratorType",
            f"{acc} has reached end of support on Google Cloud; use a current GPU such as "
            "NVIDIA_TESLA_T4 or NVIDIA_L4",
        )
    if spec.HasField("reservation_affinity"):
        _check_reservation(spec.reservation_affinity, f"{where}.reservationAffinity")
    if spec.gpu_partition_size:
        _check_gpu_partition(name, acc, spec.gpu_partition_size, f"{where}.gpuPartitionSize")
    if acc in machines.TPU_POD_ACCELERATORS and spot:
        raise _tpu_pod_spot(where, f"acceleratorType {acc} is a TPU Pod")
    machine = machines.machine_type(name)
    if machine is None:
        if not name or known_machines_only or not MACHINE_TYPE_NAME.fullmatch(name):
            examples = (
                "n1-standard-4, n1-highmem-8, e2-standard-8, n2-standard-16, a2-highgpu-1g, "
                "g2-standard-8, ct5lp-hightpu-4t"
            )
            raise InvalidJobSpecError(
                f"{where}.machineType",
                (
                    "is required"
                    if not name
                    else f"{name!r} is not a known machine type"
                    + ("" if MACHINE_TYPE_NAME.fullmatch(name) else " (names are lowercase)")
                )
                + f"; valid types include {examples} (see kfp_spot/data/machines.csv)",
            )
        log.warning(
            "%s.machineType %s is not in kfp-spot's machine table; the service will judge it "
            "(and its accelerators)",
            where,
            show(name),
        )
        return
    if acc in machines.TPU_POD_ACCELERATORS:
        return
    if machine.accelerator_type:
        _check_builtin(spec, where, machine, acc, count, spot)
        return
    if not acc:
        if spec.tpu_topology:
            raise InvalidJobSpecError(
                f"{where}.tpuTopology",
                f"is set but {name} has no TPU; use a TPU machine type such as ct5lp-hightpu-4t",
            )
        return
    attached = machines.accelerator(acc)
    if attached is None or attached.attaches_to not in (machine.family, name):
        hosts = None
        if attached is not None:
            hosts = "n1-* machine types" if attached.attaches_to == "n1" else "machine cloud-tpu"
        raise InvalidJobSpecError(
            f"{where}.acceleratorType",
            f"{acc} cannot be attached to {name}"
            + (f"; it runs on {hosts}" if hosts else "; use the machine type it is built into")
            + " (a2-* for A100, g2-* for L4, a3-* for H100, ct5lp-* for TPU v5e)",
        )
    if attached.attaches_to == "cloud-tpu" and count > machines.TPU_DEVICE_CORES:
        if spot:
            raise _tpu_pod_spot(where, f"{count} {acc} cores are a TPU Pod slice")
        return
    if count not in attached.allowed_counts:
        raise InvalidJobSpecError(
            f"{where}.acceleratorCount",
            f"{count} x {acc} is not offered; valid counts: "
            + ", ".join(map(str, attached.allowed_counts)),
        )


# AcceleratorType values the API reference marks deprecated: "Nvidia Tesla K80 GPU has reached end
# of support" (https://cloud.google.com/compute/docs/eol/k80-eol).
END_OF_SUPPORT_ACCELERATORS = frozenset({"NVIDIA_TESLA_K80"})
_SPECIFIC_RESERVATION = 3  # ReservationAffinity.Type.SPECIFIC_RESERVATION


# GPUs with Multi-Instance GPU partitions (NVIDIA's MIG: A100, H100, H200, B200 and GB200).
MIG_ACCELERATORS = frozenset(
    {
        "NVIDIA_TESLA_A100",
        "NVIDIA_A100_80GB",
        "NVIDIA_H100_80GB",
        "NVIDIA_H100_MEGA_80GB",
        "NVIDIA_H200_141GB",
        "NVIDIA_B200",
        "NVIDIA_GB200",
    }
)


# MachineSpec.gpu_partition_size names a MIG partition "[compute]g.[memory]gb" (GKE's multi-instance
# GPU page, which the API reference points to): a MIG GPU has seven compute units.
GPU_PARTITION_SIZE = re.compile(r"[1-7]g\.[1-9][0-9]*gb")


def _check_gpu_partition(machine_type: str, acc: str, size: str, where: str) -> None:
    """``gpuPartitionSize``: "must be a value supported by the requested accelerator" (MIG GPUs)."""
    if GPU_PARTITION_SIZE.fullmatch(size) is None:
        raise InvalidJobSpecError(
            where,
            f"{show(size)} is not a GPU partition size: write [compute]g.[memory]gb with 1-7 "
            "compute units, as the GPU offers them, e.g. '1g.10gb' or '3g.40gb' (A100 80GB)",
        )
    known = machines.machine_type(machine_type)
    gpu = acc or (known.accelerator_type if known is not None else "")
    if known is None and not acc:
        return  # a machine type missing from the table: the service judges its GPUs
    if gpu not in MIG_ACCELERATORS:
        raise InvalidJobSpecError(
            where,
            f"is set but {machine_type} has "
            + (f"{gpu} GPUs, which have" if gpu else "no GPU, so it has")
            + " no GPU partitions; partitions (MIG, e.g. '1g.10gb') need "
            + ", ".join(sorted(MIG_ACCELERATORS)),
        )


def _check_reservation(affinity: Any, where: str) -> None:
    """A ReservationAffinity: a type, and a specific reservation named by its key and values.

    API reference: ``reservationAffinityType`` "Required"; SPECIFIC_RESERVATION: "the reservation
    must be identified via the key and values fields", the values being "the full resource name
    of the reservation or reservation block" when the key is
    ``compute.googleapis.com/reservation-name``. Reservations are Compute Engine resources, so
    both targets check their form only.
    """
    kind = int(affinity.reservation_affinity_type)
    if kind == 0:
        raise InvalidJobSpecError(
            f"{where}.reservationAffinityType",
            "is required: NO_RESERVATION, ANY_RESERVATION or SPECIFIC_RESERVATION",
        )
    if kind != _SPECIFIC_RESERVATION:
        return
    if not affinity.key or not affinity.values:
        raise InvalidJobSpecError(
            where,
            "SPECIFIC_RESERVATION needs key and values: key "
            f"{RESERVATION_NAME_KEY!r} and values [the reservation's full resource name]",
        )
    if affinity.key == RESERVATION_NAME_KEY:
        for i, value in enumerate(affinity.values):
            _check_field(f"{where}.values[{i}]", check_reservation_name, value)


def _check_builtin(
    spec: Any, where: str, machine: machines.MachineType, acc: str, count: int, spot: bool
) -> None:
    if acc and (acc != machine.accelerator_type or count != machine.accelerator_count):
        raise InvalidJobSpecError(
            f"{where}.acceleratorType",
            f"{machine.name} comes with {machine.accelerator_count} x {machine.accelerator_type}; "
            f"set acceleratorType {machine.accelerator_type} and acceleratorCount "
            f"{machine.accelerator_count} (got {count} x {acc})",
        )
    topology = spec.tpu_topology
    if not topology:
        return
    if not machine.accelerator_type.startswith("TPU_"):
        raise InvalidJobSpecError(
            f"{where}.tpuTopology", f"is set but {machine.name} has no TPU chips"
        )
    if TPU_TOPOLOGY.fullmatch(topology) is None:
        raise InvalidJobSpecError(
            f"{where}.tpuTopology", f"{topology!r} is not a topology; write it like '2x2' or '2x4'"
        )
    chips = 1
    for dim in topology.split("x"):
        chips *= int(dim)
    if chips > machine.accelerator_count and spot:
        raise _tpu_pod_spot(
            where, f"topology {topology} ({chips} chips) spans several {machine.name} hosts"
        )


def _tpu_pod_spot(where: str, why: str) -> InvalidJobSpecError:
    return InvalidJobSpecError(
        where,
        f"{why}, and Spot VMs cannot be used with TPU Pods: use a single-host TPU machine "
        f"(e.g. ct5lp-hightpu-4t with topology 2x2) or {_ON_DEMAND}",
    )


# Fields only a FLEX_START job takes, and what it requires.

MAX_FLEX_START_TIMEOUT_S = 7 * 24 * 3600  # Dynamic Workload Scheduler: timeout of 7 days or less


def _check_flex_start_fields(spec: Any) -> None:
    """Fields that only FLEX_START (Dynamic Workload Scheduler) takes, and what it requires.

    ``scheduling.maxWaitDuration`` is accepted only with FLEX_START (GCPC removes it for every
    other strategy before it creates a job); a FLEX_START job runs for at most 7 days and uses the
    same machine configuration in every worker pool (Vertex AI's Dynamic Workload Scheduler page).
    """
    scheduling = spec.scheduling
    strategy = _strategies().get(scheduling.strategy, str(scheduling.strategy))
    flex = strategy == "FLEX_START"
    if scheduling.HasField("max_wait_duration") and not flex:
        raise InvalidJobSpecError(
            "jobSpec.scheduling.maxWaitDuration",
            f"is set but scheduling.strategy is {strategy}; maxWaitDuration is accepted only "
            "with strategy FLEX_START: remove it (a SPOT or STANDARD job does not wait for "
            "capacity that way)",
        )
    if not flex:
        return
    if scheduling.HasField("timeout"):
        timeout = scheduling.timeout.seconds + scheduling.timeout.nanos / 1e9
        if timeout > MAX_FLEX_START_TIMEOUT_S:
            raise InvalidJobSpecError(
                "jobSpec.scheduling.timeout",
                f"is {timeout:g}s; a FLEX_START job runs for at most 7 days "
                f"({MAX_FLEX_START_TIMEOUT_S}s)",
            )
    machines_seen = [
        (index, pool.machine_spec)
        for index, pool in enumerate(spec.worker_pool_specs)
        if pool.ByteSize()
    ]
    first = machines_seen[0][1] if machines_seen else None
    for index, machine_spec in machines_seen[1:]:
        if machine_spec != first:
            raise InvalidJobSpecError(
                f"jobSpec.workerPoolSpecs[{index}].machineSpec",
                "differs from workerPoolSpecs[0].machineSpec; FLEX_START needs the same machine "
                "configuration in every worker pool",
            )
