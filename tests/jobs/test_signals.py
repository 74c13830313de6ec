"""Pipeline cancellation and launcher crashes, with the launcher in its own process (forked by
the module's ``launchers``, see tests/jobs/launchers.py)."""

from __future__ import annotations

import json
import re
import signal

from recording_server import RecordingServer, Script


def _start(launchers, server, task_dir, **extra):
    inputs = {
        "project": "test-proj",
        "package": {"uri": "gs://bucket/p.tar.gz", "metadata": {"python_module": "trainer.task"}},
        "checkpoint": {"uri": str(task_dir / "checkpoint")},
        "model": {"uri": str(task_dir / "model")},
        "job_report": {"uri": str(task_dir / "job_report"), "path": str(task_dir / "job_report")},
        "gcp_resources": str(task_dir / "gcp_resources"),
        "api_endpoint": server.endpoint,
        "poll_interval_seconds": 0.05,
        **extra,
    }
    return launchers.start(inputs, task_dir)


def _polled(server, times):
    def check():
        return (
            sum(1 for r in server.requests if r.method == "GET" and "/customJobs/" in r.path)
            >= times
        )

    return check


def test_sigterm_cancels_the_job(launchers, task_dir):
    with RecordingServer(scripts=[Script(["JOB_STATE_RUNNING"])]) as server:
        proc = _start(launchers, server, task_dir)
        try:
            assert server.wait_for(_polled(server, 2), timeout=60)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert server.cancels() == [
            "/v1/projects/test-proj/locations/us-central1/customJobs/1000:cancel"
        ]
        (job,) = server.jobs.values()
        assert job.message.state == 7  # the launcher waited until CANCELLED


def test_a_cancel_the_service_never_answers_is_given_up_within_the_cancel_wait(launchers, task_dir):
    # The pod is killed ~30 s after SIGTERM: a cancel retried for Vertex's usual 10 min would
    # die unreported. Within the wait (2 s here; backoffs of 0.1, 0.2, 0.4, 0.8 and 1 s) at most
    # five tries fit, then the launch says the job may still be running.
    with RecordingServer(scripts=[Script(["JOB_STATE_RUNNING"])]) as server:
        proc = _start(launchers, server, task_dir, _cancel_wait_seconds=2.0)
        try:
            assert server.wait_for(_polled(server, 2), timeout=60)
            server.fail_next.extend([503] * 200)  # UNAVAILABLE from now on
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    tries = re.search(r"could not cancel the CustomJob: cancel \S+ failed (\d+) times", err)
    assert tries is not None, err
    assert 1 <= int(tries.group(1)) <= 5
    assert "the CustomJob may still be running" in err
    assert "gcloud ai custom-jobs cancel" in err


def test_sigint_cancels_the_job_too(launchers, task_dir):
    with RecordingServer(scripts=[Script(["JOB_STATE_RUNNING"])]) as server:
        proc = _start(launchers, server, task_dir)
        try:
            assert server.wait_for(_polled(server, 2), timeout=60)
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert proc.returncode == 128 + signal.SIGINT
        assert len(server.cancels()) == 1


def test_sigkilled_launcher_rerun_reattaches_without_a_duplicate(launchers, task_dir):
    # The job runs until the test lets it finish.
    with RecordingServer(scripts=[Script(["JOB_STATE_RUNNING"])]) as server:
        first = _start(launchers, server, task_dir)
        try:
            assert server.wait_for(_polled(server, 2), timeout=60)
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=60)
        finally:
            first.kill()
        assert server.cancels() == []  # SIGKILL gives no chance to cancel: the job lives on
        (job,) = server.jobs.values()
        job.script = Script(["JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"])
        job.position = 0
        second = _start(launchers, server, task_dir)
        out, err = second.communicate(timeout=120)
        assert second.returncode == 0, err
        assert json.loads(out.splitlines()[-1])["outcome"] == "SUCCEEDED"
        assert len(server.created()) == 1
        assert "reattaching" in err
