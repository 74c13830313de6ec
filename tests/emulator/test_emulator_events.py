"""The restart path is event-driven: requests and replica exits wake an attempt, not a timer.

The heartbeat is the only timed wake-up of a running attempt; these tests push it an hour away,
so a request or an exit that did not wake the attempt (or the scheduler) would hang the job and
fail the test at its bounded wait.
"""

from __future__ import annotations

import pytest

from kfp_spot.emulator import Emulator
from kfp_spot.emulator import runner as runner_module

PARENT = "projects/local-project/locations/us-central1"


@pytest.fixture
def quiet(tmp_path, env_cache, monkeypatch):
    """An emulator whose running attempts have no timed wake-up at all."""
    monkeypatch.setattr(runner_module, "HEARTBEAT", 3600.0)
    with Emulator(tmp_path / "state", grace_period=30.0, env_cache_dir=env_cache) as emu:
        yield emu


def _create(emu, api, body):
    status, job = api("POST", f"{emu.endpoint}/v1/{PARENT}/customJobs", body)
    assert status == 200, job
    return job["name"]


def test_preempt_and_cancel_requests_wake_the_attempt(quiet, api, make_job, tmp_path, until, lines):
    progress = tmp_path / "progress.txt"
    name = _create(quiet, api, make_job("--steps", "4000", "--progress", str(progress)))
    until(lambda: any("step 1" in x for x in lines(progress)), 60, "attempt 1 to run")
    quiet.preempt(name)
    # SIGTERM, the replica's exit within the 30 s grace period, the job queued again and the
    # next attempt admitted: each step is woken by the one before
    until(lambda: len([x for x in lines(progress) if x.endswith(" start")]) == 2, 25, "attempt 2")
    assert any("sigterm" in x for x in lines(progress))
    assert quiet.attempts(name)[0]["endReason"] == "PREEMPTED"
    until(lambda: quiet.job(name).state.name == "JOB_STATE_RUNNING", 25, "attempt 2 RUNNING")
    quiet.service.cancel_job(name)
    done = quiet.wait(name, timeout=25)
    assert done.state.name == "JOB_STATE_CANCELLED"
    assert [r["endReason"] for r in quiet.attempts(name)] == ["PREEMPTED", "CANCELLED"]


@pytest.mark.parametrize(("code", "state"), [(0, "JOB_STATE_SUCCEEDED"), (3, "JOB_STATE_FAILED")])
def test_a_replica_exit_wakes_the_attempt(quiet, api, make_job, code, state):
    name = _create(quiet, api, make_job("--steps", "2", "--exit-code", str(code)))
    assert quiet.wait(name, timeout=60).state.name == state


def test_a_running_attempt_reads_its_job_only_when_woken(quiet, api, make_job, monkeypatch):
    lifecycle = quiet.service.lifecycle
    reads = []
    real_job = lifecycle.job
    monkeypatch.setattr(lifecycle, "job", lambda job_id: reads.append(job_id) or real_job(job_id))
    # the trainer sleeps 40 x 50 ms: a watcher polling every 50 ms would read the job 40+ times
    name = _create(quiet, api, make_job("--steps", "40", "--step-seconds", "0.05"))
    assert quiet.wait(name, timeout=60).state.name == "JOB_STATE_SUCCEEDED"
    [row] = quiet.attempts(name)
    assert row["billableSeconds"] >= 2.0
    # before RUNNING, at RUNNING, the first look, the exit, the end: a handful, however long
    assert len(reads) <= 10, reads
