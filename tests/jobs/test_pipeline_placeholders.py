"""GCPC's pipeline placeholders as launch defaults: on kfp.local, and where nothing fills them.

Vertex AI Pipelines replaces them before the task starts (tests/jobs/test_gcpc_parity.py shows the
job is then GCPC's). kfp.local cannot parse them; with kfp_spot.pipelines.local_placeholders
(active for the whole test session, as in ``kfp-spot run``) it passes them through and the
launcher settles them.
"""

# No "from __future__ import annotations": KFP reads the pipeline's annotations as types.

import pytest
from artifacts import FakeArtifact
from kfp import dsl, local
from kfp.local import placeholder_utils
from recording_server import RecordingServer

from kfp_spot.components.launch_spot_job import LaunchSpotJobOp
from kfp_spot.jobs.entry import build_request
from kfp_spot.jobs.inputs import LaunchInputError
from kfp_spot.pipelines.local_placeholders import gcp_placeholders_as_text
from kfp_spot.vertex import InvalidValueError, pipeline_context
from kfp_spot.vertex.pipeline_context import (
    LOCATION_PLACEHOLDER,
    PERSISTENT_RESOURCE_ID_PLACEHOLDER,
    PROJECT_ID_PLACEHOLDER,
)

IMAGE = "us-docker.pkg.dev/p/r/trainer:1"
LOCAL_PARENT = "/v1/projects/local-project/locations/us-central1/customJobs"


def test_kfp_local_itself_fails_on_a_gcpc_placeholder():
    """Why the shim exists; when kfp.local learns the placeholders, this fails: revisit the shim."""
    original = placeholder_utils.resolve_io_placeholders.__wrapped__
    with pytest.raises(IndexError):
        original({}, PROJECT_ID_PLACEHOLDER)


def test_the_shim_passes_gcpc_placeholders_through_and_resolves_the_rest():
    executor_input = {"inputs": {"parameterValues": {"name": "value"}}}
    text = f"{LOCATION_PLACEHOLDER}/{{{{$.inputs.parameters['name']}}}}/{PROJECT_ID_PLACEHOLDER}"
    resolved = placeholder_utils.resolve_io_placeholders(executor_input, text)
    assert resolved == f"{LOCATION_PLACEHOLDER}/value/{PROJECT_ID_PLACEHOLDER}"


def test_the_shim_nests_and_puts_kfps_function_back():
    active = placeholder_utils.resolve_io_placeholders  # the session's
    with gcp_placeholders_as_text():
        assert placeholder_utils.resolve_io_placeholders is active
    assert placeholder_utils.resolve_io_placeholders is active


@pytest.mark.parametrize(
    ("name", "placeholder", "local"),
    [
        ("project", PROJECT_ID_PLACEHOLDER, "local-project"),
        ("location", LOCATION_PLACEHOLDER, "us-central1"),
        ("persistent_resource_id", PERSISTENT_RESOURCE_ID_PLACEHOLDER, ""),
    ],
)
def test_unresolved_placeholders_take_the_documented_local_defaults(name, placeholder, local):
    assert pipeline_context.resolve(name, placeholder, emulator=True) == local
    assert pipeline_context.resolve(name, "given", emulator=True) == "given"
    assert pipeline_context.resolve(name, "given", emulator=False) == "given"


def test_bound_for_vertex_only_the_persistent_resource_is_settled():
    assert (
        pipeline_context.resolve(
            "persistent_resource_id", PERSISTENT_RESOURCE_ID_PLACEHOLDER, emulator=False
        )
        == ""  # what Vertex AI Pipelines fills in when the PipelineJob has none
    )
    for name, placeholder in (
        ("project", PROJECT_ID_PLACEHOLDER),
        ("location", LOCATION_PLACEHOLDER),
    ):
        with pytest.raises(InvalidValueError, match="only Vertex AI Pipelines fills in"):
            pipeline_context.resolve(name, placeholder, emulator=False)


@pytest.mark.parametrize("missing", ["project", "location"])
def test_a_launch_to_vertex_never_guesses_the_project_or_region(tmp_path, missing):
    inputs = {"project": "my-project", "location": "europe-west4"}
    del inputs[missing]
    with pytest.raises(LaunchInputError) as info:
        build_request(
            **inputs,
            container_image_uri=IMAGE,
            checkpoint=FakeArtifact(uri="gs://bucket/run/checkpoint"),
            gcp_resources=str(tmp_path / "gcp_resources"),
        )
    assert info.value.field == missing
    assert "'{{$.pipeline_google_cloud" in str(info.value)


@pytest.fixture
def local_runner(tmp_path):
    local.init(local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))


def test_a_component_left_to_its_defaults_runs_under_kfp_local(local_runner):
    with RecordingServer() as server:
        task = LaunchSpotJobOp(
            container_image_uri=IMAGE, api_endpoint=server.endpoint, poll_interval_seconds=0.05
        )
    assert task.outputs["Output"] == "SUCCEEDED"
    (create,) = [r for r in server.requests if r.method == "POST"]
    assert create.path == LOCAL_PARENT
    assert "persistentResourceId" not in create.body["jobSpec"]


def test_a_pipeline_defaulting_to_the_placeholders_runs_under_kfp_local(local_runner):
    @dsl.pipeline
    def regional(
        endpoint: str,
        project: str = PROJECT_ID_PLACEHOLDER,
        location: str = LOCATION_PLACEHOLDER,
    ) -> str:
        return LaunchSpotJobOp(
            project=project,
            location=location,
            container_image_uri=IMAGE,
            api_endpoint=endpoint,
            poll_interval_seconds=0.05,
        ).outputs["Output"]

    with RecordingServer() as server:
        assert regional(endpoint=server.endpoint).output == "SUCCEEDED"
        assert regional(endpoint=server.endpoint, location="europe-west4").output == "SUCCEEDED"
    paths = [r.path for r in server.requests if r.method == "POST"]
    assert paths == [LOCAL_PARENT, LOCAL_PARENT.replace("us-central1", "europe-west4")]


def _channel(name):
    return f"{{{{$.inputs.parameters['pipelinechannel--{name}']}}}}"


def test_a_number_put_into_text_reads_as_the_kfp_backend_writes_it():
    """`args=["--epochs", f"{epochs}"]` with an int parameter: kfp.local wrote '3.0' (its values
    are protobuf doubles, written by json.dumps), which argparse's type=int refuses, so the local
    run failed where the KFP backend, writing numbers with Go's FormatFloat, passes '3'."""
    executor_input = {
        "inputs": {
            "parameterValues": {
                "pipelinechannel--epochs": 3.0,
                "pipelinechannel--lr": 1e-05,
                "pipelinechannel--name": "run",
                "pipelinechannel--on": True,
            }
        },
        "outputs": {"outputFile": "/run/executor_output.json"},
    }
    args = [
        "--epochs",
        _channel("epochs"),
        f"--lr={_channel('lr')}",
        f"{_channel('name')}-{_channel('epochs')}",
        _channel("on"),
    ]
    resolved = placeholder_utils.recursively_resolve_json_dict_placeholders(
        args,
        executor_input_dict=executor_input,
        pipeline_resource_name="p",
        task_resource_name="t",
        pipeline_root="/run",
        pipeline_job_id="1",
        pipeline_task_id="2",
    )
    assert resolved == ["--epochs", "3", "--lr=0.00001", "run-3", "true"]
    original = placeholder_utils.resolve_io_placeholders.__wrapped__  # kfp.local's own
    assert original(executor_input, _channel("epochs")) == "3.0"


@pytest.mark.parametrize(
    ("value", "text"),  # what Go's strconv.FormatFloat(v, 'f', -1, 64) writes
    [
        (3, "3"),
        (3.0, "3"),
        (-2.0, "-2"),
        (0.1, "0.1"),
        (2.5e-06, "0.0000025"),
        (1e22, "10000000000000000000000"),
        (0.30000000000000004, "0.30000000000000004"),
    ],
)
def test_numbers_are_written_as_the_kfp_backend_writes_them(value, text):
    from kfp_spot.vertex.pipeline_context import number_text

    assert number_text(value) == text
