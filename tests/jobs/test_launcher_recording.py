"""The launcher against a real REST server (the GAPIC client over HTTP), outcome by outcome."""

from __future__ import annotations

import json

import pytest
import requests
from google.protobuf import json_format
from google_cloud_pipeline_components.proto.gcp_resources_pb2 import GcpResources
from recording_server import RecordingServer, Script

from kfp_spot import checkpoints
from kfp_spot.jobs import gcp_resources
from kfp_spot.jobs.entry import launch_spot_job
from kfp_spot.jobs.launcher import LaunchFailedError

QUEUED, RUNNING = "JOB_STATE_QUEUED", "JOB_STATE_RUNNING"
SUCCEEDED, FAILED = "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"
STOCKOUT = {"code": 8, "message": "STOCKOUT: preempted 7 times; restarts exhausted"}


def _launch(server, package, outputs, **extra):
    return launch_spot_job(
        project="proj",
        package=package,
        api_endpoint=server.endpoint,
        poll_interval_seconds=0.01,
        **outputs,
        **extra,
    )


def test_success_submits_one_spot_job_and_sets_outputs(package, outputs, task_dir):
    with RecordingServer() as server:
        outcome = _launch(server, package, outputs)
    assert outcome == "SUCCEEDED"
    (created,) = server.created()
    assert created["jobSpec"]["scheduling"]["strategy"] in (4, "SPOT")
    pool = created["jobSpec"]["workerPoolSpecs"][0]
    assert pool["pythonPackageSpec"]["packageUris"] == package.metadata["package_uris"]
    assert pool["pythonPackageSpec"]["pythonModule"] == "trainer.task"
    base = str(task_dir / "custom_job")
    assert created["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] == base
    assert outputs["checkpoint"].uri == f"{base}/checkpoints"
    assert outputs["model"].uri == f"{base}/model"
    assert outputs["job_report"].metadata["attempts"] == 1
    assert outputs["job_report"].metadata["preemptions"] == 0
    # gcp_resources parses with GCPC's own proto and names the job.
    with open(outputs["gcp_resources"]) as handle:
        resources = json_format.Parse(handle.read(), GcpResources())
    (resource,) = resources.resources
    assert resource.resource_type == "CustomJob"
    assert (
        resource.resource_uri
        == f"{server.endpoint}/v1/projects/proj/locations/us-central1/customJobs/1000"
    )
    with open(outputs["job_report"].path) as handle:
        report = json.load(handle)
    assert report["outcome"] == "SUCCEEDED"


def test_user_error_fails_at_once_with_the_jobs_message(package, outputs):
    message = "The replica workerpool0-0 exited with a non-zero status of 2."
    script = Script([QUEUED, RUNNING, FAILED], error={"code": 3, "message": message})
    with (
        RecordingServer(scripts=[script]) as server,
        pytest.raises(LaunchFailedError, match="exited with a non-zero status of 2") as info,
    ):
        _launch(server, package, outputs, max_resubmissions=5)
    assert info.value.outcome.value == "USER_ERROR"
    assert len(server.created()) == 1  # never resubmitted


def test_preempted_exhausted_resubmits_on_the_same_checkpoint_dir(package, outputs, task_dir):
    exhausted = Script([QUEUED, RUNNING, FAILED], error=STOCKOUT)
    ckpt = str(task_dir / "custom_job" / "checkpoints")

    def on_create(index, job):  # each job "trains" a step before its fate
        checkpoints.write_step(ckpt, 10 * (index + 1), {"w": b"x" * index})

    with RecordingServer(scripts=[exhausted, exhausted], on_create=on_create) as server:
        outcome = _launch(server, package, outputs, max_resubmissions=2)
    assert outcome == "SUCCEEDED"
    created = server.created()
    assert len(created) == 3
    prefixes = {c["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] for c in created}
    assert prefixes == {str(task_dir / "custom_job")}
    assert outputs["checkpoint"].metadata["latest_step"] == 30
    assert outputs["job_report"].metadata["resubmissions"] == 2


def test_budget_spent_fails_with_preempted_exhausted(package, outputs):
    exhausted = Script([RUNNING, FAILED], error=STOCKOUT)
    with (
        RecordingServer(scripts=[exhausted] * 3) as server,
        pytest.raises(LaunchFailedError) as info,
    ):
        _launch(server, package, outputs, max_resubmissions=1)
    assert info.value.outcome.value == "PREEMPTED_EXHAUSTED"
    assert len(server.created()) == 2


def test_incomplete_outcome_is_returned_when_asked(package, outputs):
    exhausted = Script([RUNNING, FAILED], error=STOCKOUT)
    with RecordingServer(scripts=[exhausted]) as server:
        outcome = _launch(server, package, outputs, max_resubmissions=0, fail_on_incomplete=False)
    assert outcome == "PREEMPTED_EXHAUSTED"
    assert outputs["checkpoint"].uri.endswith("/custom_job/checkpoints")


def test_fallback_after_one_exhausted_spot_job_submits_standard(package, outputs):
    exhausted = Script([RUNNING, FAILED], error=STOCKOUT)
    with RecordingServer(scripts=[exhausted]) as server:
        _launch(server, package, outputs, fallback_after=1)
    strategies = [c["jobSpec"]["scheduling"]["strategy"] for c in server.created()]
    assert strategies == [4, 3]  # SPOT, then STANDARD (the client sends enums as integers)


def test_capacity_at_creation_is_capacity_and_recovered(package, outputs):
    never_ran = Script([QUEUED, FAILED], error={"code": 8, "message": "STOCKOUT"}, started=False)
    with RecordingServer(scripts=[never_ran]) as server, pytest.raises(LaunchFailedError) as info:
        _launch(server, package, outputs, max_resubmissions=0)
    assert info.value.outcome.value == "CAPACITY"


def test_quota_refused_at_create_is_capacity(package, outputs):
    with RecordingServer(fail_next=[429]) as server, pytest.raises(LaunchFailedError) as info:
        _launch(server, package, outputs, max_resubmissions=0)
    assert info.value.outcome.value == "CAPACITY"


def test_cancelled_job_fails_the_launch(package, outputs):
    with (
        RecordingServer(scripts=[Script([RUNNING, "JOB_STATE_CANCELLED"])]) as server,
        pytest.raises(LaunchFailedError) as info,
    ):
        _launch(server, package, outputs)
    assert info.value.outcome.value == "CANCELLED"
    assert len(server.created()) == 1


def test_timeout(package, outputs):
    script = Script([RUNNING, FAILED], error={"code": 4, "message": "Job timed out."})
    with RecordingServer(scripts=[script]) as server, pytest.raises(LaunchFailedError) as info:
        _launch(server, package, outputs, timeout="60s")
    assert info.value.outcome.value == "TIMEOUT"
    assert server.created()[0]["jobSpec"]["scheduling"]["timeout"] == "60s"


def test_transient_errors_on_polling_are_retried(package, outputs):
    with RecordingServer() as server:

        def after_create(index, job):
            server.fail_next.extend([503, 503, 500])  # the first three polls fail

        server.on_create = after_create
        assert _launch(server, package, outputs) == "SUCCEEDED"
    assert len(server.created()) == 1


def test_reattaches_to_the_job_in_gcp_resources(package, outputs):
    with RecordingServer(scripts=[Script([RUNNING])]) as server:
        # A first launcher's job, recorded by it before it died.
        body = {
            "displayName": "earlier",
            "jobSpec": {
                "workerPoolSpecs": [
                    {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1"}
                ],
                "scheduling": {"strategy": "SPOT"},
            },
        }
        made = requests.post(
            f"{server.endpoint}/v1/projects/proj/locations/us-central1/customJobs", json=body
        ).json()
        server.jobs[made["name"]].script = Script([RUNNING, SUCCEEDED])
        gcp_resources.write(outputs["gcp_resources"], f"{server.endpoint}/v1/{made['name']}")
        assert _launch(server, package, outputs) == "SUCCEEDED"
    assert len(server.created()) == 1  # only the earlier one: no duplicate
