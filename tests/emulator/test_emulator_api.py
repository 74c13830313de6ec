"""The CustomJob REST surface through real clients: GAPIC JobServiceClient and plain JSON."""

from __future__ import annotations

import re

import pytest
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1
from google.cloud.aiplatform_v1.types import CustomJob, JobState, Scheduling

from kfp_spot.emulator.names import project_number

PARENT = "projects/demo-project/locations/us-central1"
# Vertex answers with the project number; requests may use the ID or the number.
NUMBERED = f"projects/{project_number('demo-project')}/locations/us-central1"


@pytest.fixture
def client(emulator):
    return aiplatform_v1.JobServiceClient(
        transport="rest",
        client_options=ClientOptions(api_endpoint=emulator.endpoint),
        credentials=AnonymousCredentials(),
    )


def test_gapic_create_get_list_cancel_delete(client, emulator, make_job, tmp_path, until, lines):
    progress = tmp_path / "progress.txt"
    body = make_job("--steps", "400", "--progress", str(progress))
    job = CustomJob.from_json(__import__("json").dumps(body))
    created = client.create_custom_job(parent=PARENT, custom_job=job)
    assert re.fullmatch(rf"{NUMBERED}/customJobs/\d+", created.name)
    assert created.display_name == "toy"
    assert created.state == JobState.JOB_STATE_QUEUED
    assert created.job_spec.scheduling.strategy == Scheduling.Strategy.SPOT

    until(lambda: any("step 0" in line for line in lines(progress)), 60, "the first step")
    got = until(
        lambda: (
            (j := client.get_custom_job(name=created.name)).state == JobState.JOB_STATE_RUNNING
            and j
        ),
        10,
        "RUNNING",
    )
    assert got.start_time and got.create_time <= got.start_time

    listed = list(client.list_custom_jobs(parent=PARENT))
    assert [j.name for j in listed] == [created.name]
    assert (
        list(client.list_custom_jobs(request={"parent": PARENT, "filter": 'display_name="x"'}))
        == []
    )
    running = client.list_custom_jobs(
        request={"parent": PARENT, "filter": 'state="JOB_STATE_RUNNING"'}
    )
    assert [j.name for j in running] == [created.name]

    with pytest.raises(exceptions.BadRequest, match="cancel"):
        client.delete_custom_job(name=created.name)

    client.cancel_custom_job(name=created.name)
    assert client.get_custom_job(name=created.name).state in (
        JobState.JOB_STATE_CANCELLING,
        JobState.JOB_STATE_CANCELLED,
    )
    done = emulator.wait(created.name, timeout=30)
    assert done.state == JobState.JOB_STATE_CANCELLED
    assert done.end_time >= done.start_time
    assert any("sigterm" in line for line in lines(progress))  # stopped gracefully

    client.delete_custom_job(name=created.name).result(timeout=10)
    with pytest.raises(exceptions.NotFound):
        client.get_custom_job(name=created.name)
    assert list(client.list_custom_jobs(parent=PARENT)) == []


def test_spot_strategy_is_stored_as_spot_for_every_spelling(emulator, make_job, api):
    url = f"{emulator.endpoint}/v1/{PARENT}/customJobs"
    for spelling in ("SPOT", 4):
        body = make_job("--steps", "1", strategy=spelling)
        body["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] = "1"  # int64 as a string
        status, created = api("POST", url, body)
        assert status == 200, created
        stored = emulator.job(created["name"])  # what the emulator keeps, not what we sent
        assert stored.job_spec.scheduling.strategy == Scheduling.Strategy.SPOT
        assert created["jobSpec"]["scheduling"]["strategy"] == "SPOT"


def test_the_documented_rest_body(emulator, api, toy_package, tmp_path):
    """The request.json of Vertex AI's *Use Spot VMs with training* page, as curl would post it."""
    body = {
        "displayName": "JOB_NAME",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "replicaCount": 1,
                    "pythonPackageSpec": {
                        "executorImageUri": (
                            "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310"
                        ),
                        "packageUris": [toy_package],
                        "pythonModule": "toytrain.task",
                        "args": ["--steps", "2"],
                    },
                }
            ],
            "scheduling": {"strategy": "SPOT"},
        },
    }
    status, job = api("POST", f"{emulator.endpoint}/v1/{PARENT}/customJobs", body)
    assert status == 200, job
    assert job["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == "1"
    done = emulator.wait(job["name"], timeout=60)
    assert done.state == JobState.JOB_STATE_SUCCEEDED, done.error
    status, got = api("GET", f"{emulator.endpoint}/v1/{job['name']}")
    assert got["state"] == "JOB_STATE_SUCCEEDED"
    assert {"createTime", "startTime", "endTime", "updateTime"} <= got.keys()


def test_unknown_job_and_path_are_google_errors(emulator, api):
    status, err = api("GET", f"{emulator.endpoint}/v1/{PARENT}/customJobs/123")
    assert status == 404 and err["error"]["status"] == "NOT_FOUND"
    status, err = api("GET", f"{emulator.endpoint}/v1/nothing/here")
    assert status == 404 and err["error"]["code"] == 404
    status, err = api("POST", f"{emulator.endpoint}/v1/{PARENT}/customJobs/123:cancel", {})
    assert status == 404


def test_list_pages(client, emulator, make_job, api):
    url = f"{emulator.endpoint}/v1/{PARENT}/customJobs"
    names = set()
    for i in range(5):
        status, job = api("POST", url, make_job("--steps", "1", display_name=f"job-{i}"))
        assert status == 200
        names.add(job["name"])
    status, page = api("GET", f"{url}?pageSize=2")
    assert len(page["customJobs"]) == 2 and page["nextPageToken"]
    pager = client.list_custom_jobs(request={"parent": PARENT, "page_size": 2})
    assert {j.name for j in pager} == names
    status, err = api("GET", f"{url}?pageToken=bogus!")
    assert status == 400 and "pageToken" in err["error"]["message"]
    status, err = api("GET", f"{url}?filter=colour%3D%22red%22")
    assert status == 400 and "colour" in err["error"]["message"]


def test_one_state_dir_serves_one_emulator(emulator, env_cache):
    from kfp_spot.emulator import Emulator, EmulatorError

    with pytest.raises(EmulatorError, match="another emulator is using the state dir"):
        Emulator(emulator.state_dir, env_cache_dir=env_cache).start()
    assert emulator.list_jobs() == []  # the running one is unharmed


def test_bad_emulator_arguments_name_the_argument(tmp_path):
    from kfp_spot.emulator import Emulator, EmulatorError

    for kwargs, fragment in [
        ({"grace_period": -1}, "grace_period"),
        ({"preempt_at": [1, "x"]}, "preempt_at[1]"),
        ({"preempt_every": 0}, "preempt_every"),
        ({"capacity": 0}, "capacity"),
        ({"capacity": {"n1-standard-4": -2}}, "capacity['n1-standard-4']"),
        ({"port": 70000}, "port"),
        ({"seed": "abc"}, "seed"),
    ]:
        with pytest.raises(EmulatorError, match=re.escape(fragment)):
            Emulator(tmp_path, **kwargs)


def test_too_many_replicas_is_refused(emulator, make_job, api):
    status, err = api(
        "POST", f"{emulator.endpoint}/v1/{PARENT}/customJobs", make_job(replicas=(1, 64))
    )
    assert status == 400 and "at most 64" in err["error"]["message"]
