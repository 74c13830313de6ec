"""Build the CustomJob the launcher submits, from the component's inputs.

The result is a ``google.cloud.aiplatform_v1.types.CustomJob``: the same message the GAPIC client
sends to Vertex AI and to the local emulator. The layout follows GCPC's
``create_custom_training_job_from_component`` (one pool with one replica, a second pool with the
other ``replica_count - 1`` replicas; ``max_wait_duration`` only for FLEX_START), so a job built
here and one built by GCPC for the same inputs agree field for field.

Why one module: the component's inputs, their checks and the CustomJob built from them change
together (a new GCPC input is one field, one check and one place in the job); Vertex's own rules
are not here but in kfp_spot.vertex.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.cloud.aiplatform_v1.types import CustomJob, EnvVar, PscInterfaceConfig, WorkerPoolSpec
from google.cloud.aiplatform_v1.types import accelerator_type as gca_accelerator_type
from google.protobuf import duration_pb2, json_format

from kfp_spot import fs, vertex
from kfp_spot.executors import DEFAULT_EXECUTOR_IMAGE, warn_executor_image
from kfp_spot.jobs.field_inputs import input_for_field
from kfp_spot.jobs.strategy import STRATEGIES, Strategy
from kfp_spot.validation.component_inputs import check_input
from kfp_spot.vertex import pipeline_context
from kfp_spot.vertex.pipeline_context import (
    LOCATION_PLACEHOLDER,
    PERSISTENT_RESOURCE_ID_PLACEHOLDER,
    PROJECT_ID_PLACEHOLDER,
)

DEFAULT_TIMEOUT = "604800s"  # GCPC's default: 7 days
DEFAULT_MAX_WAIT = "86400s"  # GCPC's default for FLEX_START: 24 hours

# The environment variable that tells training code where a previous run's checkpoint is.
RESUME_ENV = "KFP_SPOT_RESUME_FROM"

_ACCELERATORS = tuple(
    name
    for name in gca_accelerator_type.AcceleratorType.__members__
    if name != "ACCELERATOR_TYPE_UNSPECIFIED"
)
_T = TypeVar("_T")


class LaunchInputError(ValueError):
    """An input of launch_spot_job is invalid; names the input and what would be valid."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"launch_spot_job input {field_name!r}: {message}")
        self.field = field_name
        self.reason = message


@dataclass
class JobInputs:
    """The launch inputs that shape the CustomJob (everything but the recovery policy).

    The field defaults are the launch_spot_job component's defaults (one source: the component's
    signature and ``entry.build_request`` are checked against them by tests/jobs/test_defaults.py).
    ``project``, ``location`` and ``persistent_resource_id`` default, as in GCPC, to the pipeline's
    (GCPC's placeholders, filled in by Vertex AI Pipelines; :mod:`kfp_spot.vertex.pipeline_context`
    settles them elsewhere before a job is built).
    """

    project: str = PROJECT_ID_PLACEHOLDER
    location: str = LOCATION_PLACEHOLDER
    display_name: str = "kfp-spot-training"
    package_uris: Sequence[str] = ()
    python_module: str = ""
    container_image_uri: str = ""
    command: Sequence[str] = ()  # containerSpec.command (custom containers only)
    executor_image_uri: str = DEFAULT_EXECUTOR_IMAGE
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    machine_type: str = "n1-standard-4"
    accelerator_type: str = ""
    accelerator_count: int = 0
    replica_count: int = 1
    boot_disk_type: str = "pd-ssd"  # GCPC's (and Vertex's) default
    boot_disk_size_gb: int = 100
    worker_pool_specs: Sequence[Mapping[str, Any]] = ()
    base_output_directory: str = ""
    service_account: str = ""
    network: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    timeout: str = DEFAULT_TIMEOUT
    restart_job_on_worker_restart: bool = False
    disable_retries: bool = False
    max_wait_duration: str = DEFAULT_MAX_WAIT
    # GCPC's CustomTrainingJobOp inputs, with its names and defaults.
    tensorboard: str = ""
    enable_web_access: bool = False
    reserved_ip_ranges: Sequence[str] = ()
    encryption_spec_key_name: str = ""
    persistent_resource_id: str = PERSISTENT_RESOURCE_ID_PLACEHOLDER
    psc_interface_config: Mapping[str, Any] = field(default_factory=dict)


# Inputs of one type each (lists and dicts are checked with their items).
_STRING_INPUTS = (
    "display_name",
    "python_module",
    "container_image_uri",
    "executor_image_uri",
    "tensorboard",
    "encryption_spec_key_name",
    "persistent_resource_id",
)
_BOOL_INPUTS = ("restart_job_on_worker_restart", "disable_retries", "enable_web_access")


def checked(name: str, check: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``check(*args)`` (a rule of :mod:`kfp_spot.validation`), its error naming input ``name``.

    Raises:
        LaunchInputError: when the rule refuses the value.
    """
    return check_input(LaunchInputError, name, check, *args, **kwargs)


def parse_strategy(name: str, value: object, allowed: Sequence[Strategy] = STRATEGIES) -> Strategy:
    """``value`` (a :class:`Strategy` or its name) as one of ``allowed``.

    Raises:
        LaunchInputError: naming input ``name`` and the strategies it may be.
    """
    if isinstance(value, str) and value in allowed:
        return Strategy(value)
    shown = value.value if isinstance(value, Strategy) else value
    raise LaunchInputError(name, f"expected one of {', '.join(allowed)}, got {shown!r}")


def parse_duration(name: str, value: str | float | int, *, allow_zero: bool = True) -> float:
    """Seconds in a duration input: ``"3600s"``, ``"90m"``, ``"2h"``, ``"1d"`` or a number.

    Raises:
        LaunchInputError: naming ``name`` when the value is not a duration protobuf can hold.
    """
    return checked(name, vertex.parse_duration, value, allow_zero=allow_zero)


def _duration_json(seconds: float) -> str:
    text = f"{seconds:.9f}".rstrip("0").rstrip(".")
    return f"{text}s"


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def check_inputs(inputs: JobInputs) -> None:
    """Check the inputs a CustomJob is built from: their types and shapes, and their values.

    The rules themselves live in :mod:`kfp_spot.validation`; what is about the service's view of
    the built job (machine types, accelerators, disks, display name, package limits, ...) is
    checked on that job by :func:`build_custom_job` and reported against the input that set it.

    Raises:
        LaunchInputError: on the first bad input.
    """
    for name in ("project", "location"):  # entry.build_request settles placeholders first
        checked(name, pipeline_context.resolve, name, getattr(inputs, name), emulator=False)
    checked("project", vertex.check_project_id, inputs.project)
    checked("location", vertex.check_region, inputs.location)
    for name in _STRING_INPUTS:
        if not isinstance(getattr(inputs, name), str):
            raise LaunchInputError(name, f"expected a string, got {_show(getattr(inputs, name))}")
    for name in _BOOL_INPUTS:
        if not isinstance(getattr(inputs, name), bool):
            shown = _show(getattr(inputs, name))
            raise LaunchInputError(name, f"expected true or false, got {shown}")
    for name in ("args", "command", "reserved_ip_ranges"):
        value = getattr(inputs, name)
        if not _is_list(value) or not all(isinstance(a, str) for a in value):
            raise LaunchInputError(name, f"expected a list of strings, got {_show(value)}")
    if inputs.command and not inputs.container_image_uri:
        raise LaunchInputError(
            "command", "applies to custom containers only; set container_image_uri too"
        )
    if not isinstance(inputs.env, Mapping):
        raise LaunchInputError("env", f"expected a dict of name -> value, got {_show(inputs.env)}")
    for key in inputs.env:
        if not vertex.is_env_name(key):
            raise LaunchInputError(
                "env",
                f"{_show(key)} is not an environment variable name: letters, digits and '_', "
                "not starting with a digit",
            )
    if not isinstance(inputs.labels, Mapping):
        raise LaunchInputError(
            "labels", f"expected a dict of key -> value, got {_show(inputs.labels)}"
        )
    for key, value in inputs.labels.items():
        checked("labels", vertex.check_label, key, value)
    parse_duration("timeout", inputs.timeout, allow_zero=False)
    parse_duration("max_wait_duration", inputs.max_wait_duration)
    if not isinstance(inputs.psc_interface_config, Mapping):
        raise LaunchInputError(
            "psc_interface_config",
            f"expected a PscInterfaceConfig dict, got {_show(inputs.psc_interface_config)}",
        )
    if inputs.encryption_spec_key_name:
        key_region = checked(
            "encryption_spec_key_name",
            vertex.check_kms_key_name,
            inputs.encryption_spec_key_name,
        )
        if key_region != inputs.location:
            raise LaunchInputError(
                "encryption_spec_key_name",
                f"the key is in {key_region!r} but the job runs in {inputs.location!r}: Vertex AI "
                "needs a key in the job's own region",
            )
    for name in ("args", "command", "env", "labels", "worker_pool_specs", "psc_interface_config"):
        checked(name, vertex.check_nesting, getattr(inputs, name))
    for name in JobInputs.__dataclass_fields__:
        checked(name, vertex.check_text, getattr(inputs, name))
    for name in ("accelerator_count", "replica_count", "boot_disk_size_gb"):
        value = getattr(inputs, name)
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**31:
            raise LaunchInputError(name, f"expected a 32-bit integer, got {_show(value)}")
    if inputs.worker_pool_specs:
        if not _is_list(inputs.worker_pool_specs):
            raise LaunchInputError("worker_pool_specs", "expected a list of WorkerPoolSpec dicts")
        return  # pools are checked as they are parsed, then as part of the job
    if inputs.container_image_uri and inputs.package_uris:
        raise LaunchInputError(
            "container_image_uri",
            "set either container_image_uri (a custom container) or a package (a Python package "
            "on a prebuilt container), not both",
        )
    if not inputs.container_image_uri:
        if not inputs.package_uris:
            raise LaunchInputError(
                "package",
                "no training code: connect a package artifact (from prepare_package) or set "
                "container_image_uri",
            )
        if not inputs.python_module:
            raise LaunchInputError(
                "python_module",
                "is empty: set it to a dotted module name like 'trainer.task', or use a package "
                "artifact whose metadata has python_module",
            )
    if inputs.replica_count < 1:
        raise LaunchInputError(
            "replica_count",
            f"must be >= 1 (one chief, the rest workers), got {inputs.replica_count}",
        )
    if inputs.accelerator_type and inputs.accelerator_type not in _ACCELERATORS:
        raise LaunchInputError(
            "accelerator_type",
            f"unknown accelerator {_show(inputs.accelerator_type)}; valid: "
            + ", ".join(_ACCELERATORS),
        )


def _show(value: Any) -> str:
    return vertex.show(value)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def check_job(job: CustomJob, inputs: JobInputs, target: vertex.Target = vertex.VERTEX_AI) -> None:
    """The rules of ``target`` on ``job`` (:func:`kfp_spot.vertex.validate_for_submission`).

    An executor image the rules accept with a reservation (not in kfp-spot's table, past its end
    of availability) is announced on stderr, the task's console.

    Raises:
        LaunchInputError: naming the input that set the offending field, the rule, and the field.
    """
    try:
        vertex.validate_for_submission(job, target)
    except vertex.InvalidJobSpecError as exc:
        raise LaunchInputError(
            input_for_field(exc.field, inputs), f"{exc.message} (CustomJob field {exc.field})"
        ) from None
    if not inputs.container_image_uri:
        warn_executor_image(inputs.executor_image_uri)


def _code_spec(inputs: JobInputs, env: list[dict[str, str]]) -> dict[str, Any]:
    if inputs.container_image_uri:
        return {
            "container_spec": {
                "image_uri": inputs.container_image_uri,
                "command": list(inputs.command),
                "args": list(inputs.args),
                "env": env,
            }
        }
    return {
        "python_package_spec": {
            "executor_image_uri": inputs.executor_image_uri,
            "package_uris": list(inputs.package_uris),
            "python_module": inputs.python_module,
            "args": list(inputs.args),
            "env": env,
        }
    }


def _parse_pool(index: int, pool: Any) -> WorkerPoolSpec:
    if not isinstance(pool, Mapping):
        raise LaunchInputError(f"worker_pool_specs[{index}]", f"expected a dict, got {pool!r}")
    if not pool:
        return WorkerPoolSpec()  # an empty pool keeps the index of later pools (Vertex allows it)
    message = WorkerPoolSpec.pb(WorkerPoolSpec())
    try:
        json_format.ParseDict(dict(pool), message)
    except json_format.ParseError as exc:
        raise LaunchInputError(
            f"worker_pool_specs[{index}]",
            f"not a WorkerPoolSpec (camelCase or snake_case fields of the Vertex API): "
            f"{_one_line(exc)}",
        ) from exc
    return WorkerPoolSpec(message)


def _psc_interface_config(value: Mapping[str, Any]) -> PscInterfaceConfig:
    message = PscInterfaceConfig.pb(PscInterfaceConfig())
    try:
        json_format.ParseDict(dict(value), message)
    except json_format.ParseError as exc:
        raise LaunchInputError(
            "psc_interface_config",
            "not a PscInterfaceConfig (networkAttachment, dnsPeeringConfigs: [{domain, "
            f"targetProject, targetNetwork}}]; camelCase or snake_case): {_one_line(exc)}",
        ) from exc
    return PscInterfaceConfig(message)


def _pools(inputs: JobInputs, env: list[dict[str, str]]) -> list[WorkerPoolSpec]:
    if inputs.worker_pool_specs:
        pools = [_parse_pool(i, p) for i, p in enumerate(inputs.worker_pool_specs)]
        for i, pool in enumerate(pools):
            if not pool.replica_count and not pool.machine_spec.machine_type:
                continue
            has_code = "container_spec" in pool or "python_package_spec" in pool
            if not has_code:
                if not inputs.container_image_uri and not inputs.package_uris:
                    raise LaunchInputError(
                        f"worker_pool_specs[{i}]",
                        "has neither containerSpec nor pythonPackageSpec, and no package or "
                        "container_image_uri input to fill it from",
                    )
                if inputs.container_image_uri and inputs.package_uris:
                    raise LaunchInputError(
                        "container_image_uri",
                        "set either container_image_uri or a package, not both",
                    )
                code = _code_spec(inputs, env)
                key, value = next(iter(code.items()))
                setattr(pool, key, value)
            else:
                # Pools that bring their own code still see the launcher's environment.
                spec = pool.container_spec if "container_spec" in pool else pool.python_package_spec
                names = {e.name for e in spec.env}
                spec.env.extend(EnvVar(e) for e in env if e["name"] not in names)
        return pools
    machine_spec: dict[str, Any] = {"machine_type": inputs.machine_type}
    if inputs.accelerator_type:
        machine_spec["accelerator_type"] = inputs.accelerator_type
    if inputs.accelerator_type or inputs.accelerator_count:
        machine_spec["accelerator_count"] = inputs.accelerator_count  # a count alone is refused
    first = {
        "machine_spec": machine_spec,
        "replica_count": 1,
        "disk_spec": {
            "boot_disk_type": inputs.boot_disk_type,
            "boot_disk_size_gb": inputs.boot_disk_size_gb,
        },
        **_code_spec(inputs, env),
    }
    pools = [WorkerPoolSpec(first)]
    if inputs.replica_count > 1:
        rest = copy.deepcopy(first)
        rest["replica_count"] = inputs.replica_count - 1
        pools.append(WorkerPoolSpec(rest))
    return pools


def build_custom_job(
    inputs: JobInputs,
    *,
    strategy: Strategy = Strategy.SPOT,
    extra_env: Mapping[str, str] | None = None,
    target: vertex.Target = vertex.VERTEX_AI,
) -> CustomJob:
    """Build the CustomJob for ``inputs`` with ``jobSpec.scheduling.strategy = strategy``.

    Args:
        inputs: the launch inputs.
        strategy: SPOT, STANDARD or FLEX_START.
        extra_env: environment the launcher adds for every replica (user ``env`` wins on a clash).
        target: whose rules the job must pass (:data:`kfp_spot.vertex.VERTEX_AI`, or
            :data:`~kfp_spot.vertex.EMULATOR` for the local emulator).

    Returns:
        The CustomJob, ready for ``JobServiceClient.create_custom_job``.

    Raises:
        LaunchInputError: naming the first bad input; a rule of the service the built job breaks
            is reported against the input that set the field (:func:`input_for_field`).
    """
    check_inputs(inputs)
    strategy = parse_strategy("strategy", strategy)
    merged = {**(extra_env or {}), **{str(k): str(v) for k, v in inputs.env.items()}}
    env = [{"name": k, "value": v} for k, v in merged.items()]
    job_spec: dict[str, Any] = {
        "worker_pool_specs": _pools(inputs, env),
        "scheduling": {
            "timeout": _duration_json(parse_duration("timeout", inputs.timeout)),
            "restart_job_on_worker_restart": bool(inputs.restart_job_on_worker_restart),
            "disable_retries": bool(inputs.disable_retries),
            "strategy": strategy.value,
        },
    }
    if strategy is Strategy.FLEX_START:
        job_spec["scheduling"]["max_wait_duration"] = _duration_json(
            parse_duration("max_wait_duration", inputs.max_wait_duration)
        )
    if inputs.base_output_directory:
        job_spec["base_output_directory"] = {"output_uri_prefix": inputs.base_output_directory}
    if inputs.service_account:
        job_spec["service_account"] = inputs.service_account
    if inputs.network:
        job_spec["network"] = inputs.network
    # GCPC's inputs, as its launcher sends them: an empty value leaves the field out.
    if inputs.tensorboard:
        job_spec["tensorboard"] = inputs.tensorboard
    if inputs.enable_web_access:
        job_spec["enable_web_access"] = True
    if inputs.reserved_ip_ranges:
        job_spec["reserved_ip_ranges"] = list(inputs.reserved_ip_ranges)
    persistent_resource_id = pipeline_context.resolve(
        "persistent_resource_id", inputs.persistent_resource_id, emulator=False
    )
    if persistent_resource_id:
        job_spec["persistent_resource_id"] = persistent_resource_id
    if inputs.psc_interface_config:
        job_spec["psc_interface_config"] = _psc_interface_config(inputs.psc_interface_config)
    job = CustomJob(
        display_name=inputs.display_name,
        job_spec=job_spec,
        labels={str(k): str(v) for k, v in inputs.labels.items()},
    )
    if inputs.encryption_spec_key_name:
        job.encryption_spec.kms_key_name = inputs.encryption_spec_key_name
    vertex.to_service_uris(job)  # /gcs/B/P package URIs as gs://B/P (kfp_spot.vertex.storage)
    check_job(job, inputs, target)
    return job


def with_strategy(
    job: CustomJob, strategy: Strategy, max_wait_duration: str = DEFAULT_MAX_WAIT
) -> CustomJob:
    """A copy of ``job`` scheduled with ``strategy`` (as GCPC: max_wait only for FLEX_START)."""
    strategy = parse_strategy("strategy", strategy)
    out = CustomJob(job)  # a deep copy
    out.job_spec.scheduling.strategy = strategy.api
    if strategy is Strategy.FLEX_START:
        wait = duration_pb2.Duration()
        wait.FromJsonString(_duration_json(parse_duration("max_wait_duration", max_wait_duration)))
        out.job_spec.scheduling.max_wait_duration = wait
    else:
        del out.job_spec.scheduling.max_wait_duration
    return out


def output_dirs(base_output_directory: str) -> dict[str, str]:
    """Where Vertex tells the training code to write (AIP_* under the base output directory)."""
    return {
        "model": fs.join(base_output_directory, "model"),
        "checkpoints": fs.join(base_output_directory, "checkpoints"),
        "logs": fs.join(base_output_directory, "logs"),
    }
