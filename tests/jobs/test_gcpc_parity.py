"""launch_spot_job against GCPC's CustomTrainingJobOp: the same inputs under the same names and
defaults (every difference is in an explained table), and for the same values the same CustomJob,
field for field, system labels included; plus GCPC's create_custom_training_job_from_component for
the machine inputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from artifacts import FakeArtifact
from google.cloud.aiplatform_v1.types import CustomJob
from google.protobuf import json_format
from google_cloud_pipeline_components import _placeholders
from google_cloud_pipeline_components.container.v1.gcp_launcher.utils import (
    gcp_labels_util,
    json_util,
)
from google_cloud_pipeline_components.v1.custom_job import (
    CustomTrainingJobOp,
    create_custom_training_job_from_component,
)
from kfp import compiler, dsl
from recording_server import RecordingServer

from kfp_spot.jobs.entry import build_request, launch_spot_job
from kfp_spot.jobs.launcher import Launcher
from kfp_spot.jobs.service import KFP_SPOT_LABELS, OUTPUT_LABEL, SUBMISSION_LABEL
from kfp_spot.vertex import pipeline_context

ROOT = Path(__file__).resolve().parents[2]
COMPONENT_YAML = ROOT / "components" / "launch_spot_job" / "component.yaml"

IMAGE = "us-docker.pkg.dev/proj/repo/trainer:1"
COMMAND = ["python", "-m", "trainer.task"]
ARGS = ["--epochs", "3"]


@dsl.container_component
def train():
    return dsl.ContainerSpec(image=IMAGE, command=COMMAND, args=ARGS)


def _substitute(template: str, params: dict) -> str:
    """Resolve {{$.inputs.parameters['x']}} as the KFP backend does (JSON for non-strings)."""

    def value(match: re.Match) -> str:
        param = params[match.group(1)]
        empty = {"STRUCT": {}, "LIST": [], "BOOLEAN": False}.get(param["parameterType"], "")
        default = param.get("defaultValue", empty)
        if isinstance(default, str):
            return "" if default.startswith("{{$.") else default
        return json.dumps(default)

    return re.sub(r"\{\{\$\.inputs\.parameters\['(\w+)'\]\}\}", value, template)


@pytest.fixture(scope="module")
def remote_runner():
    """GCPC's launcher, which imports the Vertex AI SDK (over a second of CPU). Imported by the
    tests that run it, not by every xdist worker that collects this module; module-scoped, so
    those tests share one worker (tests/conftest.py groups them)."""
    from google_cloud_pipeline_components.container.v1.custom_job import remote_runner

    return remote_runner


def _gcpc_job(remote_runner, tmp_path, **options) -> CustomJob:
    op = create_custom_training_job_from_component(train, strategy="SPOT", **options)
    path = tmp_path / "gcpc.yaml"
    compiler.Compiler().compile(op, str(path))
    spec = yaml.safe_load(path.read_text())
    (executor,) = spec["deploymentSpec"]["executors"].values()
    args = executor["container"]["args"]
    template = args[args.index("--payload") + 1]
    (component,) = spec["components"].values()
    payload = _substitute(template, component["inputDefinitions"]["parameters"])
    # What GCPC's launcher does with the payload before create_custom_job.
    job_spec = json_util.recursive_remove_empty(json.loads(payload, strict=False))

    class Capture:  # receives exactly what GCPC would hand the JobServiceClient
        def create_custom_job(self, parent, custom_job):
            message = CustomJob.pb(CustomJob())
            json_format.ParseDict(custom_job, message)  # YAML made int64s floats: parse as JSON
            self.job = CustomJob.wrap(message)
            return self.job

    capture = Capture()
    remote_runner.create_custom_job_with_client(capture, "projects/test-proj/locations/l", job_spec)
    return capture.job


def _subset_mismatches(expected, actual, path=""):
    """Fields of ``expected`` whose value differs in ``actual``."""
    if isinstance(expected, dict):
        out = []
        for key, value in expected.items():
            out += _subset_mismatches(value, (actual or {}).get(key), f"{path}.{key}")
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: {expected!r} != {actual!r}"]
        out = []
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            out += _subset_mismatches(e, a, f"{path}[{i}]")
        return out
    return [] if expected == actual else [f"{path}: {expected!r} != {actual!r}"]


CASES = [
    {"machine_type": "n1-standard-4"},
    {
        "machine_type": "n1-standard-8",
        "replica_count": 3,
        "accelerator_type": "NVIDIA_TESLA_T4",
        "accelerator_count": 2,
        "service_account": "sa@proj.iam.gserviceaccount.com",
        "network": "projects/12345/global/networks/vpc",
        "labels": {"team": "ml"},
        "timeout": "3600s",
        "restart_job_on_worker_restart": True,
    },
]


@pytest.mark.parametrize("options", CASES)
def test_spot_job_matches_gcpc(remote_runner, tmp_path, options, outputs):
    base = str(tmp_path / "out")  # a local base: the launcher reads checkpoints there
    gcpc = _gcpc_job(
        remote_runner,
        tmp_path,
        display_name="kfp-spot-training",
        base_output_directory=base,
        **options,
    )
    with RecordingServer() as server:
        launch_spot_job(
            project="test-proj",
            container_image_uri=IMAGE,
            command=COMMAND,
            args=ARGS,
            base_output_directory=base,
            api_endpoint=server.endpoint,
            poll_interval_seconds=0.01,
            **options,
            **outputs,
        )
    (body,) = server.created()
    ours = CustomJob.pb(CustomJob())
    json_format.ParseDict(body, ours)
    expected = json_format.MessageToDict(CustomJob.pb(gcpc))
    actual = json_format.MessageToDict(ours)
    assert expected["jobSpec"]["scheduling"]["strategy"] == "SPOT"
    assert _subset_mismatches(expected, actual) == []
    # And nothing GCPC leaves out, but our own labels (the submission's, the output directory's).
    assert set(actual["labels"]) - set(expected.get("labels", {})) == set(KFP_SPOT_LABELS)


# -- the input lists ---------------------------------------------------------------------------

# GCPC inputs launch_spot_job does not take, and why.
GCPC_NOT_TAKEN = {
    "strategy": "a launch always starts on SPOT (it is the point of the component); where it "
    "falls back to is the fallback_strategy input (STANDARD or FLEX_START), used only after Spot "
    "ran out (fallback_after, deadline_seconds)",
}
# GCPC inputs launch_spot_job takes under another name (none: every shared input keeps its name).
RENAMED: dict[str, str] = {}
# Shared inputs whose defaults differ on purpose: name -> (GCPC's default, ours, why).
DIFFERENT_DEFAULTS = {
    "display_name": (
        None,  # required in GCPC
        "kfp-spot-training",
        "Vertex requires a display name, and a launch built from a package and a machine type "
        "needs nothing else: a fixed default keeps the component usable with no name given",
    ),
}
# Inputs launch_spot_job adds, and why GCPC's op has no counterpart.
OURS_ONLY = {
    # The job's code and machines without hand-written worker_pool_specs (GCPC's
    # create_custom_training_job_from_component takes the machine ones as its own arguments).
    "package": "the prepare_package artifact: package URIs and module of a Python package job",
    "python_module": "the module a Python package job runs",
    "container_image_uri": "a custom container instead of a package",
    "executor_image_uri": "the prebuilt image a Python package runs in",
    "command": "the custom container's command",
    "args": "arguments for the training code",
    "env": "environment for the training code",
    "machine_type": "one machine spec for all replicas (create_custom_training_job_from_component)",
    "accelerator_type": "as create_custom_training_job_from_component",
    "accelerator_count": "as create_custom_training_job_from_component",
    "replica_count": "as create_custom_training_job_from_component",
    "boot_disk_type": "as create_custom_training_job_from_component",
    "boot_disk_size_gb": "as create_custom_training_job_from_component",
    "disable_retries": "Scheduling.disableRetries, a CustomJob field GCPC's op does not expose",
    # Recovery from preemption, which GCPC's op leaves to the service's six restarts.
    "resume_from": "seed the checkpoint directory from an earlier run",
    "max_resubmissions": "new CustomJobs after preemptions exhaust a job",
    "fallback_after": "when to leave Spot",
    "fallback_strategy": "where to go after Spot (GCPC's strategy, as a fallback)",
    "deadline_seconds": "how long to wait for Spot capacity",
    "fail_on_incomplete": "hand on the checkpoint of an incomplete launch instead of failing",
    # Where and how the service is reached (GCPC's op talks to Vertex AI only).
    "api_endpoint": "the local emulator, or another Vertex endpoint",
    "poll_interval_seconds": "state polling (GCPC polls every 20 s)",
    "regions": "region failover, which GCPC does not offer",
    "region_policy": "region failover: when to leave a region",
    "region_wait_seconds": "region failover: how long a Spot job may wait for VMs",
    "region_buckets": "region failover: where a region's copy of the checkpoints goes",
}


def _compiled_parameters(component, tmp_path) -> dict[str, dict]:
    path = tmp_path / "component.yaml"
    compiler.Compiler().compile(component, str(path))
    return yaml.safe_load(path.read_text())["root"]["inputDefinitions"]["parameters"]


@pytest.fixture(scope="module")
def gcpc_parameters(tmp_path_factory) -> dict[str, dict]:
    return _compiled_parameters(CustomTrainingJobOp, tmp_path_factory.mktemp("gcpc"))


@pytest.fixture(scope="module")
def our_inputs() -> dict[str, dict]:
    spec = yaml.safe_load(COMPONENT_YAML.read_text())
    inputs = spec["root"]["inputDefinitions"]
    return {**inputs["parameters"], **inputs.get("artifacts", {})}


def test_every_difference_in_the_input_lists_is_explained(gcpc_parameters, our_inputs):
    gcpc, ours = set(gcpc_parameters), set(our_inputs)
    assert gcpc - ours == set(GCPC_NOT_TAKEN) | set(RENAMED), "unexplained GCPC inputs"
    assert ours - gcpc == set(OURS_ONLY) | set(RENAMED.values()), "unexplained inputs of ours"


def test_shared_inputs_have_gcpcs_types_and_defaults(gcpc_parameters, our_inputs):
    shared = set(gcpc_parameters) & set(our_inputs)
    # the job settings both take (an empty intersection would check nothing below)
    assert {"project", "location", "worker_pool_specs", "timeout", "labels", "network"} <= shared
    for name in shared:
        theirs, mine = gcpc_parameters[name], our_inputs[name]
        assert mine["parameterType"] == theirs["parameterType"], name
        if name in DIFFERENT_DEFAULTS:
            gcpc_default, our_default, _why = DIFFERENT_DEFAULTS[name]
            assert theirs.get("defaultValue") == gcpc_default, f"{name}: the table is stale"
            assert mine.get("defaultValue") == our_default, f"{name}: the table is stale"
            continue
        assert mine.get("defaultValue") == theirs.get("defaultValue"), name
        assert mine.get("isOptional", False) == theirs.get("isOptional", False), name


def test_the_placeholders_are_gcpcs():
    for name in (
        "PROJECT_ID_PLACEHOLDER",
        "LOCATION_PLACEHOLDER",
        "PERSISTENT_RESOURCE_ID_PLACEHOLDER",
        "SERVICE_ACCOUNT_PLACEHOLDER",
        "NETWORK_PLACEHOLDER",
        "ENCRYPTION_SPEC_KMS_KEY_NAME_PLACEHOLDER",
    ):
        assert getattr(pipeline_context, name) == getattr(_placeholders, name), name


# -- the same values make the same job -----------------------------------------------------------

POOL = {
    "machine_spec": {"machine_type": "n1-standard-8"},
    "replica_count": 1,
    "container_spec": {"image_uri": IMAGE, "command": COMMAND, "args": ARGS},
}
SHARED = {
    "display_name": "parity-job",
    "project": "parity-proj",
    "location": "europe-west4",
    "worker_pool_specs": [POOL],
    "timeout": "3600s",
    "restart_job_on_worker_restart": True,
    "service_account": "trainer@parity-proj.iam.gserviceaccount.com",
    "base_output_directory": "gs://parity-bucket/run",
    "labels": {"team": "ml", "cost-center": "42"},
    "encryption_spec_key_name": (
        "projects/parity-proj/locations/europe-west4/keyRings/ring/cryptoKeys/key"
    ),
    "max_wait_duration": "86400s",
}
# Two cases between them set every GCPC input (VPC peering and PSC-I are alternatives).
VALUE_CASES = {
    "vpc-peering": {
        **SHARED,
        "network": "projects/12345/global/networks/vpc",
        "reserved_ip_ranges": ["vertex-ai-ip-range"],
        "tensorboard": "projects/parity-proj/locations/europe-west4/tensorboards/1234",
        "enable_web_access": True,
        "persistent_resource_id": "training-cluster",
    },
    "psc-interface": {
        **SHARED,
        "psc_interface_config": {
            "network_attachment": "projects/parity-proj/regions/europe-west4/networkAttachments/a",
            "dns_peering_configs": [
                {"domain": "corp.example.", "target_project": "hub-proj", "target_network": "hub"}
            ],
        },
    },
}
SYSTEM_LABELS = {"vertex-ai-pipelines-run-billing-id": "7161234", "team": "platform"}
# What Vertex AI Pipelines fills GCPC's placeholders with for a PipelineJob in parity-proj,
# europe-west4, without a persistent resource.
VERTEX_PIPELINE = {
    _placeholders.PROJECT_ID_PLACEHOLDER: "parity-proj",
    _placeholders.LOCATION_PLACEHOLDER: "europe-west4",
    _placeholders.PERSISTENT_RESOURCE_ID_PLACEHOLDER: "",
}


def _gcpc_op_job(remote_runner, tmp_path, values: dict) -> tuple[str, CustomJob]:
    """(parent, CustomJob) that GCPC's CustomTrainingJobOp creates for ``values`` (as on Vertex)."""
    path = tmp_path / "op.yaml"
    compiler.Compiler().compile(CustomTrainingJobOp, str(path))
    spec = yaml.safe_load(path.read_text())
    (executor,) = spec["deploymentSpec"]["executors"].values()
    args = executor["container"]["args"]
    (component,) = spec["components"].values()
    params = component["inputDefinitions"]["parameters"]

    def value(name: str) -> str:  # what the KFP backend substitutes: text, or JSON
        given = values.get(name, params[name].get("defaultValue"))
        given = VERTEX_PIPELINE.get(given, given) if isinstance(given, str) else given
        return given if isinstance(given, str) else json.dumps(given)

    def substitute(text: str) -> str:
        return re.sub(
            r"\{\{\$\.inputs\.parameters\['(\w+)'\]\}\}", lambda m: value(m.group(1)), text
        )

    payload = remote_runner.insert_system_labels_into_payload(
        substitute(args[args.index("--payload") + 1])
    )
    job_spec = json_util.recursive_remove_empty(json.loads(payload, strict=False))
    project = substitute(args[args.index("--project") + 1])
    location = substitute(args[args.index("--location") + 1])
    parent = f"projects/{project}/locations/{location}"

    class Capture:
        def create_custom_job(self, parent, custom_job):
            message = CustomJob.pb(CustomJob())
            json_format.ParseDict(custom_job, message)
            self.job = CustomJob.wrap(message)
            return self.job

    capture = Capture()
    remote_runner.create_custom_job_with_client(capture, parent, job_spec)
    return parent, capture.job


def test_the_cases_set_every_gcpc_input_but_strategy(gcpc_parameters):
    covered = set().union(*VALUE_CASES.values())
    assert covered == set(gcpc_parameters) - set(GCPC_NOT_TAKEN)


@pytest.mark.parametrize("case", VALUE_CASES)
def test_the_same_values_make_the_same_job_as_gcpc(remote_runner, tmp_path, monkeypatch, case):
    values = VALUE_CASES[case]
    monkeypatch.setenv(pipeline_context.SYSTEM_LABELS_ENV, json.dumps(SYSTEM_LABELS))
    parent, gcpc = _gcpc_op_job(remote_runner, tmp_path, {**values, "strategy": "SPOT"})
    launcher = Launcher(
        build_request(
            **values,
            checkpoint=FakeArtifact(uri=str(tmp_path / "checkpoint")),
            gcp_resources=str(tmp_path / "gcp_resources"),
        )
    )
    ours = launcher.prepare()  # what goes to Vertex AI (the submission label is added on create)
    assert launcher.parent == parent
    assert launcher.endpoint.api_endpoint == f"{values['location']}-aiplatform.googleapis.com"
    expected = json_format.MessageToDict(CustomJob.pb(gcpc))
    actual = json_format.MessageToDict(CustomJob.pb(ours))
    assert _subset_mismatches(expected, actual) == []
    assert _subset_mismatches(actual, expected) == []  # and nothing GCPC would not send
    assert actual["labels"] == {**SYSTEM_LABELS, **values["labels"]}  # the user's labels win


# -- system labels ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env",
    [
        None,
        json.dumps(SYSTEM_LABELS),
        "{}",
        "not json",
        '{"vertex-ai-pipelines-run-billing-id": "1"}',
    ],
)
@pytest.mark.parametrize("user", [{}, {"team": "ml"}])
def test_system_labels_merge_as_gcpc_merges_them(monkeypatch, env, user):
    if env is None:
        monkeypatch.delenv(pipeline_context.SYSTEM_LABELS_ENV, raising=False)
    else:
        monkeypatch.setenv(pipeline_context.SYSTEM_LABELS_ENV, env)
    import os

    ours = pipeline_context.merge_system_labels(user, os.environ)
    assert ours == gcp_labels_util.attach_system_labels(dict(user))


@pytest.mark.parametrize("env", ["[1, 2]", "null", '"text"'])
def test_system_labels_that_are_not_an_object_are_ignored(env):
    """GCPC's launcher crashes on these (``list.update``); ours logs and carries on."""
    env_map = {pipeline_context.SYSTEM_LABELS_ENV: env}
    assert pipeline_context.merge_system_labels({"team": "ml"}, env_map) == {"team": "ml"}


def test_system_labels_reach_every_submitted_job(package, outputs, monkeypatch):
    monkeypatch.setenv(pipeline_context.SYSTEM_LABELS_ENV, json.dumps(SYSTEM_LABELS))
    with RecordingServer() as server:
        launch_spot_job(
            project="test-proj",
            package=package,
            labels={"team": "ml"},
            api_endpoint=server.endpoint,
            poll_interval_seconds=0.01,
            **outputs,
        )
    (body,) = server.created()
    labels = dict(body["labels"])
    assert labels.pop(SUBMISSION_LABEL) and labels.pop(OUTPUT_LABEL)
    assert labels == {**SYSTEM_LABELS, "team": "ml"}
