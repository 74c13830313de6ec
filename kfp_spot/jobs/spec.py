"""Build the CustomJob the launcher submits, from the component's inputs.

The result is a ``google.cloud.aiplatform_v1.types.CustomJob``: the same message the GAPIC client
sends to Vertex AI and to the local emulator. The layout follows GCPC's
``create_custom_training_job_from_component`` (one pool with one replica, a second pool with the
other ``replica_count - 1`` replicas; ``max_wait_duration`` only for FLEX_START), so a job built
here and one built by GCPC for the same inputs agree field for field.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.cloud.aiplatform_v1.types import CustomJob, WorkerPoolSpec
from google.cloud.aiplatform_v1.types import accelerator_type as gca_accelerator_type
from google.cloud.aiplatform_v1.types import custom_job as gca_custom_job
from google.protobuf import json_format

from kfp_spot import fs

# The strategies a launcher may submit with (the API also knows ON_DEMAND and LOW_COST, which are
# deprecated aliases of STANDARD and SPOT).
STRATEGIES = ("SPOT", "STANDARD", "FLEX_START")
FALLBACK_STRATEGIES = ("STANDARD", "FLEX_START")

# Vertex's documented limit on packageUris of one pythonPackageSpec.
MAX_PACKAGE_URIS = 100
DEFAULT_EXECUTOR_IMAGE = "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest"
DEFAULT_TIMEOUT = "604800s"  # GCPC's default: 7 days
DEFAULT_MAX_WAIT = "86400s"  # GCPC's default for FLEX_START: 24 hours

# The environment variable that tells training code where a previous run's checkpoint is.
RESUME_ENV = "KFP_SPOT_RESUME_FROM"

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d{1,9})?)\s*(s|m|h|d)?\s*$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
_LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class LaunchInputError(ValueError):
    """An input of launch_spot_job is invalid; names the input and what would be valid."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"launch_spot_job input {field_name!r}: {message}")
        self.field = field_name
        self.reason = message


@dataclass
class JobInputs:
    """The launch inputs that shape the CustomJob (everything but the recovery policy)."""

    project: str
    location: str = "us-central1"
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


def parse_duration(name: str, value: str | float | int) -> float:
    """Seconds in a duration input: ``"3600s"``, ``"90m"``, ``"2h"``, ``"1d"`` or a number.

    Raises:
        LaunchInputError: naming ``name`` when the value is not a non-negative duration.
    """
    if isinstance(value, bool):
        raise LaunchInputError(name, f"expected a duration like '3600s', got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION_RE.match(str(value))
        if not match:
            raise LaunchInputError(
                name, f"expected a duration like '3600s', '90m', '2h' or '1d', got {value!r}"
            )
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if seconds < 0:
        raise LaunchInputError(name, f"must not be negative, got {value!r}")
    return seconds


def _duration_json(seconds: float) -> str:
    text = f"{seconds:.9f}".rstrip("0").rstrip(".")
    return f"{text}s"


def _check_accelerator(accelerator_type: str, accelerator_count: int, where: str) -> None:
    known = [
        n
        for n in gca_accelerator_type.AcceleratorType.__members__
        if n != "ACCELERATOR_TYPE_UNSPECIFIED"
    ]
    if accelerator_type and accelerator_type not in known:
        raise LaunchInputError(
            f"{where}accelerator_type",
            f"unknown accelerator {accelerator_type!r}; valid: {', '.join(known)}",
        )
    if accelerator_count < 0:
        raise LaunchInputError(f"{where}accelerator_count", "must be >= 0")
    if accelerator_type and accelerator_count == 0:
        raise LaunchInputError(
            f"{where}accelerator_count", f"must be >= 1 when accelerator_type is {accelerator_type}"
        )
    if accelerator_count and not accelerator_type:
        raise LaunchInputError(f"{where}accelerator_type", "must be set when accelerator_count > 0")


def check_inputs(inputs: JobInputs) -> None:
    """Check the inputs a CustomJob is built from; errors name the input and what would be valid.

    These are the launcher's own checks of its inputs; the service's rules on the built job are
    checked by :func:`kfp_spot.validation.validate_custom_job`.

    Raises:
        LaunchInputError: on the first bad input.
    """
    if not inputs.project or "/" in inputs.project:
        raise LaunchInputError(
            "project", f"expected a project ID like 'my-project', got {inputs.project!r}"
        )
    if not inputs.location or not re.match(r"^[a-z]+(-[a-z0-9]+)+$", inputs.location):
        raise LaunchInputError(
            "location", f"expected a region like 'us-central1', got {inputs.location!r}"
        )
    if not inputs.display_name or len(inputs.display_name) > 128:
        raise LaunchInputError("display_name", "must be 1 to 128 characters")
    if not isinstance(inputs.args, Sequence) or isinstance(inputs.args, (str, bytes)):
        raise LaunchInputError("args", f"expected a list of strings, got {inputs.args!r}")
    if not isinstance(inputs.command, Sequence) or isinstance(inputs.command, (str, bytes)):
        raise LaunchInputError("command", f"expected a list of strings, got {inputs.command!r}")
    if inputs.command and not inputs.container_image_uri:
        raise LaunchInputError(
            "command", "applies to custom containers only; set container_image_uri too"
        )
    if not isinstance(inputs.env, Mapping):
        raise LaunchInputError("env", f"expected a dict of name -> value, got {inputs.env!r}")
    for key in inputs.env:
        if not isinstance(key, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise LaunchInputError("env", f"{key!r} is not a valid environment variable name")
    if not isinstance(inputs.labels, Mapping):
        raise LaunchInputError("labels", f"expected a dict of key -> value, got {inputs.labels!r}")
    for key, value in inputs.labels.items():
        if not _LABEL_KEY_RE.match(str(key)) or not _LABEL_VALUE_RE.match(str(value)):
            raise LaunchInputError(
                "labels",
                f"{key!r}: {value!r} is not a valid label (keys: a lowercase letter, then "
                "up to 62 of [a-z0-9_-]; values: up to 63 of [a-z0-9_-])",
            )
    parse_duration("timeout", inputs.timeout)
    parse_duration("max_wait_duration", inputs.max_wait_duration)
    if inputs.base_output_directory and not (
        inputs.base_output_directory.startswith("gs://")
        or fs.to_local_path(inputs.base_output_directory) is not None
    ):
        raise LaunchInputError(
            "base_output_directory",
            f"expected a gs:// URI or a local path, got {inputs.base_output_directory!r}",
        )
    if inputs.worker_pool_specs:
        if not isinstance(inputs.worker_pool_specs, Sequence) or isinstance(
            inputs.worker_pool_specs, (str, bytes)
        ):
            raise LaunchInputError("worker_pool_specs", "expected a list of WorkerPoolSpec dicts")
        return  # pools are checked as they are parsed
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
        if len(inputs.package_uris) > MAX_PACKAGE_URIS:
            raise LaunchInputError(
                "package",
                f"{len(inputs.package_uris)} package URIs; Vertex takes at most {MAX_PACKAGE_URIS}",
            )
        if not _MODULE_RE.match(inputs.python_module or ""):
            raise LaunchInputError(
                "python_module",
                f"expected a dotted module name like 'trainer.task', got {inputs.python_module!r} "
                "(set it, or use a package artifact whose metadata has python_module)",
            )
        if not inputs.executor_image_uri:
            raise LaunchInputError("executor_image_uri", "a prebuilt training image is required")
    if not inputs.machine_type:
        raise LaunchInputError("machine_type", "expected a machine type like 'n1-standard-4'")
    if inputs.replica_count < 1:
        raise LaunchInputError("replica_count", f"must be >= 1, got {inputs.replica_count}")
    _check_accelerator(inputs.accelerator_type, inputs.accelerator_count, "")
    if inputs.boot_disk_type not in ("pd-ssd", "pd-standard", "hyperdisk-balanced"):
        raise LaunchInputError(
            "boot_disk_type",
            f"expected pd-ssd, pd-standard or hyperdisk-balanced, got {inputs.boot_disk_type!r}",
        )
    if not 10 <= inputs.boot_disk_size_gb <= 65536:
        raise LaunchInputError(
            "boot_disk_size_gb", f"expected 10 to 65536 (GB), got {inputs.boot_disk_size_gb}"
        )


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
            f"not a WorkerPoolSpec (camelCase or snake_case fields of the Vertex API): {exc}",
        ) from exc
    return WorkerPoolSpec.wrap(message)


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
                spec.env.extend(gca_custom_job.EnvVar(e) for e in env if e["name"] not in names)
        return pools
    machine_spec: dict[str, Any] = {"machine_type": inputs.machine_type}
    if inputs.accelerator_type:
        machine_spec["accelerator_type"] = inputs.accelerator_type
        machine_spec["accelerator_count"] = inputs.accelerator_count
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
    inputs: JobInputs, *, strategy: str = "SPOT", extra_env: Mapping[str, str] | None = None
) -> CustomJob:
    """Build the CustomJob for ``inputs`` with ``jobSpec.scheduling.strategy = strategy``.

    Args:
        inputs: the launch inputs.
        strategy: SPOT, STANDARD or FLEX_START.
        extra_env: environment the launcher adds for every replica (user ``env`` wins on a clash).

    Returns:
        The CustomJob, ready for ``JobServiceClient.create_custom_job``.

    Raises:
        LaunchInputError: naming the first bad input.
    """
    check_inputs(inputs)
    if strategy not in STRATEGIES:
        raise LaunchInputError(
            "strategy", f"expected one of {', '.join(STRATEGIES)}, got {strategy!r}"
        )
    merged = {**(extra_env or {}), **{str(k): str(v) for k, v in inputs.env.items()}}
    env = [{"name": k, "value": v} for k, v in merged.items()]
    job_spec: dict[str, Any] = {
        "worker_pool_specs": _pools(inputs, env),
        "scheduling": {
            "timeout": _duration_json(parse_duration("timeout", inputs.timeout)),
            "restart_job_on_worker_restart": bool(inputs.restart_job_on_worker_restart),
            "disable_retries": bool(inputs.disable_retries),
            "strategy": strategy,
        },
    }
    if strategy == "FLEX_START":
        job_spec["scheduling"]["max_wait_duration"] = _duration_json(
            parse_duration("max_wait_duration", inputs.max_wait_duration)
        )
    if inputs.base_output_directory:
        job_spec["base_output_directory"] = {"output_uri_prefix": inputs.base_output_directory}
    if inputs.service_account:
        job_spec["service_account"] = inputs.service_account
    if inputs.network:
        job_spec["network"] = inputs.network
    return CustomJob(
        display_name=inputs.display_name,
        job_spec=job_spec,
        labels={str(k): str(v) for k, v in inputs.labels.items()},
    )


def with_strategy(
    job: CustomJob, strategy: str, max_wait_duration: str = DEFAULT_MAX_WAIT
) -> CustomJob:
    """A copy of ``job`` scheduled with ``strategy`` (as GCPC: max_wait only for FLEX_START)."""
    if strategy not in STRATEGIES:
        raise LaunchInputError(
            "strategy", f"expected one of {', '.join(STRATEGIES)}, got {strategy!r}"
        )
    out = CustomJob.deserialize(CustomJob.serialize(job))
    out.job_spec.scheduling.strategy = strategy
    if strategy == "FLEX_START":
        out.job_spec.scheduling.max_wait_duration = _duration_json(
            parse_duration("max_wait_duration", max_wait_duration)
        )
    else:
        out.job_spec.scheduling.max_wait_duration = None
    return out


def strategy_name(job: CustomJob) -> str:
    """The scheduling strategy of ``job`` as its enum name (``SPOT``, ``STANDARD``, ...)."""
    return gca_custom_job.Scheduling.Strategy(job.job_spec.scheduling.strategy).name


def output_dirs(base_output_directory: str) -> dict[str, str]:
    """Where Vertex tells the training code to write (AIP_* under the base output directory)."""
    return {
        "model": fs.join(base_output_directory, "model"),
        "checkpoints": fs.join(base_output_directory, "checkpoints"),
        "logs": fs.join(base_output_directory, "logs"),
    }
