"""The launcher against a real REST server (the GAPIC client over HTTP), outcome by outcome."""

from __future__ import annotations

import json
import uuid

import pytest
import requests
from artifacts import FakeArtifact
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
        project="test-proj",
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
    # No ledger and no attempt records (as on Vertex with a trainer that keeps none): the job's
    # own timestamps cannot tell how often the service restarted it, so no count is made up.
    assert "preemptions" not in outputs["job_report"].metadata
    # gcp_resources parses with GCPC's own proto and names the job.
    with open(outputs["gcp_resources"]) as handle:
        resources = json_format.Parse(handle.read(), GcpResources())
    (resource,) = resources.resources
    assert resource.resource_type == "CustomJob"
    assert (
        resource.resource_uri
        == f"{server.endpoint}/v1/projects/test-proj/locations/us-central1/customJobs/1000"
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
    with (
        RecordingServer(fail_next_creates=[429]) as server,
        pytest.raises(LaunchFailedError) as info,
    ):
        _launch(server, package, outputs, max_resubmissions=0)
    assert info.value.outcome.value == "CAPACITY"


def test_a_create_refused_for_quota_is_made_again_only_after_a_wait(package, outputs, caplog):
    """A 429 on create is not resubmitted at once (the same quota would refuse it a second
    later): the launcher waits, longer after each refusal in a row, and says why."""
    import logging

    from kfp_spot.jobs.entry import build_request
    from kfp_spot.jobs.launcher import Launcher

    slept: list[float] = []
    caplog.set_level(logging.INFO, logger="kfp_spot.jobs.launcher")
    with RecordingServer(fail_next_creates=[429, 429]) as server:
        request = build_request(
            project="test-proj",
            package=package,
            api_endpoint=server.endpoint,
            poll_interval_seconds=0.01,
            max_resubmissions=2,
            **outputs,
        )
        launcher = Launcher(request, sleep=slept.append, draw=lambda: 0.0)
        assert launcher.run().outcome.value == "SUCCEEDED"
        assert len(server.created()) == 3  # two refused, the third made
    first, second = (
        launcher.backend.quota_backoff.step(1, 0.0),
        launcher.backend.quota_backoff.step(2, 0.0),
    )
    assert len(slept) == 2
    assert first - 1.0 < slept[0] <= first and second - 1.0 < slept[1] <= second
    lines = [r.getMessage() for r in caplog.records if r.message.startswith("waiting ")]
    assert len(lines) == 2
    assert "quota refused the last create there (" in lines[0] and "injected)" in lines[0]
    assert "quota refused the last 2 creates there" in lines[1]


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


def _job_of_an_earlier_launcher(server, script: Script) -> str:
    body = {
        "displayName": "earlier",
        "labels": {"kfp_spot_submission": uuid.uuid4().hex},
        "jobSpec": {
            "workerPoolSpecs": [
                {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1"}
            ],
            "scheduling": {"strategy": "SPOT"},
        },
    }
    made = requests.post(
        f"{server.endpoint}/v1/projects/test-proj/locations/us-central1/customJobs", json=body
    ).json()
    server.jobs[made["name"]].script = script
    return made["name"]


def test_reattaches_to_the_job_in_gcp_resources(package, outputs):
    with RecordingServer(scripts=[Script([RUNNING])]) as server:
        # A first launcher's job, recorded by it before it died.
        earlier = _job_of_an_earlier_launcher(server, Script([RUNNING, SUCCEEDED]))
        gcp_resources.write(outputs["gcp_resources"], [f"{server.endpoint}/v1/{earlier}"])
        assert _launch(server, package, outputs) == "SUCCEEDED"
    assert len(server.created()) == 1  # only the earlier one: no duplicate


@pytest.mark.parametrize("refuse_filters", [False, True])
def test_a_lost_create_response_does_not_make_a_duplicate(package, outputs, refuse_filters):
    with RecordingServer(lose_create_responses=1, refuse_filters=refuse_filters) as server:
        assert _launch(server, package, outputs) == "SUCCEEDED"
    assert len(server.jobs) == 1
    # The retry found the job by its submission label (listing everything when the service
    # refuses the label filter).
    assert len(server.created()) == 1


def test_an_unreachable_service_fails_with_a_clear_error(package, outputs):
    import dataclasses

    from kfp_spot.jobs.backend import backend_for
    from kfp_spot.jobs.entry import build_request
    from kfp_spot.jobs.launcher import Launcher
    from kfp_spot.jobs.service import RetryBudget, ServiceUnreachableError

    with RecordingServer(fail_next=[503] * 50) as server:
        request = build_request(
            project="test-proj", package=package, api_endpoint=server.endpoint, **outputs
        )
        launcher = Launcher(request)
        # The emulator's own budget rides out a restart (20 s); a short one keeps this test quick.
        short = dataclasses.replace(launcher.backend, retry=RetryBudget(8, 5.0, 0.01, 0.05))
        with pytest.raises(ServiceUnreachableError, match="failed 8 times") as info:
            Launcher(request, backend=short).run()
    assert server.endpoint in str(info.value)
    assert backend_for(launcher.endpoint).retry.max_seconds >= 20.0


def test_past_the_deadline_a_queued_spot_job_is_cancelled_for_standard(package, outputs):
    never_scheduled = Script([QUEUED])  # no Spot capacity, ever
    with RecordingServer(scripts=[never_scheduled]) as server:
        assert _launch(server, package, outputs, deadline_seconds=0.2) == "SUCCEEDED"
    strategies = [c["jobSpec"]["scheduling"]["strategy"] for c in server.created()]
    assert strategies == [4, 3]
    assert len(server.cancels()) == 1
    assert outputs["job_report"].metadata["resubmissions"] == 1


def test_resume_from_seeds_the_checkpoint_dir_and_tells_the_job(package, outputs, tmp_path):
    previous = str(tmp_path / "previous" / "checkpoints")
    checkpoints.write_step(previous, 5, {"w": b"old"})
    checkpoints.write_step(previous, 40, {"w": b"weights"})
    resume = FakeArtifact(uri=previous, metadata={"latest_step": 40})
    with RecordingServer() as server:
        _launch(server, package, outputs, resume_from=resume)
    (body,) = server.created()
    env = body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["env"]
    assert {"name": "KFP_SPOT_RESUME_FROM", "value": previous} in env
    ours = outputs["checkpoint"].uri
    manifest = checkpoints.verify(ours, 40)
    assert manifest.step == 40
    assert checkpoints.list_steps(ours) == [40]
    assert outputs["checkpoint"].metadata["latest_step"] == 40
    assert outputs["checkpoint"].metadata["resumed_from_step"] == 40


def test_resume_from_a_torn_checkpoint_is_refused_before_submitting(package, outputs, tmp_path):
    from kfp_spot.jobs.inputs import LaunchInputError

    previous = tmp_path / "previous"
    (previous / "step-3").mkdir(parents=True)
    (previous / "step-3" / "w").write_bytes(b"half")  # no manifest: never committed
    with RecordingServer() as server, pytest.raises(LaunchInputError, match="resume_from"):
        _launch(server, package, outputs, resume_from=FakeArtifact(uri=str(previous)))
    assert server.created() == []


def test_report_uses_the_emulator_ledger(package, outputs):
    name = "projects/test-proj/locations/us-central1/customJobs/1000"
    rows = [
        {
            "attempt": 1,
            "startTime": "2026-01-01T00:00:00Z",
            "endTime": "2026-01-01T00:01:40Z",
            "endReason": "PREEMPTED",
            "billableSeconds": 100.0,
            "strategy": "SPOT",
            "spotCost": 0.01,
            "onDemandCost": 0.05,
        },
        {
            "attempt": 2,
            "startTime": "2026-01-01T00:02:00Z",
            "endTime": "2026-01-01T00:05:20Z",
            "endReason": "SUCCEEDED",
            "billableSeconds": 200.0,
            "strategy": "SPOT",
            "spotCost": 0.02,
            "onDemandCost": 0.10,
        },
    ]
    with RecordingServer(ledger={name: rows}) as server:
        _launch(server, package, outputs)
    metrics = outputs["job_report"].metadata
    assert metrics["attempts"] == 2
    assert metrics["preemptions"] == 1
    assert metrics["billable_seconds"] == 300.0
    assert metrics["cost_spot_usd"] == pytest.approx(0.03)
    assert metrics["cost_on_demand_usd"] == pytest.approx(0.15)
    assert metrics["savings_usd"] == pytest.approx(0.12)
    # No checkpoint and no attempt record: what the preempted attempt lost is unknown, not 100 s.
    assert "work_lost_seconds" not in metrics and "goodput" not in metrics


def test_a_launcher_killed_between_create_and_recording_finds_its_job(package, outputs, task_dir):
    """The state file names a submission token but no job: the job is found by its label."""
    from kfp_spot.jobs.entry import build_request
    from kfp_spot.jobs.recovery import LaunchState, Submission, save_state, state_uri
    from kfp_spot.jobs.strategy import Strategy

    with RecordingServer(scripts=[Script([RUNNING, SUCCEEDED])]) as server:
        request = build_request(
            project="test-proj", package=package, api_endpoint=server.endpoint, **outputs
        )
        # What the first launcher left: its create went through, then it died.
        body = {
            "displayName": "kfp-spot-training",
            "labels": {"kfp_spot_submission": "tok123"},
            "jobSpec": {"workerPoolSpecs": [], "scheduling": {"strategy": "SPOT"}},
        }
        requests.post(
            f"{server.endpoint}/v1/projects/test-proj/locations/us-central1/customJobs", json=body
        )
        state = LaunchState(request.run_key, 0.0, [Submission("tok123", Strategy.SPOT)])
        save_state(state_uri(request.base_output_directory, request.run_key), state)
        assert _launch(server, package, outputs) == "SUCCEEDED"
    assert len(server.created()) == 1


def test_kfp_style_values_are_accepted_and_bad_ones_named(package, outputs):
    from kfp_spot.jobs.entry import build_request
    from kfp_spot.jobs.inputs import LaunchInputError

    # kfp.local hands integers back as floats, and lists/dicts may arrive as JSON text.
    request = build_request(
        project="test-proj",
        location="us-central1",
        package=package,
        accelerator_count=2.0,
        accelerator_type="NVIDIA_TESLA_T4",
        args='["--epochs", "3"]',
        max_resubmissions=3.0,
        **outputs,
    )
    assert request.inputs.accelerator_count == 2
    assert list(request.inputs.args) == ["--epochs", "3"]
    assert request.policy.max_resubmissions == 3
    for bad, field in (
        ({"max_resubmissions": 1.5}, "max_resubmissions"),
        ({"env": "[1, 2]"}, "env"),
        ({"poll_interval_seconds": "soon"}, "poll_interval_seconds"),
    ):
        with pytest.raises(LaunchInputError) as info:
            build_request(
                project="test-proj", location="us-central1", package=package, **bad, **outputs
            )
        assert info.value.field == field


def test_default_base_directory_sits_next_to_the_task_outputs():
    from kfp_spot.jobs.entry import default_base_directory

    assert (
        default_base_directory("gs://b/root/run-1/task-7/checkpoint")
        == "gs://b/root/run-1/task-7/custom_job"
    )
    assert default_base_directory("/tmp/root/task/checkpoint") == "/tmp/root/task/custom_job"


def test_the_services_rules_are_checked_before_submitting(package, outputs):
    from kfp_spot.jobs.inputs import LaunchInputError

    with RecordingServer() as server, pytest.raises(LaunchInputError, match="TPU Pod"):
        _launch(
            server,
            package,
            outputs,
            machine_type="cloud-tpu",
            accelerator_type="TPU_V4_POD",
            accelerator_count=4,
        )
    assert server.created() == []


def test_a_machine_type_missing_from_our_table_is_left_to_the_service(package, tmp_path):
    """Only the table's gap is waived (on every backend): the job is built and validated."""
    from kfp_spot.jobs.entry import build_request
    from kfp_spot.jobs.launcher import Launcher

    request = build_request(
        project="test-proj",
        location="us-central1",
        package=package,
        machine_type="a4-highgpu-8g",  # newer than the table
        base_output_directory="gs://bucket/run",
        checkpoint=FakeArtifact(uri=str(tmp_path / "checkpoint")),
        gcp_resources=str(tmp_path / "gcp_resources"),
    )
    job = Launcher(request).prepare()  # no api_endpoint: Vertex AI (nothing is contacted)
    assert job.job_spec.worker_pool_specs[0].machine_spec.machine_type == "a4-highgpu-8g"


def _listed(outputs) -> list[str]:
    with open(outputs["gcp_resources"]) as handle:
        resources = json_format.Parse(handle.read(), GcpResources())  # GCPC's own parser
    assert {r.resource_type for r in resources.resources} == {"CustomJob"}
    return [r.resource_uri for r in resources.resources]


def test_gcp_resources_lists_every_job_of_the_launch(package, outputs):
    exhausted = Script([RUNNING, FAILED], error=STOCKOUT)
    listed_at_create = []
    with RecordingServer(scripts=[exhausted, exhausted]) as server:
        # When each job is created, the file already lists every earlier one.
        server.on_create = lambda index, job: listed_at_create.append(
            gcp_resources.read_job_names(outputs["gcp_resources"])
        )
        _launch(server, package, outputs, max_resubmissions=2)
        names = list(server.jobs)
    assert len(names) == 3
    assert listed_at_create == [[], names[:1], names[:2]]
    assert _listed(outputs) == [f"{server.endpoint}/v1/{n}" for n in names]


def test_reattach_counts_the_ended_jobs_and_watches_the_last_unfinished(package, outputs):
    """The state file is lost; gcp_resources lists an exhausted job and the running one."""
    with RecordingServer() as server:
        ended = _job_of_an_earlier_launcher(server, Script([FAILED], error=STOCKOUT))
        running = _job_of_an_earlier_launcher(server, Script([RUNNING, SUCCEEDED]))
        uris = [f"{server.endpoint}/v1/{n}" for n in (ended, running)]
        gcp_resources.write(outputs["gcp_resources"], uris)
        assert _launch(server, package, outputs, max_resubmissions=1) == "SUCCEEDED"
        assert len(server.created()) == 2  # the two earlier ones: nothing new
        assert server.cancels() == []
    assert outputs["job_report"].metadata["resubmissions"] == 1  # the ended job counted
    assert _listed(outputs) == uris


def test_reattach_cancels_an_unfinished_job_a_later_one_superseded(package, outputs):
    with RecordingServer() as server:
        older = _job_of_an_earlier_launcher(server, Script([RUNNING]))
        newer = _job_of_an_earlier_launcher(server, Script([RUNNING, SUCCEEDED]))
        gcp_resources.write(
            outputs["gcp_resources"], [f"{server.endpoint}/v1/{n}" for n in (older, newer)]
        )
        assert _launch(server, package, outputs) == "SUCCEEDED"
        assert server.cancels() == [f"/v1/{older}:cancel"]  # one job at a time per directory
        assert len(server.created()) == 2


def test_a_base_directory_used_before_says_the_job_resumes_from_its_step(
    package, outputs, task_dir, caplog
):
    """Reusing a base_output_directory resumes its newest step, as on Vertex AI; the launch now
    says so, naming the step and the directory, so a user who meant a fresh run sees why."""
    import logging

    ckpt = str(task_dir / "custom_job" / "checkpoints")
    checkpoints.write_step(ckpt, 7, {"w": b"x"})
    caplog.set_level(logging.INFO, logger="kfp_spot.jobs.launcher")
    with RecordingServer() as server:
        assert _launch(server, package, outputs) == "SUCCEEDED"
    lines = [r.getMessage() for r in caplog.records if r.name == "kfp_spot.jobs.launcher"]
    assert (
        f"resuming from step 7, already committed in {ckpt}: this base_output_directory was used "
        "before (give a new one for a fresh run)"
    ) in lines, lines


def test_a_fresh_base_directory_says_nothing_of_resuming(package, outputs, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="kfp_spot.jobs.launcher")
    with RecordingServer() as server:
        assert _launch(server, package, outputs) == "SUCCEEDED"
    assert "resuming from step" not in caplog.text
