"""Boot disk ranges and FLEX_START scheduling rules, as the launcher meets them."""

from __future__ import annotations

import pytest
from google.cloud.aiplatform_v1.types import CustomJob

from kfp_spot.vertex import InvalidJobSpecError, validate_custom_job


def job(pool_extra=None, scheduling=None, pools=1) -> CustomJob:
    pool = {
        "machine_spec": {"machine_type": "n1-standard-4"},
        "replica_count": 1,
        "python_package_spec": {
            "executor_image_uri": "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6",
            "package_uris": ["gs://bucket/trainer.tar.gz"],
            "python_module": "trainer.task",
        },
        **(pool_extra or {}),
    }
    spec = {"worker_pool_specs": [pool] * pools, "scheduling": scheduling or {"strategy": "SPOT"}}
    return CustomJob(display_name="x", job_spec=spec)


@pytest.mark.parametrize(
    ("kwargs", "field", "fragment"),
    [
        (
            {"pool_extra": {"disk_spec": {"boot_disk_size_gb": -1}}},
            "jobSpec.workerPoolSpecs[0].diskSpec.bootDiskSizeGb",
            "[100, 64000]",
        ),
        (
            {"pool_extra": {"disk_spec": {"boot_disk_type": "ssd"}}},
            "jobSpec.workerPoolSpecs[0].diskSpec.bootDiskType",
            "pd-ssd, pd-standard, hyperdisk-balanced",
        ),
        (
            {"scheduling": {"strategy": "SPOT", "max_wait_duration": {"seconds": 60}}},
            "jobSpec.scheduling.maxWaitDuration",
            "only with strategy FLEX_START",
        ),
        (
            {"scheduling": {"max_wait_duration": {"seconds": 60}}},
            "jobSpec.scheduling.maxWaitDuration",
            "STRATEGY_UNSPECIFIED",
        ),
        (
            {"scheduling": {"strategy": "FLEX_START", "timeout": {"seconds": 8 * 86400}}},
            "jobSpec.scheduling.timeout",
            "at most 7 days",
        ),
    ],
)
def test_vertex_refuses(kwargs, field, fragment):
    with pytest.raises(InvalidJobSpecError) as caught:
        validate_custom_job(job(**kwargs))
    assert caught.value.field == field and fragment in caught.value.message


def test_flex_start_needs_one_machine_configuration_in_every_pool():
    flex = job(scheduling={"strategy": "FLEX_START", "max_wait_duration": {"seconds": 0}}, pools=2)
    validate_custom_job(flex)  # same machine: fine, and maxWaitDuration 0 is allowed
    flex.job_spec.worker_pool_specs[1].machine_spec.machine_type = "n1-standard-8"
    with pytest.raises(InvalidJobSpecError, match="same machine") as caught:
        validate_custom_job(flex)
    assert caught.value.field == "jobSpec.workerPoolSpecs[1].machineSpec"


@pytest.mark.parametrize("size", [0, 100, 64000])
def test_boot_disk_sizes_vertex_accepts(size):
    validate_custom_job(job(pool_extra={"disk_spec": {"boot_disk_size_gb": size}}))
