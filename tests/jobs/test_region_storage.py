"""Each region's base output directory and endpoint (worked out before any submit); its wait."""

from __future__ import annotations

import datetime as dt

import pytest
from artifacts import FakeArtifact
from google.cloud.aiplatform_v1.types import CustomJob, JobState, Scheduling

from kfp_spot.jobs.entry import build_request
from kfp_spot.jobs.inputs import LaunchInputError
from kfp_spot.jobs.launcher import Launcher
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.jobs.recovery import LaunchState
from kfp_spot.jobs.regions import region_bases

US, EU = "us-central1", "europe-west4"


def _located(location, places=()):
    return lambda _uri: (location, tuple(places))


def test_a_bucket_that_serves_every_region_is_every_regions_base():
    assert region_bases("gs://b/run/job", [US, "us-east1"], {}, _located("US")) == {
        US: "gs://b/run/job",
        "us-east1": "gs://b/run/job",
    }
    assert region_bases("/tmp/run", [US, EU], {}, _located("LOCAL")) == {
        US: "/tmp/run",
        EU: "/tmp/run",
    }


def test_a_region_the_bucket_does_not_serve_gets_its_region_bucket_with_the_runs_path():
    bases = region_bases("gs://b/run/job", [US, EU], {EU: "gs://eu/copies"}, _located("US"))
    assert bases == {US: "gs://b/run/job", EU: "gs://eu/copies/run/job"}


def test_a_dual_regions_data_locations_decide():
    located = _located("US", ["US-CENTRAL1", "US-EAST1"])
    with pytest.raises(LaunchInputError) as info:
        region_bases("gs://b/job", [US, "us-east4"], {}, located)
    assert info.value.field == "region_buckets"
    assert "US (US-CENTRAL1, US-EAST1)" in str(info.value) and "us-east4" in str(info.value)


def test_without_region_buckets_the_error_says_what_to_set():
    with pytest.raises(LaunchInputError) as info:
        region_bases("gs://b/job", [US, EU], {}, _located("US-CENTRAL1"))
    message = str(info.value)
    assert "gs://b" in message and "US-CENTRAL1" in message and EU in message
    assert f'region_buckets={{"{EU}"' in message


def test_one_vertex_endpoint_cannot_serve_several_regions(tmp_path):
    inputs = {
        "project": "test-proj",
        "location": US,
        "regions": [US, EU],
        "container_image_uri": "us-docker.pkg.dev/p/r/i:1",
        "api_endpoint": f"{US}-aiplatform.googleapis.com",
        "base_output_directory": "gs://bucket/run",
        "checkpoint": FakeArtifact(uri=str(tmp_path / "checkpoint")),
        "gcp_resources": str(tmp_path / "gcp_resources"),
    }
    with pytest.raises(LaunchInputError) as info:
        Launcher(build_request(**inputs)).prepare()  # nothing is contacted
    assert info.value.field == "api_endpoint" and EU in str(info.value)


def test_on_vertex_each_region_has_its_own_endpoint_service_and_parent(tmp_path):
    inputs = {
        "project": "test-proj",
        "location": US,
        "regions": [US, EU],
        "container_image_uri": "us-docker.pkg.dev/p/r/i:1",
        "base_output_directory": "gs://bucket/run",
        "region_buckets": {EU: "gs://eu-bucket"},
        "checkpoint": FakeArtifact(uri=str(tmp_path / "checkpoint")),
        "gcp_resources": str(tmp_path / "gcp_resources"),
    }
    launcher = Launcher(build_request(**inputs))  # no client is made until a call
    europe = launcher.sites.get(EU)
    assert europe.parent == f"projects/test-proj/locations/{EU}"
    assert europe.endpoint.api_endpoint == f"{EU}-aiplatform.googleapis.com"
    assert europe.service.endpoint == europe.endpoint == europe.backend.endpoint
    assert launcher.sites.get(US).endpoint.api_endpoint == f"{US}-aiplatform.googleapis.com"
    name = f"projects/test-proj/locations/{EU}/customJobs/7"
    assert launcher.sites.of_job(name) is europe  # made once, kept
    assert launcher.sites.of_job(name).endpoint.resource_uri(name) == (
        f"https://{EU}-aiplatform.googleapis.com/v1/{name}"
    )


def _watching(tmp_path, now, submitted_at):
    """A launcher over two regions with region_wait_seconds=60, watching a Spot job (no calls)."""
    inputs = {
        "project": "test-proj",
        "location": US,
        "regions": [US, EU],
        "region_wait_seconds": 60,
        "container_image_uri": "us-docker.pkg.dev/p/r/i:1",
        "api_endpoint": "http://127.0.0.1:9",  # the emulator's form; nothing is contacted
        "checkpoint": FakeArtifact(uri=str(tmp_path / "checkpoint")),
        "gcp_resources": str(tmp_path / "gcp_resources"),
    }
    launcher = Launcher(build_request(**inputs), clock=lambda: now[0])
    launcher.state = LaunchState("run", started_at=submitted_at)
    launcher._created_at = submitted_at  # what run() sets when it starts watching the job
    return launcher


def _spot_job(state, *, ran):
    job = CustomJob(name=f"projects/test-proj/locations/{US}/customJobs/1", state=state)
    job.job_spec.scheduling.strategy = Scheduling.Strategy.SPOT
    if ran:
        job.start_time = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    return job


def test_a_reattached_launcher_does_not_give_up_a_job_that_ran_for_its_age(tmp_path):
    # The job was submitted 10,000 s ago and ran; a restarted launcher finds it PENDING (restarting
    # after a preemption). When it stopped running is not known: its wait counts from now, not
    # from its create, or a job that ran until a moment ago would be cancelled at the first poll.
    now = [10_000.0]
    launcher = _watching(tmp_path, now, submitted_at=0.0)
    pending = _spot_job(JobState.JOB_STATE_PENDING, ran=True)
    assert not launcher._stop_waiting(pending)
    now[0] += 59
    assert not launcher._stop_waiting(pending)
    now[0] += 1
    assert launcher._stop_waiting(pending)  # 60 s without running since it was first seen
    assert "region_wait_seconds=60" in launcher._leaving.message


def test_a_job_that_never_ran_has_waited_since_its_create(tmp_path):
    now = [60.0]
    launcher = _watching(tmp_path, now, submitted_at=0.0)
    assert launcher._stop_waiting(_spot_job(JobState.JOB_STATE_PENDING, ran=False))
    assert launcher._leaving.outcome is Outcome.CAPACITY


def test_a_job_seen_running_waits_from_its_last_running_poll(tmp_path):
    now = [100.0]
    launcher = _watching(tmp_path, now, submitted_at=0.0)
    assert not launcher._stop_waiting(_spot_job(JobState.JOB_STATE_RUNNING, ran=True))
    now[0] = 159.0
    pending = _spot_job(JobState.JOB_STATE_PENDING, ran=True)
    assert not launcher._stop_waiting(pending)
    now[0] = 160.0
    assert launcher._stop_waiting(pending)
