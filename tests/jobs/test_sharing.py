"""One live launch per output directory (kfp_spot.jobs.sharing): the policy, and the launcher
against a REST server holding another launch's job on the same directory."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from google.cloud.aiplatform_v1.types import CustomJob
from recording_server import RecordingServer, Script, _Job

from kfp_spot.jobs import sharing
from kfp_spot.jobs.entry import launch_spot_job
from kfp_spot.jobs.launcher import LaunchFailedError
from kfp_spot.jobs.service import OUTPUT_LABEL, SUBMISSION_LABEL

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
PARENT = "projects/test-proj/locations/us-central1"


def _job(name: str, state: str, token: str, seconds: float) -> CustomJob:
    return CustomJob(
        name=f"{PARENT}/customJobs/{name}",
        state=state,
        labels={SUBMISSION_LABEL: token, OUTPUT_LABEL: "x"},
        create_time=T0 + timedelta(seconds=seconds),
    )


@pytest.mark.parametrize(
    ("state", "token", "held"),
    [
        ("JOB_STATE_RUNNING", "theirs", True),
        ("JOB_STATE_QUEUED", "theirs", True),
        ("JOB_STATE_PENDING", "theirs", True),
        ("JOB_STATE_CANCELLING", "theirs", True),  # still writing until it ends
        ("JOB_STATE_SUCCEEDED", "theirs", False),  # ended: a later launch may resume from it
        ("JOB_STATE_FAILED", "theirs", False),
        ("JOB_STATE_RUNNING", "ours", False),  # this launch's own earlier job
    ],
)
def test_before_a_create_a_live_job_of_another_launch_holds_the_directory(state, token, held):
    other = _job("1", state, token, 0)
    found = sharing.holder([other], mine=None, own_tokens={"ours"})
    assert (found is not None) is held


def test_after_creates_at_once_the_later_job_gives_way_and_the_earlier_goes_on():
    first, second = _job("1", "JOB_STATE_QUEUED", "a", 0), _job("2", "JOB_STATE_QUEUED", "b", 1)
    assert sharing.holder([first, second], mine=second, own_tokens={"b"}) == first
    assert sharing.holder([first, second], mine=first, own_tokens={"a"}) is None
    # The same instant: the name decides, the same way for both.
    tie = _job("0", "JOB_STATE_QUEUED", "c", 1)
    assert sharing.holder([tie, second], mine=second, own_tokens={"b"}) == tie
    assert sharing.holder([tie, second], mine=tie, own_tokens={"c"}) is None


def test_after_a_create_whose_answer_lacks_its_time_the_listed_time_decides():
    first, second = _job("1", "JOB_STATE_QUEUED", "a", 0), _job("2", "JOB_STATE_QUEUED", "b", 1)
    answered = CustomJob(name=first.name, state="JOB_STATE_QUEUED")  # no create_time
    assert sharing.holder([first, second], mine=answered, own_tokens={"a"}) is None


def test_the_label_names_the_directory_within_what_a_label_value_holds():
    label = sharing.output_label("gs://bucket/runs/trial-1/")
    assert label == sharing.output_label("gs://bucket/runs/trial-1")
    assert label != sharing.output_label("gs://bucket/runs/trial-2")
    assert len(label) <= 63 and label == label.lower() and label.isalnum()


def _launch(server, package, outputs):
    return launch_spot_job(
        project="test-proj",
        package=package,
        api_endpoint=server.endpoint,
        poll_interval_seconds=0.01,
        **outputs,
    )


def _foreign(server: RecordingServer, base: str, state: str, seconds_ago: float) -> str:
    """Another launch's job on ``base`` in the server, created ``seconds_ago``."""
    message = CustomJob.pb(CustomJob())
    message.name = f"{PARENT}/customJobs/900"
    message.labels[SUBMISSION_LABEL] = "another-launch"
    message.labels[OUTPUT_LABEL] = sharing.output_label(base)
    message.create_time.FromDatetime(datetime.now(timezone.utc) - timedelta(seconds=seconds_ago))
    server.jobs[message.name] = _Job(message, Script([state]))
    return message.name


def test_a_launch_on_a_directory_another_launch_is_writing_fails_before_it_creates(
    package, outputs, task_dir
):
    base = str(task_dir / "custom_job")
    with RecordingServer() as server:
        other = _foreign(server, base, "JOB_STATE_RUNNING", 60)
        server.jobs[other].message.state = 3  # RUNNING as the list shows it
        with pytest.raises(LaunchFailedError) as info:
            _launch(server, package, outputs)
        assert server.created() == []
    assert info.value.outcome.value == "USER_ERROR"
    message = str(info.value)
    assert f"base_output_directory {base} is in use by CustomJob {other}" in message
    assert "leave base_output_directory empty" in message


def test_of_two_launches_created_at_once_the_later_cancels_its_job_and_fails(
    package, outputs, task_dir
):
    base = str(task_dir / "custom_job")
    with RecordingServer() as server:
        # The other launch's create lands between this one's look and its create, earlier.
        server.on_create = lambda index, job: _foreign(server, base, "JOB_STATE_QUEUED", 5)
        with pytest.raises(LaunchFailedError) as info:
            _launch(server, package, outputs)
        (ours,) = [name for name in server.jobs if not name.endswith("/900")]
        assert server.cancels() == [f"/v1/{ours}:cancel"]
    assert info.value.outcome.value == "USER_ERROR"
    assert "is in use by CustomJob projects/test-proj/locations/us-central1/customJobs/900" in (
        str(info.value)
    )


def test_a_directory_whose_earlier_job_ended_is_taken_and_resumed_from(package, outputs, task_dir):
    with RecordingServer() as server:
        other = _foreign(server, str(task_dir / "custom_job"), "JOB_STATE_SUCCEEDED", 60)
        server.jobs[other].message.state = 4  # SUCCEEDED
        assert _launch(server, package, outputs) == "SUCCEEDED"
        assert len(server.created()) == 1


class _Listing:
    """A JobService's label listing: the jobs it holds, whatever the filter."""

    def __init__(self, *jobs: CustomJob) -> None:
        self.jobs = list(jobs)

    def labelled(self, parent: str, key: str, value: str) -> list[CustomJob]:
        return [job for job in self.jobs if job.name.startswith(parent + "/")]


def test_regions_are_judged_together_mine_by_its_time_as_listed_in_its_own_region():
    # Mine, created first in us-central1, and another launch's job created after it in
    # europe-west4: mine goes on, though the create's answer carried no create time.
    europe = "projects/test-proj/locations/europe-west4"
    mine = _job("1", "JOB_STATE_QUEUED", "ours", 0)
    theirs = CustomJob(
        name=f"{europe}/customJobs/2",
        state="JOB_STATE_QUEUED",
        labels={SUBMISSION_LABEL: "theirs", OUTPUT_LABEL: "x"},
        create_time=T0 + timedelta(seconds=1),
    )
    answer = CustomJob(name=mine.name, state="JOB_STATE_QUEUED", labels=mine.labels)
    places = [(_Listing(mine), PARENT), (_Listing(theirs), europe)]
    assert sharing.check(places, "/base", mine=answer, own_tokens={"ours"}) is None
    held = sharing.check(places, "/base", mine=None, own_tokens={"ours"})  # before a create
    assert held is not None and theirs.name in held.message
