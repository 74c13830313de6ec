"""validate_custom_job (the emulator, on create) and validate_for_submission (the launcher)."""

from __future__ import annotations

import pytest
from google.cloud.aiplatform_v1.types import (
    AcceleratorType,
    ContainerSpec,
    CustomJob,
    CustomJobSpec,
    DiskSpec,
    EnvVar,
    MachineSpec,
    PythonPackageSpec,
    Scheduling,
    WorkerPoolSpec,
)

from kfp_spot import machines
from kfp_spot.vertex import (
    InvalidJobSpecError,
    validate_custom_job,
    validate_for_submission,
)


def job(machine=None, strategy=Scheduling.Strategy.SPOT, pools=None, **kwargs):
    pool = WorkerPoolSpec(
        machine_spec=machine or MachineSpec(machine_type="n1-standard-4"),
        replica_count=1,
        python_package_spec=PythonPackageSpec(
            executor_image_uri="us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest",
            package_uris=["gs://bucket/trainer-0.1.tar.gz"],
            python_module="trainer.task",
        ),
    )
    return CustomJob(
        display_name=kwargs.get("display_name", "train"),
        job_spec=CustomJobSpec(
            worker_pool_specs=pools if pools is not None else [pool],
            scheduling=Scheduling(strategy=strategy),
        ),
    )


@pytest.mark.parametrize(
    "machine",
    [
        MachineSpec(machine_type="n1-standard-4"),
        MachineSpec(
            machine_type="n1-standard-8",
            accelerator_type=AcceleratorType.NVIDIA_TESLA_T4,
            accelerator_count=2,
        ),
        MachineSpec(machine_type="a2-highgpu-1g"),  # built-in GPU implied
        MachineSpec(
            machine_type="g2-standard-24",
            accelerator_type=AcceleratorType.NVIDIA_L4,
            accelerator_count=2,
        ),
        MachineSpec(
            machine_type="ct5lp-hightpu-4t",
            accelerator_type=AcceleratorType.TPU_V5_LITEPOD,
            accelerator_count=4,
            tpu_topology="2x2",  # one host: not a Pod, Spot is fine
        ),
    ],
    ids=lambda m: m.machine_type,
)
def test_valid_spot_jobs_pass(machine):
    validate_custom_job(job(machine))
    validate_custom_job(CustomJob.pb(job(machine)))  # the raw protobuf works too


def test_tpu_pods_are_fine_on_demand_but_not_on_spot():
    pod = MachineSpec(
        machine_type="ct5lp-hightpu-4t",
        accelerator_type=AcceleratorType.TPU_V5_LITEPOD,
        accelerator_count=4,
        tpu_topology="4x4",
    )
    validate_custom_job(job(pod, strategy=Scheduling.Strategy.ON_DEMAND))
    with pytest.raises(InvalidJobSpecError) as info:
        validate_custom_job(job(pod))
    assert info.value.field == "jobSpec.workerPoolSpecs[0].machineSpec"
    assert "Spot VMs cannot be used with TPU Pods" in str(info.value)


def test_error_carries_field_and_message():
    with pytest.raises(InvalidJobSpecError) as info:
        validate_custom_job(job(display_name=""))
    assert info.value.field == "displayName"
    assert str(info.value) == f"displayName: {info.value.message}"
    assert isinstance(info.value, ValueError)


def test_empty_placeholder_pools_are_allowed():
    spec = job()
    spec.job_spec.worker_pool_specs.append(WorkerPoolSpec())
    validate_custom_job(spec)


def test_machine_table_prices():
    table = machines.machine_types()
    assert len(table) > 50
    for machine in table.values():
        assert machine.spot_usd_per_hour <= machine.on_demand_usd_per_hour
        assert machine.vcpus > 0 and machine.memory_gb > 0
    assert machines.hourly_price("n1-standard-4", spot=False) == pytest.approx(0.2185)
    with_gpus = machines.hourly_price("n1-standard-4", "NVIDIA_TESLA_T4", 2, spot=True)
    assert with_gpus == pytest.approx(0.0459 + 2 * 0.1248)
    # built-in GPUs are in the machine price, not added again
    assert machines.hourly_price("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1, spot=False) == (
        machines.machine_type("a2-highgpu-1g").on_demand_usd_per_hour
    )
    with pytest.raises(ValueError, match="n9-huge"):
        machines.hourly_price("n9-huge", spot=True)


@pytest.mark.parametrize(
    ("disk", "field", "needle"),
    [
        (DiskSpec(boot_disk_size_gb=-1), "bootDiskSizeGb", "[100, 64000]"),
        (DiskSpec(boot_disk_size_gb=70000), "bootDiskSizeGb", "[100, 64000]"),
        (DiskSpec(boot_disk_type="floppy"), "bootDiskType", "pd-ssd, pd-standard"),
        (DiskSpec(boot_disk_type="pd-ssd\n"), "bootDiskType", "pd-ssd, pd-standard"),
    ],
)
def test_disk_specs_are_checked(disk, field, needle):
    spec = job()
    spec.job_spec.worker_pool_specs[0].disk_spec = disk
    with pytest.raises(InvalidJobSpecError) as info:
        validate_custom_job(spec)
    assert info.value.field == f"jobSpec.workerPoolSpecs[0].diskSpec.{field}"
    assert needle in info.value.message


def test_unset_disk_fields_take_the_services_defaults():
    spec = job()
    spec.job_spec.worker_pool_specs[0].disk_spec = DiskSpec()
    validate_custom_job(spec)
    spec.job_spec.worker_pool_specs[0].disk_spec = DiskSpec(
        boot_disk_type="hyperdisk-balanced", boot_disk_size_gb=200
    )
    validate_custom_job(spec)


def test_an_unknown_machine_type_is_the_services_call_before_submission(caplog):
    newer = job(MachineSpec(machine_type="a4-highgpu-8g"))
    with pytest.raises(InvalidJobSpecError) as info:
        validate_custom_job(newer)  # the emulator knows only its table
    assert info.value.field == "jobSpec.workerPoolSpecs[0].machineSpec.machineType"
    validate_for_submission(newer)  # the launcher, on every backend: a warning
    assert "'a4-highgpu-8g' is not in kfp-spot's machine table" in caplog.text


@pytest.mark.parametrize(
    ("machine", "field", "needle"),
    [
        (
            MachineSpec(machine_type="a4-highgpu-8g", accelerator_count=8),
            "acceleratorType",
            "set the accelerator type",
        ),
        (
            MachineSpec(machine_type="", accelerator_type=AcceleratorType.NVIDIA_TESLA_T4),
            "acceleratorCount",
            "at least 1",
        ),
        (MachineSpec(machine_type=""), "machineType", "is required"),
    ],
)
def test_rules_that_need_no_machine_facts_still_hold_for_unknown_types(machine, field, needle):
    spec = job()
    spec.job_spec.worker_pool_specs[0].machine_spec = machine
    with pytest.raises(InvalidJobSpecError) as info:
        validate_for_submission(spec)
    assert info.value.field == f"jobSpec.workerPoolSpecs[0].machineSpec.{field}"
    assert needle in info.value.message


def test_a_tpu_pod_on_spot_is_refused_whatever_the_machine():
    pod = MachineSpec(
        machine_type="tpu-v9-future",
        accelerator_type=AcceleratorType.TPU_V4_POD,
        accelerator_count=32,
    )
    with pytest.raises(InvalidJobSpecError, match="Spot VMs cannot be used with TPU Pods"):
        validate_for_submission(job(pod))
    validate_for_submission(job(pod, strategy=Scheduling.Strategy.STANDARD))


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda j: setattr(j, "labels", {"team": "ml\n"}), "labels.team"),
        (
            lambda j: setattr(
                j.job_spec.worker_pool_specs[0].python_package_spec, "python_module", "a.b\n"
            ),
            "jobSpec.workerPoolSpecs[0].pythonPackageSpec.pythonModule",
        ),
        (
            lambda j: j.job_spec.worker_pool_specs[0].python_package_spec.env.append(
                EnvVar(name="SEED\n", value="1")
            ),
            "jobSpec.workerPoolSpecs[0].pythonPackageSpec.env[0].name",
        ),
    ],
)
def test_names_with_a_trailing_newline_are_refused(mutate, field):
    spec = job()
    mutate(spec)
    with pytest.raises(InvalidJobSpecError) as info:
        validate_custom_job(spec)
    assert info.value.field == field


def test_international_lowercase_labels_pass_as_on_vertex_and_uppercase_ones_do_not():
    """Vertex AI: "International characters are allowed"; labels are still lowercase."""
    spec = job()
    spec.labels = {"équipe": "données", "学習": "機械学習"}
    validate_custom_job(spec)
    validate_for_submission(spec)
    spec.labels = {"équipe": "DONNÉES"}
    with pytest.raises(InvalidJobSpecError) as info:
        validate_custom_job(spec)
    assert info.value.field == "labels.équipe"


def container_job(image: str):
    """A one-pool job running ``image`` (a custom container)."""
    return job(
        pools=[
            WorkerPoolSpec(
                machine_spec=MachineSpec(machine_type="n1-standard-4"),
                replica_count=1,
                container_spec=ContainerSpec(image_uri=image),
            )
        ]
    )


@pytest.mark.parametrize(
    "image", ["not an image", "gcr.io/My-Project/Trainer:1", "us-docker.pkg.dev/p/r/img:", "IMG"]
)
def test_an_image_no_registry_could_serve_is_refused_on_create(image):
    """A malformed reference cannot be pulled: refused before any VM starts, naming the field."""
    spec = container_job(image)
    for validate in (validate_custom_job, validate_for_submission):
        with pytest.raises(InvalidJobSpecError) as info:
            validate(spec)
        assert info.value.field == "jobSpec.workerPoolSpecs[0].containerSpec.imageUri"
        assert "is not a container image reference" in info.value.message


@pytest.mark.parametrize(
    "image",
    ["us-central1-kfp.pkg.dev/p-1/templates/trainer:1", "europe-west4-python.pkg.dev/p-1/r/t"],
)
def test_an_image_on_an_artifact_registry_host_of_another_format_is_refused_on_create(image):
    """A template or Python repository's host serves no images: the VM's pull would fail."""
    server = image.split("/")[0]
    for validate in (validate_custom_job, validate_for_submission):
        with pytest.raises(InvalidJobSpecError) as info:
            validate(container_job(image))
        assert info.value.field == "jobSpec.workerPoolSpecs[0].containerSpec.imageUri"
        assert info.value.message == (
            f"{image!r}: {server} serves no container images: Artifact Registry serves them "
            "from LOCATION-docker.pkg.dev/PROJECT/REPO/IMAGE:TAG"
        )


@pytest.mark.parametrize(
    "image",
    [
        "python:3.11",
        "us-docker.pkg.dev/p/r/trainer:1",
        "us-central1-docker.pkg.dev/p/r/trainer:1",
        "localhost:5000/a/b@sha256:" + "a" * 64,
    ],
)
def test_image_references_of_any_registry_pass(image):
    spec = container_job(image)
    validate_custom_job(spec)


@pytest.mark.parametrize(
    "name", ["N1-STANDARD-4", "n1 standard 4", "n1-standard-4 ", "n1_standard_4"]
)
def test_a_machine_type_of_no_possible_form_is_refused_before_submission(name):
    """An unknown lowercase name is the service's call; one no machine type has is not."""
    with pytest.raises(InvalidJobSpecError) as info:
        validate_for_submission(job(MachineSpec(machine_type=name)))
    assert info.value.field == "jobSpec.workerPoolSpecs[0].machineSpec.machineType"
    assert "is not a known machine type" in info.value.message


# Fields the service judges that the checks had let through (audit3): each refused with its field.

_KEY_EU = "projects/my-project/locations/europe-west4/keyRings/r/cryptoKeys/k"
_RESERVATION = "projects/my-project/zones/us-central1-a/reservations/my-reservation"
_EXPERIMENT = "projects/my-project/locations/us-central1/metadataStores/default/contexts/exp"


def _with(edit):
    pb = CustomJob.pb(job())
    edit(pb)
    return pb


def _pool_machine(pb):
    return pb.job_spec.worker_pool_specs[0].machine_spec


def _set_reservation(affinity_type, key="", values=()):
    def edit(pb):
        affinity = _pool_machine(pb).reservation_affinity
        affinity.reservation_affinity_type = affinity_type
        affinity.key = key
        affinity.values.extend(values)

    return edit


def _nfs(path="/share", network=""):
    def edit(pb):
        pb.job_spec.network = network
        pb.job_spec.worker_pool_specs[0].nfs_mounts.add(
            server="10.0.0.1", path=path, mount_point="data"
        )

    return edit


def _k80(pb):
    machine = _pool_machine(pb)
    machine.accelerator_type = AcceleratorType.NVIDIA_TESLA_K80
    machine.accelerator_count = 1


_NAME_KEY = "compute.googleapis.com/reservation-name"


def _python_spec(pb):
    return pb.job_spec.worker_pool_specs[0].python_package_spec


def _container(**fields):
    def edit(pb):
        pool = pb.job_spec.worker_pool_specs[0]
        pool.ClearField("python_package_spec")
        pool.container_spec.image_uri = "us-docker.pkg.dev/p/r/i:1"
        for name, values in fields.items():
            getattr(pool.container_spec, name).extend(values)

    return edit


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (_k80, "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType", "end of support"),
        (_set_reservation(3), "jobSpec.workerPoolSpecs[0].machineSpec.reservationAffinity", "key"),
        (
            _set_reservation(3, _NAME_KEY, ["my-reservation"]),
            "jobSpec.workerPoolSpecs[0].machineSpec.reservationAffinity.values[0]",
            "full resource name",
        ),
        (
            _set_reservation(0),
            "jobSpec.workerPoolSpecs[0].machineSpec.reservationAffinity.reservationAffinityType",
            "required",
        ),
        (
            lambda pb: setattr(pb.job_spec, "protected_artifact_location_id", "not-a-region"),
            "jobSpec.protectedArtifactLocationId",
            "not a Vertex AI region",
        ),
        (
            lambda pb: setattr(pb.job_spec, "experiment", "nope"),
            "jobSpec.experiment",
            "metadataStores",
        ),
        (_nfs(), "jobSpec.network", "NFS"),
        (
            lambda pb: setattr(_pool_machine(pb), "gpu_partition_size", "1g.5gb"),
            "jobSpec.workerPoolSpecs[0].machineSpec.gpuPartitionSize",
            "no GPU partitions",
        ),
        (
            _nfs(path="share", network="projects/123/global/networks/vpc"),
            "jobSpec.workerPoolSpecs[0].nfsMounts[0].path",
            "'/'",
        ),
        # No process can be given a NUL: the emulator's replica start raised ("internal error in
        # the emulator"), a VM's container runtime fails; refused before a VM is paid for.
        (
            lambda pb: _python_spec(pb).args.extend(["--a", "x\x00y"]),
            "jobSpec.workerPoolSpecs[0].pythonPackageSpec.args[1]",
            "holds a NUL character",
        ),
        (
            lambda pb: _python_spec(pb).env.add(name="A", value="\x00"),
            "jobSpec.workerPoolSpecs[0].pythonPackageSpec.env[0].value",
            "holds a NUL character",
        ),
        (
            _container(command=["python", "-c\x00"]),
            "jobSpec.workerPoolSpecs[0].containerSpec.command[1]",
            "holds a NUL character",
        ),
        (
            _container(args=["\x00"]),
            "jobSpec.workerPoolSpecs[0].containerSpec.args[0]",
            "holds a NUL character",
        ),
    ],
)
@pytest.mark.parametrize("check", [validate_custom_job, validate_for_submission])
def test_fields_vertex_refuses_are_refused(edit, field, words, check):
    with pytest.raises(InvalidJobSpecError) as info:
        check(_with(edit))
    assert info.value.field == field
    assert words in info.value.message


@pytest.mark.parametrize(
    "edit",
    [
        _set_reservation(3, _NAME_KEY, [_RESERVATION]),
        _set_reservation(2),
        lambda pb: setattr(pb.job_spec, "protected_artifact_location_id", "europe-west4"),
        _nfs(network="projects/123/global/networks/vpc"),
        lambda pb: (
            _pool_machine(pb).__setattr__("machine_type", "a2-highgpu-1g"),
            _pool_machine(pb).__setattr__("gpu_partition_size", "1g.5gb"),
        ),
    ],
)
def test_well_formed_fields_pass(edit):
    validate_custom_job(_with(edit))
    validate_for_submission(_with(edit))


def test_an_experiment_is_refused_by_the_emulator_only():
    def edit(pb):
        pb.job_spec.experiment = _EXPERIMENT

    validate_for_submission(_with(edit))
    with pytest.raises(InvalidJobSpecError) as info:
        validate_custom_job(_with(edit))
    assert info.value.field == "jobSpec.experiment" and "not found" in info.value.message


def test_a_cmek_key_must_be_in_the_jobs_region():
    def edit(pb):
        pb.encryption_spec.kms_key_name = _KEY_EU

    validate_custom_job(_with(edit))  # no region given: form only
    validate_custom_job(_with(edit), location="europe-west4")
    for check in (validate_custom_job, validate_for_submission):
        with pytest.raises(InvalidJobSpecError) as info:
            check(_with(edit), location="us-central1")
        assert info.value.field == "encryptionSpec.kmsKeyName"
        assert "'europe-west4'" in info.value.message and "'us-central1'" in info.value.message


def test_the_emulator_refuses_a_cmek_key_of_another_region(emulator, make_job, api):
    body = make_job()
    body["encryptionSpec"] = {"kmsKeyName": _KEY_EU}
    status, answer = api(
        "POST", f"{emulator.endpoint}/v1/projects/p-123456/locations/us-central1/customJobs", body
    )
    assert status == 400, answer
    assert "kms_key_name" in answer["error"]["message"]
