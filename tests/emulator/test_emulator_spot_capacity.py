"""A region without Spot capacity, answered as Vertex AI answers (for the launcher's failover).

Driven through the real GAPIC ``JobServiceClient`` (REST transport); outcomes are read with the
launcher's own classification (``kfp_spot.jobs.outcome``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1
from google.cloud.aiplatform_v1.types import CustomJob, JobState

from kfp_spot.cli import main
from kfp_spot.emulator import Emulator, EmulatorError
from kfp_spot.jobs.outcome import Outcome, classify, classify_create_error

US = "projects/local-project/locations/us-central1"
EU = "projects/local-project/locations/europe-west4"
STOCKOUT_WORDS = "Resources are insufficient in region: us-central1. Please try a different region."


@pytest.fixture
def spot_emulator(tmp_path: Path, env_cache: Path) -> Callable[..., Emulator]:
    """Start an emulator with a short grace period and the given stockout wait."""
    started: list[Emulator] = []

    def start(stockout_seconds: float = 1.0) -> Emulator:
        emu = Emulator(
            tmp_path / f"state{len(started)}",
            grace_period=1.0,
            env_cache_dir=env_cache,
            stockout_seconds=stockout_seconds,
        ).start()
        started.append(emu)
        return emu

    yield start
    for emu in started:
        emu.stop()


def client(emu: Emulator) -> Any:
    return aiplatform_v1.JobServiceClient(
        transport="rest",
        client_options=ClientOptions(api_endpoint=emu.endpoint),
        credentials=AnonymousCredentials(),
    )


def create(gapic: Any, body: dict[str, Any], parent: str = US) -> CustomJob:
    return gapic.create_custom_job(parent=parent, custom_job=CustomJob.from_json(json.dumps(body)))


def state_of(gapic: Any, name: str) -> JobState:
    return gapic.get_custom_job(name=name).state


def test_quota_refuses_the_spot_create_with_vertex_429(spot_emulator, make_job):
    emu = spot_emulator()
    gapic = client(emu)
    emu.set_spot_capacity("us-central1", available=False, refusal="QUOTA")
    with pytest.raises(exceptions.TooManyRequests) as caught:
        create(gapic, make_job("--steps", "1"))
    error = caught.value.response.json()["error"]
    assert (error["code"], error["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert error["message"] == (
        "The following quota metrics exceed quota limits: "
        "aiplatform.googleapis.com/custom_model_training_preemptible_cpus"
    )
    assert caught.value.message.endswith(error["message"])
    assert classify_create_error(caught.value).outcome is Outcome.CAPACITY
    assert emu.list_jobs() == []  # nothing was created
    # STANDARD jobs and other regions are not affected
    standard = create(gapic, make_job("--steps", "1", strategy="STANDARD"))
    elsewhere = create(gapic, make_job("--steps", "1"), parent=EU)
    for job in (standard, elsewhere):
        assert emu.wait(job.name, timeout=60).state.name == "JOB_STATE_SUCCEEDED"


def test_stockout_waits_pending_then_fails_code_8_and_other_regions_run(
    spot_emulator, make_job, until
):
    emu = spot_emulator(stockout_seconds=3.0)
    gapic = client(emu)
    emu.set_spot_capacity("us-central1", available=False)
    stuck = create(gapic, make_job("--steps", "1"))  # the create is accepted ...
    assert stuck.state == JobState.JOB_STATE_QUEUED
    runs = create(gapic, make_job("--steps", "1"), parent=EU)
    until(lambda: state_of(gapic, stuck.name) == JobState.JOB_STATE_PENDING, 10, "PENDING")
    assert emu.attempts(stuck.name) == []  # ... and waits without VMs (nothing billed)

    done = emu.wait(stuck.name, timeout=30)
    assert done.state.name == "JOB_STATE_FAILED"
    assert (done.error.code, done.error.message) == (8, STOCKOUT_WORDS)
    assert not done.start_time
    assert classify(done).outcome is Outcome.CAPACITY
    assert emu.attempts(stuck.name) == []
    assert emu.wait(runs.name, timeout=60).state.name == "JOB_STATE_SUCCEEDED"

    # the same project in two locations: names, get and list are location-scoped
    stuck_id = stuck.name.rsplit("/", 1)[1]
    assert "/locations/us-central1/" in stuck.name and "/locations/europe-west4/" in runs.name
    with pytest.raises(exceptions.NotFound):
        gapic.get_custom_job(name=f"{EU}/customJobs/{stuck_id}")
    assert [j.name for j in gapic.list_custom_jobs(parent=EU)] == [runs.name]
    assert [j.name for j in gapic.list_custom_jobs(parent=US)] == [stuck.name]


def test_capacity_back_within_the_wait_starts_the_job(spot_emulator, make_job, until):
    emu = spot_emulator(stockout_seconds=60)
    gapic = client(emu)
    emu.set_spot_capacity("us-central1", "n1-standard-4", available=False)
    timed = create(gapic, make_job("--steps", "1"))
    until(lambda: state_of(gapic, timed.name) == JobState.JOB_STATE_PENDING, 10, "PENDING")
    # replaced by a timed setting: when it ends, the region has Spot capacity again
    emu.set_spot_capacity("us-central1", "n1-standard-4", available=False, seconds=0.5)
    done = emu.wait(timed.name, timeout=60)
    assert done.state.name == "JOB_STATE_SUCCEEDED", done.error
    (attempt,) = emu.attempts(timed.name)
    assert attempt["queuedSeconds"] >= 0.5  # the wait for capacity, not billed
    assert attempt["billableSeconds"] < done.end_time.timestamp() - done.create_time.timestamp()

    emu.set_spot_capacity("us-central1", available=False)
    told = create(gapic, make_job("--steps", "1"))
    until(lambda: state_of(gapic, told.name) == JobState.JOB_STATE_PENDING, 10, "PENDING")
    emu.set_spot_capacity("us-central1", available=True)
    assert emu.wait(told.name, timeout=60).state.name == "JOB_STATE_SUCCEEDED"


def test_a_job_waiting_for_capacity_can_be_cancelled(spot_emulator, make_job, until):
    emu = spot_emulator(stockout_seconds=60)
    gapic = client(emu)
    emu.set_spot_capacity("us-central1", available=False)
    job = create(gapic, make_job("--steps", "1"))
    until(lambda: state_of(gapic, job.name) == JobState.JOB_STATE_PENDING, 10, "PENDING")
    gapic.cancel_custom_job(name=job.name)
    done = emu.wait(job.name, timeout=10)
    assert done.state.name == "JOB_STATE_CANCELLED" and emu.attempts(job.name) == []


def test_a_running_job_that_loses_capacity_is_preempted_then_fails(
    spot_emulator, make_job, tmp_path, until, lines
):
    emu = spot_emulator(stockout_seconds=1.0)
    gapic = client(emu)
    progress = tmp_path / "progress.txt"
    job = create(gapic, make_job("--steps", "1000", "--progress", str(progress)))
    until(lambda: any("step 1" in x for x in lines(progress)), 60, "the job to make progress")

    emu.set_spot_capacity("us-central1", available=False)
    until(lambda: any("sigterm" in x for x in lines(progress)), 10, "SIGTERM (the preemption)")
    done = emu.wait(job.name, timeout=30)
    assert done.state.name == "JOB_STATE_FAILED"
    assert (done.error.code, done.error.message) == (8, STOCKOUT_WORDS)
    assert done.start_time  # it ran: the service gave up on it after a preemption
    assert classify(done).outcome is Outcome.PREEMPTED_EXHAUSTED
    (attempt,) = emu.attempts(job.name)  # the restart never got VMs
    assert attempt["endReason"] == "PREEMPTED"
    assert len([x for x in lines(progress) if x.endswith(" start")]) == 1


def test_a_machine_type_setting_leaves_another_type_running(
    spot_emulator, make_job, tmp_path, until, lines
):
    emu = spot_emulator(stockout_seconds=1.0)
    gapic = client(emu)
    stop = tmp_path / "stop"
    n1, e2 = tmp_path / "n1.txt", tmp_path / "e2.txt"
    jobs = {
        path: create(
            gapic,
            make_job("--steps", "1", "--until", str(stop), "--progress", str(path), machine_type=m),
        )
        for path, m in ((n1, "n1-standard-4"), (e2, "e2-standard-4"))
    }
    for path in (n1, e2):
        until(lambda p=path: any("step 1" in x for x in lines(p)), 60, f"{path.name} to run")

    emu.set_spot_capacity("us-central1", available=False)
    emu.set_spot_capacity("us-central1", "e2-standard-4", available=True)  # wins over "*"
    until(lambda: any("sigterm" in x for x in lines(n1)), 10, "the n1 job's preemption")
    assert emu.wait(jobs[n1].name, timeout=30).error.code == 8
    assert state_of(gapic, jobs[e2].name) == JobState.JOB_STATE_RUNNING
    assert not any("sigterm" in x for x in lines(e2))
    stop.touch()
    assert emu.wait(jobs[e2].name, timeout=30).state.name == "JOB_STATE_SUCCEEDED"
    assert [a["endReason"] for a in emu.attempts(jobs[e2].name)] == ["SUCCEEDED"]


def test_the_rest_control_route_and_its_400s(spot_emulator, api):
    emu = spot_emulator()
    base = f"{emu.endpoint}/emulator/v1"
    status, row = api(
        "POST",
        f"{base}/projects/local-project/locations/europe-west4/spotCapacity",
        {"machineType": "n1-standard-4", "available": False, "seconds": 30, "refusal": "QUOTA"},
    )
    assert status == 200, row
    assert row["location"] == "europe-west4" and row["machineType"] == "n1-standard-4"
    assert row["available"] is False and row["refusal"] == "QUOTA" and row["until"].endswith("Z")
    status, row = api(
        "POST",
        f"{base}/projects/local-project/locations/us-central1/spotCapacity",
        {"available": False},
    )
    assert status == 200 and row == {
        "location": "us-central1",
        "machineType": "*",
        "available": False,
        "refusal": "STOCKOUT",
    }
    status, listed = api("GET", f"{base}/spotCapacity")
    assert status == 200
    assert [(r["location"], r["machineType"]) for r in listed["spotCapacity"]] == [
        ("europe-west4", "n1-standard-4"),
        ("us-central1", "*"),
    ]

    us = f"{base}/projects/local-project/locations/us-central1/spotCapacity"
    for body, field in [
        ({}, "available"),
        ({"available": "no"}, "available"),
        ({"available": False, "seconds": -1}, "seconds"),
        ({"available": False, "seconds": "30"}, "seconds"),
        ({"available": False, "refusal": "NOPE"}, "refusal"),
        ({"available": False, "machineType": "n9-huge"}, "machineType"),
        ({"available": False, "colour": "red"}, None),
    ]:
        status, error = api("POST", us, body)
        assert status == 400, (body, error)
        assert error["error"]["status"] == "INVALID_ARGUMENT"
        violation = error["error"]["details"][0]["fieldViolations"][0]
        assert violation.get("field") == field, (body, error)
    # An unknown name at the top of a body that is the whole request, as Google's front end
    # answers it: the description names it, the violation names no field.
    assert violation == {
        "description": 'Invalid JSON payload received. Unknown name "colour": Cannot find field.'
    }
    status, error = api(
        "POST",
        f"{base}/projects/local-project/locations/mars-north1/spotCapacity",
        {"available": False},
    )
    assert (
        status == 400 and error["error"]["details"][0]["fieldViolations"][0]["field"] == "location"
    )
    assert "not a Vertex AI region" in error["error"]["message"]
    status, error = api("POST", us, raw=b"[1]")
    assert status == 400
    # nothing the 400s named was recorded
    assert len(api("GET", f"{base}/spotCapacity")[1]["spotCapacity"]) == 2


def test_set_spot_capacity_refuses_bad_values(spot_emulator):
    emu = spot_emulator()
    with pytest.raises(ValueError, match=r"^location: .*not a Vertex AI region"):
        emu.set_spot_capacity("moon-1", available=False)
    with pytest.raises(ValueError, match=r"^refusal: .*STOCKOUT, QUOTA"):
        emu.set_spot_capacity("us-central1", available=False, refusal="SOLD_OUT")
    with pytest.raises(EmulatorError, match="stockout_seconds"):
        Emulator(".", stockout_seconds=-1)


@pytest.fixture
def no_serving(monkeypatch) -> Iterator[list[Emulator]]:
    """``Emulator.start`` records the emulator and stops the command before it serves."""
    seen: list[Emulator] = []

    def start(self: Emulator) -> Emulator:
        seen.append(self)
        raise EmulatorError("not serving in this test")

    monkeypatch.setattr(Emulator, "start", start)
    yield seen


def test_the_cli_flags_parse(no_serving, tmp_path):
    args = ["emulator", "start", "--state-dir", str(tmp_path / "s")]
    result = CliRunner().invoke(
        main,
        [
            *args,
            *("--no-spot", "us-central1", "--no-spot", "europe-west4/n1-standard-4"),
            *("--stockout-seconds", "2.5"),
        ],
    )
    assert result.exit_code == 1 and "not serving in this test" in result.output
    (emu,) = no_serving
    assert emu.stockout_seconds == 2.5
    assert [
        (r.location, r.machine_type, r.available, r.until) for r in emu.spot_capacity.rows()
    ] == [
        ("europe-west4", "n1-standard-4", False, None),
        ("us-central1", "*", False, None),
    ]
    for bad, says in [
        ("europe-west4/", "LOCATION/MACHINE_TYPE"),
        ("mars-north1", "not a Vertex AI region"),
        ("us-central1/n9-huge", "machine type"),
    ]:
        result = CliRunner().invoke(main, [*args, "--no-spot", bad])
        assert result.exit_code == 2 and "--no-spot" in result.output, result.output
        assert says in result.output
    result = CliRunner().invoke(main, [*args, "--stockout-seconds", "-1"])
    assert result.exit_code == 2 and "--stockout-seconds" in result.output
    assert len(no_serving) == 1  # a refused flag never gets as far as starting
