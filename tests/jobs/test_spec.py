from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfp_spot.jobs.inputs import JobInputs, LaunchInputError, parse_duration
from kfp_spot.jobs.spec import RESUME_ENV, build_custom_job, with_strategy
from kfp_spot.jobs.strategy import strategy_name

PKG = ["gs://bucket/trainer-0.1.tar.gz"]


def _inputs(**kw) -> JobInputs:
    base = {
        "project": "test-proj",
        "location": "us-central1",
        "package_uris": PKG,
        "python_module": "trainer.task",
    }
    return JobInputs(**{**base, **kw})


def test_package_job_is_spot_with_python_package_spec_and_output_dir():
    job = build_custom_job(_inputs(base_output_directory="gs://bucket/run", args=["--epochs", "2"]))
    assert strategy_name(job) == "SPOT"
    (pool,) = job.job_spec.worker_pool_specs
    assert pool.python_package_spec.package_uris == PKG
    assert pool.python_package_spec.python_module == "trainer.task"
    assert list(pool.python_package_spec.args) == ["--epochs", "2"]
    assert pool.replica_count == 1
    assert job.job_spec.base_output_directory.output_uri_prefix == "gs://bucket/run"
    assert "max_wait_duration" not in job.job_spec.scheduling


@given(st.integers(min_value=1, max_value=64))
def test_replicas_are_one_chief_and_the_rest_workers(replicas):
    job = build_custom_job(_inputs(replica_count=replicas))
    pools = job.job_spec.worker_pool_specs
    assert sum(p.replica_count for p in pools) == replicas
    assert pools[0].replica_count == 1
    assert len(pools) == (1 if replicas == 1 else 2)


# Any text Vertex AI takes as an env value: valid Unicode, no unescaped apostrophe (which it
# refuses, tests/jobs/test_launch_inputs.py), no NUL (which no process can be given).
_ENV_VALUE = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="'\x00"), max_size=12
)


@given(
    st.dictionaries(
        st.from_regex(r"[A-Z_][A-Z0-9_]{0,10}", fullmatch=True),
        _ENV_VALUE,
        max_size=5,
    )
)
def test_env_reaches_every_pool_and_user_env_wins(env):
    job = build_custom_job(
        _inputs(env=env, replica_count=2),
        extra_env={RESUME_ENV: "gs://x", **{k: "launcher" for k in env}},
    )
    for pool in job.job_spec.worker_pool_specs:
        got = {e.name: e.value for e in pool.python_package_spec.env}
        assert got == {RESUME_ENV: "gs://x", **env} if RESUME_ENV not in env else got == env


def test_container_job_uses_container_spec():
    job = build_custom_job(
        JobInputs(
            project="test-proj",
            location="us-central1",
            container_image_uri="us-docker.pkg.dev/p/r/i:1",
            command=["python"],
        )
    )
    (pool,) = job.job_spec.worker_pool_specs
    assert pool.container_spec.image_uri == "us-docker.pkg.dev/p/r/i:1"
    assert list(pool.container_spec.command) == ["python"]
    assert "python_package_spec" not in pool


def test_accelerators_and_disk():
    job = build_custom_job(
        _inputs(accelerator_type="NVIDIA_TESLA_T4", accelerator_count=2, boot_disk_size_gb=200)
    )
    (pool,) = job.job_spec.worker_pool_specs
    assert pool.machine_spec.accelerator_count == 2
    assert pool.disk_spec.boot_disk_size_gb == 200


def test_worker_pool_specs_accept_camel_and_snake_case_and_get_the_package():
    pools = [
        {"machineSpec": {"machineType": "n1-standard-8"}, "replicaCount": 1},
        {},
        {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": "3"},
    ]
    job = build_custom_job(_inputs(worker_pool_specs=pools))
    specs = job.job_spec.worker_pool_specs
    assert [p.replica_count for p in specs] == [1, 0, 3]
    assert specs[2].python_package_spec.python_module == "trainer.task"
    assert "python_package_spec" not in specs[1]


def test_pools_with_their_own_code_get_the_launchers_environment_and_keep_their_own():
    pools = [
        {
            "machineSpec": {"machineType": "n1-standard-4"},
            "replicaCount": 1,
            "containerSpec": {
                "imageUri": "us-docker.pkg.dev/p/r/own:1",
                "env": [{"name": "MODE", "value": "pool"}],
            },
        },
        {
            "machineSpec": {"machineType": "n1-standard-4"},
            "replicaCount": 2,
            "pythonPackageSpec": {
                "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-0:latest",
                "packageUris": PKG,
                "pythonModule": "trainer.task",
            },
        },
    ]
    job = build_custom_job(
        _inputs(worker_pool_specs=pools, env={"MODE": "user", "SEED": "1"}),
        extra_env={RESUME_ENV: "gs://x"},
    )
    own, package = job.job_spec.worker_pool_specs
    assert {e.name: e.value for e in own.container_spec.env} == {
        "MODE": "pool",  # the pool's own value wins over the launcher's
        "SEED": "1",
        RESUME_ENV: "gs://x",
    }
    assert {e.name: e.value for e in package.python_package_spec.env} == {
        "MODE": "user",
        "SEED": "1",
        RESUME_ENV: "gs://x",
    }


def test_flex_start_keeps_max_wait_and_spot_drops_it():
    job = build_custom_job(_inputs(max_wait_duration="2h"), strategy="FLEX_START")
    assert job.job_spec.scheduling.max_wait_duration.total_seconds() == 7200
    spot = with_strategy(job, "SPOT")
    assert "max_wait_duration" not in spot.job_spec.scheduling
    assert strategy_name(spot) == "SPOT"
    assert strategy_name(job) == "FLEX_START"  # the original is untouched
    standard = with_strategy(spot, "STANDARD")
    assert strategy_name(standard) == "STANDARD"


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"project": ""}, "project"),
        ({"location": "US Central"}, "location"),
        ({"package_uris": []}, "package"),
        ({"package_uris": [f"gs://b/{i}" for i in range(101)]}, "package"),
        ({"python_module": "trainer/task.py"}, "python_module"),
        ({"container_image_uri": "gcr.io/p/i"}, "container_image_uri"),
        ({"replica_count": 0}, "replica_count"),
        ({"accelerator_type": "NVIDIA_TESLA_T4"}, "accelerator_count"),
        ({"accelerator_type": "GPU9000", "accelerator_count": 1}, "accelerator_type"),
        ({"accelerator_count": 2}, "accelerator_type"),
        ({"timeout": "forever"}, "timeout"),
        ({"labels": {"Team": "x"}}, "labels"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"worker_pool_specs": [{"machineSpec": {"machineTypo": "x"}}]}, "worker_pool_specs[0]"),
        ({"base_output_directory": "s3://bucket/x"}, "base_output_directory"),
        ({"boot_disk_type": "floppy"}, "boot_disk_type"),
    ],
)
def test_bad_inputs_are_named(kw, field):
    with pytest.raises(LaunchInputError) as info:
        build_custom_job(_inputs(**kw))
    assert info.value.field == field
    assert field.split("[")[0] in str(info.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3600s", 3600), ("90m", 5400), ("2h", 7200), ("1d", 86400), ("1.5s", 1.5), (30, 30)],
)
def test_durations(text, seconds):
    assert parse_duration("timeout", text) == seconds


# Machine types without built-in accelerators: every one of them takes a CPU-only job.
_PLAIN_MACHINES = sorted(
    name
    for name, m in __import__("kfp_spot.machines").machines.machine_types().items()
    if not m.accelerator_type
)


@given(
    machine=st.sampled_from(_PLAIN_MACHINES),
    replicas=st.integers(1, 16),
    args=st.lists(
        st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12),
        max_size=4,
    ),
    env=st.dictionaries(
        st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), _ENV_VALUE, max_size=3
    ),
    labels=st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True),
        st.from_regex(r"[a-z0-9_-]{0,10}", fullmatch=True),
        max_size=3,
    ),
    strategy=st.sampled_from(["SPOT", "STANDARD", "FLEX_START"]),
    container=st.booleans(),
)
def test_valid_inputs_build_jobs_the_services_rules_accept(
    machine, replicas, args, env, labels, strategy, container
):
    """What passes the launcher's input checks also passes kfp_spot.validation (no surprises at
    create time)."""
    from kfp_spot.vertex import validate_custom_job

    code = (
        {
            "container_image_uri": "us-docker.pkg.dev/p/r/trainer:1",
            "package_uris": [],
            "python_module": "",
        }
        if container
        else {}
    )
    inputs = _inputs(
        machine_type=machine,
        replica_count=replicas,
        args=args,
        env=env,
        labels=labels,
        base_output_directory="gs://bucket/run",
        **code,
    )
    validate_custom_job(build_custom_job(inputs, strategy=strategy))


# -- which input set a field: the table behind the launcher's error messages ---------------------

_USER_POOLS = [
    {"machineSpec": {"machineType": "n1-standard-8"}, "replicaCount": 1},  # code from the inputs
    {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 2,
        "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/own:1"},
    },
]


@pytest.mark.parametrize(
    ("field", "pools", "expected"),
    [
        ("jobSpec.workerPoolSpecs[0].machineSpec.machineType", (), "machine_type"),
        ("jobSpec.workerPoolSpecs[1].machineSpec.acceleratorType", (), "accelerator_type"),
        ("jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount", (), "accelerator_count"),
        ("jobSpec.workerPoolSpecs[0].machineSpec", (), "machine_type"),
        ("jobSpec.workerPoolSpecs[1].replicaCount", (), "replica_count"),
        ("jobSpec.workerPoolSpecs[0].diskSpec.bootDiskSizeGb", (), "boot_disk_size_gb"),
        ("jobSpec.workerPoolSpecs[0].diskSpec.bootDiskType", (), "boot_disk_type"),
        ("jobSpec.workerPoolSpecs[0].pythonPackageSpec.pythonModule", (), "python_module"),
        ("jobSpec.workerPoolSpecs[0].pythonPackageSpec.packageUris", (), "package"),
        ("jobSpec.workerPoolSpecs[0].pythonPackageSpec.packageUris[3]", (), "package"),
        ("jobSpec.workerPoolSpecs[0].pythonPackageSpec.executorImageUri", (), "executor_image_uri"),
        ("jobSpec.workerPoolSpecs[0].pythonPackageSpec.env[2].name", (), "env"),
        ("jobSpec.workerPoolSpecs[0].containerSpec.imageUri", (), "container_image_uri"),
        ("jobSpec.workerPoolSpecs[0].containerSpec.env[0].name", (), "env"),
        ("jobSpec.workerPoolSpecs[0]", (), "machine_type"),
        ("displayName", (), "display_name"),
        ("labels.Team", (), "labels"),
        ("jobSpec.scheduling.timeout", (), "timeout"),
        ("jobSpec.scheduling.maxWaitDuration", (), "max_wait_duration"),
        ("jobSpec.baseOutputDirectory.outputUriPrefix", (), "base_output_directory"),
        ("jobSpec.workerPoolSpecs", (), "replica_count"),
        ("encryptionSpec.kmsKeyName", (), "encryption_spec_key_name"),
        ("jobSpec.tensorboard", (), "tensorboard"),
        ("jobSpec.enableWebAccess", (), "enable_web_access"),
        ("jobSpec.reservedIpRanges[2]", (), "reserved_ip_ranges"),
        ("jobSpec.persistentResourceId", (), "persistent_resource_id"),
        ("jobSpec.pscInterfaceConfig.dnsPeeringConfigs[0].domain", (), "psc_interface_config"),
        ("jobSpec.serviceAccount", (), "service_account"),
        # Full pools: the pool's own path, unless the launcher filled the pool's code in.
        (
            "jobSpec.workerPoolSpecs[0].machineSpec.machineType",
            _USER_POOLS,
            "worker_pool_specs[0].machineSpec.machineType",
        ),
        (
            "jobSpec.workerPoolSpecs[1].replicaCount",
            _USER_POOLS,
            "worker_pool_specs[1].replicaCount",
        ),
        ("jobSpec.workerPoolSpecs[0].pythonPackageSpec.pythonModule", _USER_POOLS, "python_module"),
        (
            "jobSpec.workerPoolSpecs[1].containerSpec.imageUri",
            _USER_POOLS,
            "worker_pool_specs[1].containerSpec.imageUri",
        ),
        ("jobSpec.workerPoolSpecs[1]", _USER_POOLS, "worker_pool_specs[1]"),
        ("jobSpec.workerPoolSpecs", _USER_POOLS, "worker_pool_specs"),
        ("displayName", _USER_POOLS, "display_name"),
    ],
)
def test_a_job_field_maps_to_the_input_that_set_it(field, pools, expected):
    from kfp_spot.jobs.inputs import input_for_field

    assert input_for_field(field, _inputs(worker_pool_specs=pools)) == expected


def test_the_field_table_names_only_real_component_inputs():
    import inspect

    from kfp_spot.components.launch_spot_job import component
    from kfp_spot.jobs.inputs import FIELD_INPUTS

    parameters = set(inspect.signature(component.launch_spot_job.python_func).parameters)
    assert set(FIELD_INPUTS.values()) <= parameters


@pytest.mark.parametrize(
    ("kw", "field", "job_field"),
    [
        (
            {
                "machine_type": "n1-standard-4",
                "accelerator_type": "NVIDIA_L4",
                "accelerator_count": 1,
            },
            "accelerator_type",
            "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType",
        ),
        (
            {"accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 3},
            "accelerator_count",
            "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount",
        ),
        ({"machine_type": ""}, "machine_type", "machineSpec.machineType"),
        ({"display_name": ""}, "display_name", "displayName"),
        ({"executor_image_uri": ""}, "executor_image_uri", "executorImageUri"),
        (
            {
                "worker_pool_specs": [
                    {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 2}
                ]
            },
            "worker_pool_specs[0].replicaCount",
            "jobSpec.workerPoolSpecs[0].replicaCount",
        ),
    ],
)
def test_rules_broken_by_the_built_job_name_the_input_and_the_field(kw, field, job_field):
    with pytest.raises(LaunchInputError) as info:
        build_custom_job(_inputs(**kw))
    assert info.value.field == field
    assert job_field in str(info.value)


def test_an_unknown_machine_type_is_left_to_the_service_with_a_warning(caplog):
    job = build_custom_job(
        _inputs(machine_type="a4-highgpu-8g", accelerator_type="NVIDIA_B200", accelerator_count=8)
    )
    assert job.job_spec.worker_pool_specs[0].machine_spec.machine_type == "a4-highgpu-8g"
    assert "a4-highgpu-8g" in caplog.text and "service will judge" in caplog.text


def test_gcpcs_inputs_reach_the_job_as_gcpc_sends_them():
    job = build_custom_job(
        _inputs(
            tensorboard="projects/test-proj/locations/us-central1/tensorboards/7",
            service_account="sa@test-proj.iam.gserviceaccount.com",
            enable_web_access=True,
            reserved_ip_ranges=["vertex-ai-ip-range"],
            encryption_spec_key_name="projects/test-proj/locations/us-central1/keyRings/r/cryptoKeys/k",
            persistent_resource_id="training-cluster",
            psc_interface_config={"networkAttachment": "attachment-1"},
        )
    )
    spec = job.job_spec
    assert spec.tensorboard == "projects/test-proj/locations/us-central1/tensorboards/7"
    assert spec.enable_web_access is True
    assert list(spec.reserved_ip_ranges) == ["vertex-ai-ip-range"]
    assert spec.persistent_resource_id == "training-cluster"
    assert spec.psc_interface_config.network_attachment == "attachment-1"
    assert job.encryption_spec.kms_key_name.endswith("/cryptoKeys/k")


def test_left_at_their_defaults_gcpcs_inputs_leave_the_job_alone():
    job = build_custom_job(_inputs())  # persistent_resource_id: the placeholder, as on Vertex
    spec = JobInputs.__dataclass_fields__
    assert spec["persistent_resource_id"].default == "{{$.pipeline_persistent_resource_id}}"
    for name in (
        "tensorboard",
        "enable_web_access",
        "reserved_ip_ranges",
        "persistent_resource_id",
    ):
        assert name not in job.job_spec, name
    assert "psc_interface_config" not in job.job_spec
    assert "encryption_spec" not in job


def test_a_job_to_the_emulator_may_write_to_a_local_path_but_not_one_to_vertex():
    from kfp_spot.vertex import EMULATOR

    inputs = _inputs(base_output_directory="/tmp/run")
    build_custom_job(inputs, target=EMULATOR)
    with pytest.raises(LaunchInputError, match="local emulator's extension") as info:
        build_custom_job(inputs)
    assert info.value.field == "base_output_directory"


def test_package_uris_reach_vertex_as_gs_uris_or_are_refused_naming_the_package():
    job = build_custom_job(_inputs(package_uris=["/gcs/bucket/s/trainer-0.1.tar.gz"]))
    (pool,) = job.job_spec.worker_pool_specs
    assert list(pool.python_package_spec.package_uris) == ["gs://bucket/s/trainer-0.1.tar.gz"]
    with pytest.raises(LaunchInputError) as info:
        build_custom_job(_inputs(package_uris=["/tmp/stage/trainer-0.1.tar.gz"]))
    assert info.value.field == "package"
    assert "Vertex AI reads packages from Cloud Storage only" in str(info.value)
    assert "packageUris[0]" in str(info.value)


def test_a_million_replicas_is_refused_for_vertex_ai_as_a_sanity_bound():
    build_custom_job(_inputs(replica_count=10_000))
    with pytest.raises(LaunchInputError) as info:
        build_custom_job(_inputs(replica_count=1_000_000))
    assert info.value.field == "replica_count"
    assert "at most 10000 per job" in str(info.value) and "sanity bound" in str(info.value)
