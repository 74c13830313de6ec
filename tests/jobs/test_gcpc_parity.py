"""For the same inputs, our CustomJob matches GCPC's create_custom_training_job_from_component(...,
strategy="SPOT") payload field for field (where GCPC has the field)."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from google.cloud.aiplatform_v1.types import CustomJob
from google.protobuf import json_format
from google_cloud_pipeline_components.container.v1.custom_job import remote_runner
from google_cloud_pipeline_components.container.v1.gcp_launcher.utils import json_util
from google_cloud_pipeline_components.v1.custom_job import create_custom_training_job_from_component
from kfp import compiler, dsl
from recording_server import RecordingServer

from kfp_spot.jobs.entry import launch_spot_job

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


def _gcpc_job(tmp_path, **options) -> CustomJob:
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
def test_spot_job_matches_gcpc(tmp_path, options, outputs):
    base = str(tmp_path / "out")  # a local base: the launcher reads checkpoints there
    gcpc = _gcpc_job(
        tmp_path, display_name="kfp-spot-training", base_output_directory=base, **options
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
    # And nothing GCPC leaves out, but our submission label.
    assert set(actual["labels"]) - set(expected.get("labels", {})) == {"kfp_spot_submission"}
