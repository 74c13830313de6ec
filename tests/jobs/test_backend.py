"""The backend seam: one place decides Vertex AI or the emulator; attempts observed as they run."""

from __future__ import annotations

import logging

import pytest
from recording_server import RecordingServer, Script

from kfp_spot import checkpoints
from kfp_spot.jobs.backend import EmulatorBackend, VertexBackend, backend_for, traceback_before
from kfp_spot.jobs.strategy import Strategy
from kfp_spot.jobs.watch import AttemptWatcher
from kfp_spot.vertex.client import resolve_endpoint

JOB = "projects/local-project/locations/us-central1/customJobs/42"


def test_the_backend_is_chosen_from_the_endpoint():
    vertex = backend_for(resolve_endpoint("us-central1"))
    emulator = backend_for(resolve_endpoint("us-central1", "http://127.0.0.1:8123"))
    assert isinstance(vertex, VertexBackend) and isinstance(emulator, EmulatorBackend)
    assert isinstance(
        backend_for(resolve_endpoint("us-central1", "https://h.example")), VertexBackend
    )
    # Quick against the emulator (a GET costs ~1 ms), gentle on Vertex.
    assert emulator.poll.maximum <= 0.1 < 10.0 <= vertex.poll.initial
    # The emulator's budget outlasts a restart; Vertex's is GCPC-like.
    assert emulator.retry.max_seconds >= 20.0 and vertex.retry.max_seconds >= 600.0
    assert (emulator.cancel_wait_seconds, vertex.cancel_wait_seconds) == (30.0, 20.0)
    fixed = backend_for(resolve_endpoint("us-central1"), poll_interval=2.0, cancel_wait=5.0)
    assert (fixed.poll.initial, fixed.poll.maximum, fixed.cancel_wait_seconds) == (2.0, 2.0, 5.0)


def test_vertex_has_no_ledger_and_points_at_the_jobs_logs():
    vertex = backend_for(resolve_endpoint("europe-west4"))
    assert vertex.ledger(JOB) is None
    assert vertex.failure_logs(JOB) == (
        "the replicas' logs are in Cloud Logging: "
        "https://console.cloud.google.com/ai/platform/locations/us-central1/training/42?project=local-project"
    )


TRAINER_CRASH = [
    "epoch 1 loss=0.4",
    "Traceback (most recent call last):",
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    '  File "/env/trainer/task.py", line 40, in main',
    "    batch = next(loader)",
    "KeyError: 'label_column'",
    "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f>",
    "Traceback (most recent call last):",
    '  File "/env/torch/utils/data/dataloader.py", line 1479, in __del__',
    "AssertionError: can only test a child process",
    *[f"tracker: syncing {i}" for i in range(30)],
]


def test_the_traceback_that_ended_a_replica_is_found_above_its_last_lines():
    # The workers' "Exception ignored in" traceback came later; the trainer's is the cause.
    assert traceback_before(TRAINER_CRASH, len(TRAINER_CRASH) - 20) == [
        '  File "/env/trainer/task.py", line 40, in main',
        "    batch = next(loader)",
        "KeyError: 'label_column'",
    ]
    assert traceback_before(TRAINER_CRASH[:10], 0) == []  # the shown lines hold it
    assert traceback_before(TRAINER_CRASH[:1] + TRAINER_CRASH[10:], 5) == []  # no traceback


def test_the_emulator_backend_reads_the_ledger_and_survives_its_absence():
    rows = [{"attempt": 1, "startTime": 10, "endReason": "PREEMPTED", "billableSeconds": 5}]
    with RecordingServer(ledger={JOB: rows}) as server:
        backend = backend_for(resolve_endpoint("us-central1", server.endpoint))
        assert backend.ledger(JOB) == rows
        assert backend.ledger(JOB.replace("42", "43")) is None  # 404: no ledger, no error
        (attempt,) = backend.observe(JOB, "SPOT", "", since=0.0)
    assert attempt.is_preemption and attempt.strategy == "SPOT"


def _record(root, name, **fields):
    record = checkpoints.AttemptRecord.from_json({"attempt_id": name, **fields})
    checkpoints.write_attempt_record(root, record)


def test_on_vertex_attempts_are_observed_from_the_trainers_records(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="kfp_spot.jobs.launcher")
    root = str(tmp_path / "checkpoints")
    # An attempt of an earlier submission (another job id) is not this job's.
    _record(root, "old", job_id="41", start_time=50.0, end_time=60.0, exit_reason="preempted")
    _record(root, "a", job_id="42", start_time=100.0, first_step=0)
    backend = backend_for(resolve_endpoint("us-central1"))
    now = [0.0]
    watcher = AttemptWatcher(backend, root, clock=lambda: now[0])
    watcher.watch(JOB, Strategy.SPOT, submitted_at=90.0)
    watcher.poll()
    checkpoints.commit_manifest(root, checkpoints.Manifest(7, (), 110.0))
    _record(
        root, "a", job_id="42", start_time=100.0, first_step=0, last_committed_step=7,
        end_time=130.0, exit_reason="preempted",
    )  # fmt: skip
    _record(root, "b", job_id="42", start_time=140.0, first_step=7)
    watcher.poll()  # too soon: Vertex's records are looked at once a minute
    now[0] = backend.observe_every
    watcher.poll()
    watcher.poll(force=True)  # nothing new: nothing logged twice
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "customJobs/42: attempt 1 started (SPOT); newest checkpoint: none",
        "customJobs/42: attempt 1 was preempted after 30.0 s billed; newest checkpoint: step 7",
        "customJobs/42: attempt 2 started (SPOT); resumes from step 7; newest checkpoint: step 7",
    ]


def test_a_restart_after_an_unclosed_record_is_not_logged_as_a_preemption(tmp_path, caplog):
    # The trainer was killed without a notice (an OOM kill; Vertex restarts such a replica):
    # its record stays open, and the attempt ended without a record of why.
    caplog.set_level(logging.INFO, logger="kfp_spot.jobs.launcher")
    root = str(tmp_path / "checkpoints")
    _record(root, "a", job_id="42", start_time=100.0, updated_time=130.0, first_step=0)
    _record(root, "b", job_id="42", start_time=140.0, first_step=0)
    watcher = AttemptWatcher(backend_for(resolve_endpoint("us-central1")), root, clock=lambda: 0)
    watcher.watch(JOB, Strategy.SPOT, submitted_at=90.0)
    watcher.poll()
    ended = [r.getMessage() for r in caplog.records if "attempt 1 " in r.getMessage()][1]
    assert ended.startswith(
        "customJobs/42: attempt 1 ended without a record of why (not counted as a preemption) "
        "after 40.0 s billed"
    )


@pytest.mark.parametrize("changed", [True, False])
def test_a_state_change_is_looked_at_at_once(tmp_path, changed):
    seen = []

    class Counting(VertexBackend):
        def observe(self, *args):
            seen.append(args)
            return []

    base = backend_for(resolve_endpoint("us-central1"))
    backend = Counting(
        base.endpoint, base.poll, base.retry, base.cancel_wait_seconds, 60.0, base.quota_backoff
    )
    watcher = AttemptWatcher(backend, str(tmp_path), clock=lambda: 1.0)
    watcher.watch(JOB, Strategy.SPOT, 0.0)
    watcher.poll(None, False)  # the first look
    watcher.poll(None, changed)
    assert len(seen) == (2 if changed else 1)


def test_vertex_rides_out_fast_unavailable_errors_for_its_whole_ten_minute_window():
    from kfp_spot.jobs.service import JobService, ServiceUnreachableError

    budget = backend_for(resolve_endpoint("us-central1")).retry
    now = [0.0]

    def sleep(seconds: float) -> None:  # virtual time: the real client, the real 503s
        now[0] += seconds

    with RecordingServer(fail_next=[503] * 100) as server:
        endpoint = resolve_endpoint("us-central1", server.endpoint)
        service = JobService(endpoint, retry=budget, sleep=sleep, clock=lambda: now[0])
        with pytest.raises(ServiceUnreachableError):
            service.get(JOB)
        tries = len(server.requests)
    # The window, not the count of tries, ends a run of instant failures (it was 8 tries, ~91 s).
    assert 570.0 <= now[0] <= budget.max_seconds
    assert 20 <= tries <= budget.max_attempts


def _simulate(end: float, running_at: float = 180.0, horizon: float = 4 * 3600.0):
    """Reads of a job QUEUED/PENDING until ``running_at``, RUNNING until ``end``: (times, seen)."""
    from kfp_spot.jobs.backend import vertex_poll_delay

    def state_at(t: float) -> str:
        if t >= end:
            return "JOB_STATE_SUCCEEDED"
        return "JOB_STATE_RUNNING" if t >= running_at else "JOB_STATE_PENDING"

    t, times, last, changed_at = 0.0, [], None, 0.0
    while t <= horizon:
        times.append(t)
        state = state_at(t)
        if state != last:
            last, changed_at = state, t
        if state == "JOB_STATE_SUCCEEDED":
            return times, t
        t += vertex_poll_delay(state, t - changed_at, t, len(times))
    return times, None


@pytest.mark.parametrize("end", [185.0, 200.0, 240.0, 600.0, 3600.0, 3611.0, 7199.0])
def test_vertex_polls_are_never_more_than_three_ahead_of_gcpc(end):
    from kfp_spot.jobs.backend import GCPC_POLL_SECONDS, POLL_BURST_CALLS

    times, seen = _simulate(end)
    assert seen is not None
    for k, t in enumerate(times):  # GCPC has made floor(t / 20) + 1 calls by t
        assert k + 1 <= t // GCPC_POLL_SECONDS + 1 + POLL_BURST_CALLS
    # the end is seen within GCPC's 20 s in a steady RUNNING, within 5 s right after it started
    assert seen - end <= (5.0 if end - 180.0 < 25.0 else GCPC_POLL_SECONDS)


def test_vertex_polls_quickly_after_a_change_and_at_gcpcs_pace_in_a_steady_running():
    from kfp_spot.jobs.backend import vertex_poll_delay

    assert vertex_poll_delay("JOB_STATE_RUNNING", 0.0, 300.0, 10) == 5.0  # banked while PENDING
    assert vertex_poll_delay("JOB_STATE_PENDING", 0.0, 0.0, 1) == 30.0
    assert vertex_poll_delay("JOB_STATE_RUNNING", 600.0, 900.0, 46) == 20.0
    # no bank left: the burst waits for GCPC's schedule
    assert vertex_poll_delay("JOB_STATE_RUNNING", 0.0, 0.0, 4) == 20.0


def test_the_launcher_waits_on_vertex_by_that_schedule():
    # Vertex's schedule, read through the real client from a server showing one state per GET.
    from google.cloud.aiplatform_v1 import CustomJob, JobState

    from kfp_spot.jobs.service import JobService

    states = ["JOB_STATE_PENDING"] * 3 + ["JOB_STATE_RUNNING"] * 4 + ["JOB_STATE_SUCCEEDED"]
    now, slept = [0.0], []

    def sleep(seconds):  # virtual time: the real client, the real GETs
        slept.append(seconds)
        now[0] += seconds

    vertex = backend_for(resolve_endpoint("us-central1"))
    with RecordingServer(default=Script(states)) as server:
        service = JobService(
            resolve_endpoint("us-central1", server.endpoint), sleep=sleep, clock=lambda: now[0]
        )
        created = service.client.create_custom_job(
            parent="projects/local-project/locations/us-central1",
            custom_job=CustomJob(display_name="waited"),
        )
        done = service.wait(created.name, vertex.poll)
        gets = [r for r in server.requests if r.method == "GET"]
    assert done.state == JobState.JOB_STATE_SUCCEEDED and done.name == created.name
    assert len(gets) == len(states)  # one GET per state, none after the end
    # 30 s while PENDING, then 5 s right after RUNNING was seen
    assert slept == [30.0, 30.0, 30.0, 5.0, 5.0, 5.0, 5.0]
