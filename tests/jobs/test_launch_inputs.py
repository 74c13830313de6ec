"""Bad launch inputs end in one line naming the input and the valid form, before any API call.

Every case runs the whole entry point (``launch_spot_job(**inputs)``) against the recording server
the real GAPIC client talks to, and asserts the server saw no request at all.
"""

from __future__ import annotations

import json

import pytest
from artifacts import FakeArtifact
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recording_server import RecordingServer

from kfp_spot import checkpoints
from kfp_spot.jobs.entry import launch_spot_job
from kfp_spot.jobs.inputs import LaunchInputError
from kfp_spot.vertex import EXTRA_REGIONS_ENV


def _deep(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _inputs(endpoint: str, package, outputs, **given) -> dict:
    """The launch inputs every case shares (project, package, a fast poll); ``given`` on top."""
    base = {
        "project": "test-proj",
        "package": package,
        "api_endpoint": endpoint,
        "poll_interval_seconds": 0.01,
    }
    return {**base, **outputs, **given}


def _refused(server, package, outputs, **bad) -> LaunchInputError:
    with pytest.raises(LaunchInputError) as info:
        launch_spot_job(**_inputs(server.endpoint, package, outputs, **bad))
    assert server.requests == [], "an API call was made for a bad input"
    message = str(info.value)
    assert "\n" not in message, "the error must be one line"
    return info.value


# (inputs, the input the error must name, text of the valid form the message must give)
CASES = {
    "huge timeout": ({"timeout": "99999999999999999999s"}, "timeout", "at most 315576000000s"),
    "numeric overflow": ({"timeout": 1e400}, "timeout", "'3600s'"),
    "zero timeout": ({"timeout": "0s"}, "timeout", "longer than 0s"),
    "negative wait": ({"max_wait_duration": "-5s"}, "max_wait_duration", "'3600s'"),
    "bare scheme": ({"api_endpoint": "http://"}, "api_endpoint", "http://HOST:PORT"),
    "port not a number": (
        {"api_endpoint": "http://127.0.0.1:abc"},
        "api_endpoint",
        "1 to 65535",
    ),
    "endpoint path": ({"api_endpoint": "http://127.0.0.1:8/v1"}, "api_endpoint", "HOST:PORT"),
    "unknown region": ({"location": "mars-central9"}, "location", "us-central1"),
    "region with newline": ({"location": "us-central1\n"}, "location", "mean 'us-central1'"),
    "project with spaces": ({"project": "bad project!"}, "project", "6-30 lowercase"),
    "project with newline": ({"project": "my-project\n"}, "project", "6-30 lowercase"),
    "project too short": ({"project": "proj"}, "project", "6-30 lowercase"),
    "deep pools (objects)": ({"worker_pool_specs": _deep(5000)}, "worker_pool_specs", "levels"),
    "deep pools (JSON)": (
        {"worker_pool_specs": "[" * 5000 + "]" * 5000},
        "worker_pool_specs",
        "levels",
    ),
    "deep env": ({"env": {"A": _deep(100)}}, "env", "levels"),
    "lone surrogate": ({"args": ["--name", "\ud800"]}, "args", "UTF-8"),
    "args as plain text": ({"args": "--epochs 2"}, "args", "JSON"),
    # Items with no one text (Python's repr is not what a shell or JSON reader expects).
    "null in args": ({"args": ["--resume", None]}, "args", "holds None, which is not text"),
    "list in args": ({"args": ["--dims", [1, 2]]}, "args", "JSON text for a structured"),
    "object in env": ({"env": {"CFG": {"a": 1}}}, "env", "not text or a number"),
    "boolean in env": ({"env": {"DEBUG": True}}, "env", "e.g. 'true'"),
    "boolean label": ({"labels": {"prod": False}}, "labels", "not text or a number"),
    "poll forever": ({"poll_interval_seconds": 1e308}, "poll_interval_seconds", "3600"),
    "infinite count": ({"accelerator_count": "1e400"}, "accelerator_count", "finite"),
    "int32 overflow": ({"replica_count": 2**40}, "replica_count", "32-bit"),
    "bool as text": ({"disable_retries": "maybe"}, "disable_retries", "true or false"),
    # Service rules on the built job, reported against the input that set the field.
    "unknown accelerator": ({"accelerator_type": "GPU9000"}, "accelerator_type", "NVIDIA_L4"),
    "count without type": ({"accelerator_count": 2}, "accelerator_type", "acceleratorCount"),
    "built-in GPU mismatch": (
        {
            "machine_type": "a2-highgpu-1g",
            "accelerator_type": "NVIDIA_TESLA_T4",
            "accelerator_count": 1,
        },
        "accelerator_type",
        "NVIDIA_TESLA_A100",
    ),
    "long display name": ({"display_name": "x" * 129}, "display_name", "at most 128"),
    "tiny disk": ({"boot_disk_size_gb": 5}, "boot_disk_size_gb", "[100, 64000]"),
    "floppy disk": ({"boot_disk_type": "floppy"}, "boot_disk_type", "pd-ssd"),
    "bad module": ({"python_module": "trainer/task.py"}, "python_module", "'trainer.task'"),
    "bad label": ({"labels": {"Team": "x"}}, "labels", "lowercase letter"),
    "labels with newline": ({"labels": {"team": "a\n"}}, "labels", "lowercase letters"),
    "env name": ({"env": {"1BAD": "x"}}, "env", "not starting with a digit"),
    "env value a Python repr": ({"env": {"CLASSES": "['a', 'b']"}}, "env", "apostrophe"),
    "env value with a NUL": ({"env": {"A": "x\x00"}}, "env", "holds a NUL character"),
    "argument with a NUL": ({"args": ["--name", "\x00"]}, "args", "holds a NUL character"),
    "full pools": (
        {
            "worker_pool_specs": [
                {
                    "machineSpec": {
                        "machineType": "n1-standard-4",
                        "acceleratorType": "NVIDIA_TESLA_T4",
                    },
                    "replicaCount": 1,
                }
            ]
        },
        "worker_pool_specs[0].machineSpec.acceleratorCount",
        "at least 1",
    ),
    "pool JSON text": ({"worker_pool_specs": "[{]"}, "worker_pool_specs", "JSON"),
    # GCPC's inputs.
    "key not a KMS name": (
        {"encryption_spec_key_name": "my-key"},
        "encryption_spec_key_name",
        "projects/PROJECT/locations/REGION/keyRings/KEY_RING/cryptoKeys/KEY",
    ),
    "key in another region": (
        {
            "encryption_spec_key_name": (
                "projects/my-proj/locations/europe-west4/keyRings/r/cryptoKeys/k"
            )
        },
        "encryption_spec_key_name",
        "the job's own region",
    ),
    "tensorboard not a name": (
        {"tensorboard": "my-board", "service_account": "sa@p.iam.gserviceaccount.com"},
        "tensorboard",
        "projects/PROJECT/locations/REGION/tensorboards/TENSORBOARD_ID",
    ),
    "tensorboard without service account": (
        {"tensorboard": "projects/my-proj/locations/us-central1/tensorboards/1"},
        "service_account",
        "required when jobSpec.tensorboard is set",
    ),
    "persistent resource name for id": (
        {"persistent_resource_id": "projects/p-123456/locations/us-central1/persistentResources/c"},
        "persistent_resource_id",
        "the ID, not the full resource name",
    ),
    "reserved range not a name": (
        {"reserved_ip_ranges": ["10.0.0.0/16"]},
        "reserved_ip_ranges",
        "'vertex-ai-ip-range'",
    ),
    "reserved ranges not a list": (
        {"reserved_ip_ranges": {"a": "b"}},
        "reserved_ip_ranges",
        "a list",
    ),
    "psc unknown field": (
        {"psc_interface_config": {"attachment": "a"}},
        "psc_interface_config",
        "networkAttachment",
    ),
    "psc domain without dot": (
        {
            "psc_interface_config": {
                "dnsPeeringConfigs": [
                    {"domain": "corp", "targetProject": "p", "targetNetwork": "n"}
                ]
            }
        },
        "psc_interface_config",
        "must end with a dot",
    ),
    "persistent resource on the emulator": (
        {"persistent_resource_id": "training-cluster"},
        "persistent_resource_id",
        "has no persistent resources",
    ),
    "web access as text": ({"enable_web_access": "maybe"}, "enable_web_access", "true or false"),
    # Where the job writes.
    "relative base": ({"base_output_directory": "out/run"}, "base_output_directory", "gs://"),
    "s3 base": ({"base_output_directory": "s3://b/run"}, "base_output_directory", "gs://BUCKET"),
    "bad bucket": ({"base_output_directory": "gs://B_/run"}, "base_output_directory", "bucket"),
    "gcs root only": ({"base_output_directory": "/gcs/"}, "base_output_directory", "no bucket"),
    # Regions.
    "unknown region in regions": ({"regions": ["us-central1", "mars-9"]}, "regions", "mars-9"),
    "region listed twice": ({"regions": ["us-east1", "us-east1"]}, "regions", "more than once"),
    "regions as text": ({"regions": "us-east1"}, "regions", "JSON"),
    "region policy": ({"region_policy": "roam"}, "region_policy", "STAY, EAGER"),
    "negative region wait": ({"region_wait_seconds": -1}, "region_wait_seconds", ">= 0"),
    "a key of one region, two regions": (
        {
            "regions": ["us-central1", "europe-west4"],
            "encryption_spec_key_name": (
                "projects/p-123456/locations/us-central1/keyRings/r/cryptoKeys/k"
            ),
        },
        "encryption_spec_key_name",
        "a single region",
    ),
    "a bucket for a region not listed": (
        {"regions": ["us-central1", "europe-west4"], "region_buckets": {"asia-east1": "gs://b"}},
        "region_buckets",
        "not one of the launch's regions",
    ),
    "more variables than a job takes": (  # PythonPackageSpec.env: "Maximum limit is 100."
        {"env": {f"SETTING_{i}": "x" for i in range(101)}},
        "env",
        "at most 100",
    ),
    "a region bucket that is no URI": (
        {"regions": ["us-central1", "europe-west4"], "region_buckets": {"europe-west4": "eu/x"}},
        "region_buckets",
        "gs://",
    ),
}


@pytest.mark.parametrize(("bad", "name", "valid"), CASES.values(), ids=CASES.keys())
def test_bad_inputs_are_named_with_the_valid_form_and_nothing_is_called(
    package, outputs, bad, name, valid
):
    with RecordingServer() as server:
        error = _refused(server, package, outputs, **bad)
    assert error.field == name
    assert str(error).startswith(f"launch_spot_job input {name!r}: ")
    assert valid in str(error)


def test_a_module_for_a_custom_container_is_refused_not_ignored(outputs):
    image = {"container_image_uri": "us-docker.pkg.dev/p/r/i:1"}
    with RecordingServer() as server:
        error = _refused(server, None, outputs, **image, python_module="trainer.task")
        launch_spot_job(**_inputs(server.endpoint, None, outputs, **image, command=["train"]))
    assert error.field == "python_module"
    assert "custom container (container_image_uri) runs its image's entrypoint" in str(error)
    (body,) = server.created()
    assert body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["command"] == ["train"]


def test_a_rule_broken_by_the_built_job_also_names_the_field(package, outputs):
    with RecordingServer() as server:
        error = _refused(server, package, outputs, boot_disk_size_gb=5)
    assert "jobSpec.workerPoolSpecs[0].diskSpec.bootDiskSizeGb" in str(error)


def test_a_new_region_is_allowed_through_the_environment(package, outputs, monkeypatch):
    with RecordingServer() as server:
        _refused(server, package, outputs, location="mars-central9")
        monkeypatch.setenv(EXTRA_REGIONS_ENV, "mars-central9, venus-east2")
        launch_spot_job(**_inputs(server.endpoint, package, outputs, location="mars-central9"))
    (body,) = server.created()
    assert server.requests[0].path.startswith("/v1/projects/test-proj/locations/mars-central9/")
    assert body["displayName"] == "kfp-spot-training"


def test_a_malformed_extra_region_is_named(package, outputs, monkeypatch):
    monkeypatch.setenv(EXTRA_REGIONS_ENV, "mars central\n")
    with RecordingServer() as server:
        error = _refused(server, package, outputs)
    assert error.field == "location"
    assert EXTRA_REGIONS_ENV in str(error)


@pytest.mark.parametrize(
    "project", ["example.com:my-project", "my-project-123", "a12345", "123456789012"]
)
def test_valid_project_forms_are_submitted(package, outputs, project):
    with RecordingServer() as server:
        launch_spot_job(**_inputs(server.endpoint, package, outputs, project=project))
    assert server.requests[0].path.startswith(f"/v1/projects/{project}/locations/us-central1/")


def _resume(tmp_path, layout: str) -> FakeArtifact:
    root = tmp_path / "previous" / "checkpoints"
    if layout == "empty dir":
        root.mkdir(parents=True)
    elif layout == "torn step":
        (root / "step-3").mkdir(parents=True)
        (root / "step-3" / "w").write_bytes(b"half")  # no manifest: never committed
    return FakeArtifact(uri=str(root), metadata={"latest_step": -1})


@pytest.mark.parametrize(
    ("layout", "why"),
    [
        ("missing", "does not exist"),
        ("empty dir", "holds no committed step"),
        ("torn step", "none verifies"),
    ],
)
def test_resume_from_without_a_committed_step_is_refused(package, outputs, tmp_path, layout, why):
    with RecordingServer() as server:
        error = _refused(server, package, outputs, resume_from=_resume(tmp_path, layout))
    assert error.field == "resume_from"
    assert why in str(error)
    assert "at least one committed step" in str(error)
    assert checkpoints.list_steps(outputs["checkpoint"].uri) == []  # nothing seeded


def _newer_format_steps(root, *steps: int) -> None:
    """Steps 3 and ``steps`` under ``root``, ``steps`` as a newer kfp-spot writes them."""
    for step in (3, *steps):
        checkpoints.write_step(str(root), step, {"w": b"weights"})
    for step in steps:
        manifest = root / f"step-{step}" / checkpoints.MANIFEST_NAME
        doc = json.loads(manifest.read_bytes())
        doc.pop("manifest_sha256")
        manifest.write_bytes(checkpoints.seal({**doc, "format": "kfp-spot-checkpoint/3"}))


def test_resume_from_a_newer_format_is_refused_not_passed_over(package, outputs, tmp_path):
    root = tmp_path / "previous" / "checkpoints"
    _newer_format_steps(root, 5)
    with RecordingServer() as server:  # it seeded step 3
        error = _refused(server, package, outputs, resume_from=FakeArtifact(uri=str(root)))
    assert error.field == "resume_from"
    assert "step 5" in str(error) and "'kfp-spot-checkpoint/3'" in str(error)
    assert "upgrade kfp-spot" in str(error)


def test_a_newer_format_step_of_this_run_stops_the_launch_before_any_api_call(
    package, outputs, tmp_path
):
    base = tmp_path / "base"
    _newer_format_steps(base / "checkpoints", 5)
    inputs = _inputs("", package, outputs, base_output_directory=str(base))
    with RecordingServer() as server:
        inputs["api_endpoint"] = server.endpoint
        with pytest.raises(checkpoints.CheckpointFormatError, match="step 5"):
            launch_spot_job(**inputs)
    assert server.requests == []
    assert checkpoints.list_steps(str(base / "checkpoints")) == [3, 5]


@pytest.mark.parametrize("given", ["step", "run"])
def test_resume_from_a_step_or_run_directory_names_the_checkpoint_root(
    package, outputs, tmp_path, given
):
    # continue_training's checkpoint_uri given as .../step-7 or as the kfp-spot run directory
    from kfp_spot.trainer import CheckpointManager

    root = tmp_path / "run" / "job" / "checkpoints"
    with CheckpointManager(str(root), handle_signals=False, record_attempts=False) as ckpt:
        ckpt.save(7, {"w": b"weights"})
    uri = root / "step-7" if given == "step" else tmp_path / "run"
    with RecordingServer() as server:
        error = _refused(server, package, outputs, resume_from=FakeArtifact(uri=str(uri)))
    assert error.field == "resume_from"
    expected = (
        f"{uri} is itself the directory of step 7, not a checkpoint root: give the directory "
        f"above it, {root} (step 7 is there)"
        if given == "step"
        else f"{uri} holds its checkpoints in {root}: give that directory"
    )
    assert expected in str(error)
    assert "never checkpointed" not in str(error)


def test_resume_from_an_unsupported_scheme_is_refused(package, outputs):
    with RecordingServer() as server:
        error = _refused(server, package, outputs, resume_from=FakeArtifact(uri="s3://b/ckpt"))
    assert error.field == "resume_from"
    assert "gs://" in str(error)


def test_resume_from_a_gs_uri_without_a_valid_bucket_is_refused_before_any_read(package, outputs):
    # The same rule as the evaluation's checkpoint input: a bad bucket never becomes a request.
    with RecordingServer() as server:
        artifact = FakeArtifact(uri="gs://Not_A_Bucket/ckpt")
        error = _refused(server, package, outputs, resume_from=artifact)
    assert error.field == "resume_from"
    assert "'Not_A_Bucket' is not a Cloud Storage bucket name" in str(error)


_printable = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["timeout", "max_wait_duration", "api_endpoint", "project", "location"]),
    value=st.one_of(
        _printable,
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.lists(_printable, max_size=2),
    ),
)
def test_any_value_of_a_rich_input_is_accepted_or_named(tmp_path_factory, name, value):
    """Random values never escape as anything but LaunchInputError, and nothing is called."""
    root = tmp_path_factory.mktemp("fuzz")
    outputs = {
        "checkpoint": FakeArtifact(uri=str(root / "checkpoint")),
        "gcp_resources": str(root / "gcp_resources"),
    }
    from kfp_spot.jobs.entry import build_request
    from kfp_spot.jobs.launcher import Launcher

    inputs = {
        "project": "test-proj",
        "location": "us-central1",
        "container_image_uri": "us-docker.pkg.dev/p/r/i:1",
        "api_endpoint": "http://127.0.0.1:9",  # nothing listens: prepare() must not call it
        "base_output_directory": "gs://bucket/run",  # taken by Vertex AI and the emulator alike
        **outputs,
        name: value,
    }
    try:
        Launcher(build_request(**inputs)).prepare()
    except LaunchInputError as exc:
        assert exc.field == name
        assert "\n" not in str(exc)


def _created(package, outputs, **given) -> dict:
    """The one CustomJob body a launch with ``given`` (on top of :func:`_inputs`) creates."""
    with RecordingServer() as server:
        launch_spot_job(**_inputs(server.endpoint, package, outputs, **given))
    (body,) = server.created()
    return body


def test_kfp_json_text_for_lists_and_dicts_is_still_accepted(package, outputs):
    body = _created(
        package,
        outputs,
        args=json.dumps(["--epochs", 3]),
        env=json.dumps({"SEED": 7}),
        restart_job_on_worker_restart="true",
    )
    spec = body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]
    assert spec["args"] == ["--epochs", "3"]
    assert {"name": "SEED", "value": "7"} in spec["env"]
    assert body["jobSpec"]["scheduling"]["restartJobOnWorkerRestart"] is True


def test_whole_numbers_in_args_and_env_reach_the_job_as_whole_numbers(package, outputs):
    # as KFP hands over ["--steps", 5] and {"SEED": 7}: protobuf numbers are doubles
    body = _created(
        package, outputs, args=["--steps", 5.0, "--lr", 0.5, "--big", 1e20], env={"SEED": 7.0}
    )
    spec = body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]
    assert spec["args"] == ["--steps", "5", "--lr", "0.5", "--big", "1e+20"]
    assert {"name": "SEED", "value": "7"} in spec["env"]


def test_an_unknown_machine_type_is_judged_by_the_service_the_emulator_refuses_it(
    package, outputs, tmp_path, caplog
):
    """One behaviour on every backend: a warning here, the service's 400 naming the field."""
    from kfp_spot.jobs.launcher import LaunchFailedError
    from kfp_spot.jobs.outcome import Outcome

    emulator = pytest.importorskip("kfp_spot.emulator")
    with emulator.Emulator(str(tmp_path / "emu")) as emu:
        with pytest.raises(LaunchFailedError) as info:
            launch_spot_job(
                **_inputs(emu.endpoint, package, outputs, machine_type="n9-imaginary-4")
            )
        assert emu.list_jobs() == []
    assert info.value.outcome == Outcome.USER_ERROR
    # The service names the field as Vertex does (snake_case path of the request).
    assert "job_spec.worker_pool_specs[0].machine_spec.machine_type" in str(info.value)
    assert "'n9-imaginary-4' is not in kfp-spot's machine table" in caplog.text


def test_a_local_base_bound_for_vertex_is_refused_before_any_call(package, tmp_path):
    from kfp_spot.jobs.entry import build_request
    from kfp_spot.jobs.launcher import Launcher

    request = build_request(
        project="test-proj",
        location="us-central1",
        package=package,
        checkpoint=FakeArtifact(uri=str(tmp_path / "task" / "checkpoint")),  # kfp.local's outputs
        gcp_resources=str(tmp_path / "gcp_resources"),
    )
    with pytest.raises(LaunchInputError) as info:
        Launcher(request).prepare()  # no api_endpoint: Vertex AI, which writes to gs:// only
    assert info.value.field == "base_output_directory"
    assert "local emulator's extension" in str(info.value)


def test_a_slipped_replica_count_is_refused_before_any_call(package, outputs):
    with RecordingServer() as server:  # the emulator's target: each replica is a local process
        error = _refused(server, package, outputs, replica_count=65)
    assert error.field == "replica_count"
    assert "at most 64 per job" in str(error)


def test_the_created_job_never_carries_more_than_64_labels(package, outputs, monkeypatch):
    system = {f"vertex-ai-pipelines-run-{i}": "x" for i in range(10)}
    monkeypatch.setenv("VERTEX_AI_PIPELINES_RUN_LABELS", json.dumps(system))
    mine = {f"team{i}": "ml" for i in range(54)}  # 10 + 54 = 64, before kfp-spot's own two
    with RecordingServer() as server:
        error = _refused(server, package, outputs, labels=mine)
        assert error.field == "labels"
        assert "would carry 66 labels" in str(error) and "give at most 52" in str(error)
        del mine["team53"], mine["team52"]
        launch_spot_job(**_inputs(server.endpoint, package, outputs, labels=mine))
        (body,) = server.created()
    assert len(body["labels"]) == 64
    assert {"kfp_spot_submission", "kfp_spot_output"} <= set(body["labels"])


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"region_policy": "eager"}, ["region_policy"]),
        ({"region_wait_seconds": 600, "regions": ["us-central1"]}, ["region_wait_seconds"]),
        (
            {"region_policy": "EAGER", "region_wait_seconds": 60},
            ["region_policy", "region_wait_seconds"],
        ),
        ({"region_wait_seconds": 600, "regions": ["us-central1", "europe-west4"]}, []),
        ({}, []),
    ],
)
def test_region_settings_that_cannot_act_with_one_region_are_warned_of(
    package, outputs, capsys, given, named
):
    # EAGER or a region wait with one region left nothing to go on to: they did nothing, silently.
    with RecordingServer() as server:
        launch_spot_job(**_inputs(server.endpoint, package, outputs, **given))
    warnings = [
        line
        for line in capsys.readouterr().err.splitlines()
        if line.startswith("kfp-spot: warning: launch_spot_job input 'region")
    ]
    assert [line.split("'")[1] for line in warnings] == named
    assert all("has no effect" in line and "regions" in line for line in warnings)
