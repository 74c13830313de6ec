"""Which launch_spot_job input set each field of the CustomJob the launcher builds.

When the built job breaks one of Vertex's rules (:mod:`kfp_spot.validation` names the field,
``jobSpec.workerPoolSpecs[0].machineSpec.machineType``), the launcher's error names the input the
user can change (``machine_type``), or the path inside ``worker_pool_specs`` when the user gave
full pools.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kfp_spot.jobs.spec import JobInputs

# Which input sets each field of a job built from the machine inputs (paths relative to
# jobSpec.workerPoolSpecs[i], indices dropped; the longest matching prefix wins).
POOL_FIELD_INPUTS = {
    "": "machine_type",
    "replicaCount": "replica_count",
    "machineSpec": "machine_type",
    "machineSpec.machineType": "machine_type",
    "machineSpec.acceleratorType": "accelerator_type",
    "machineSpec.acceleratorCount": "accelerator_count",
    "machineSpec.tpuTopology": "machine_type",
    "diskSpec": "boot_disk_type",
    "diskSpec.bootDiskType": "boot_disk_type",
    "diskSpec.bootDiskSizeGb": "boot_disk_size_gb",
    "containerSpec": "container_image_uri",
    "containerSpec.imageUri": "container_image_uri",
    "containerSpec.command": "command",
    "containerSpec.args": "args",
    "containerSpec.env": "env",
    "pythonPackageSpec": "package",
    "pythonPackageSpec.executorImageUri": "executor_image_uri",
    "pythonPackageSpec.packageUris": "package",
    "pythonPackageSpec.pythonModule": "python_module",
    "pythonPackageSpec.args": "args",
    "pythonPackageSpec.env": "env",
}
# Fields outside the worker pools.
JOB_FIELD_INPUTS = {
    "displayName": "display_name",
    "labels": "labels",
    "jobSpec.workerPoolSpecs": "replica_count",
    "jobSpec.scheduling.timeout": "timeout",
    "jobSpec.scheduling.maxWaitDuration": "max_wait_duration",
    "jobSpec.scheduling": "timeout",
    "jobSpec.baseOutputDirectory": "base_output_directory",
    "jobSpec.serviceAccount": "service_account",
    "jobSpec.network": "network",
    "jobSpec.tensorboard": "tensorboard",
    "jobSpec.enableWebAccess": "enable_web_access",
    "jobSpec.reservedIpRanges": "reserved_ip_ranges",
    "jobSpec.persistentResourceId": "persistent_resource_id",
    "jobSpec.pscInterfaceConfig": "psc_interface_config",
    "encryptionSpec": "encryption_spec_key_name",
}
_POOL_PATH = re.compile(r"jobSpec\.workerPoolSpecs\[(\d+)\]\.?(.*)")
_INDEX = re.compile(r"\[\d+\]")
_CODE_FIELDS = ("containerSpec", "pythonPackageSpec")


def _longest_prefix(path: str, table: Mapping[str, str]) -> str | None:
    parts = path.split(".") if path else []
    for n in range(len(parts), -1, -1):
        hit = table.get(".".join(parts[:n]))
        if hit is not None:
            return hit
    return None


def _has_own_code(pool: Any) -> bool:
    return isinstance(pool, Mapping) and any(
        key in pool for key in (*_CODE_FIELDS, "container_spec", "python_package_spec")
    )


def input_for_field(field_path: str, inputs: JobInputs) -> str:
    """The launch_spot_job input that set ``field_path`` of the CustomJob built from ``inputs``.

    ``jobSpec.workerPoolSpecs[0].machineSpec.machineType`` is ``machine_type``; when the user gave
    full pools it is ``worker_pool_specs[0].machineSpec.machineType``, except for the code of a
    pool the launcher filled in from the ``package`` or ``container_image_uri`` inputs. A field no
    input sets is returned as it is.
    """
    match = _POOL_PATH.fullmatch(field_path)
    if match is None:
        if inputs.worker_pool_specs and field_path.startswith("jobSpec.workerPoolSpecs"):
            return "worker_pool_specs"
        return _longest_prefix(_INDEX.sub("", field_path), JOB_FIELD_INPUTS) or field_path
    index, rest = int(match.group(1)), match.group(2)
    relative = _INDEX.sub("", rest)
    if inputs.worker_pool_specs:
        pools = list(inputs.worker_pool_specs)
        filled = relative.startswith(_CODE_FIELDS) and not (
            index < len(pools) and _has_own_code(pools[index])
        )
        if not filled:
            return f"worker_pool_specs[{index}]" + (f".{rest}" if rest else "")
    return _longest_prefix(relative, POOL_FIELD_INPUTS) or field_path
