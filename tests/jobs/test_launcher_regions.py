"""A launch across regions on the local emulator: real jobs, per-region Spot capacity, real clients.

The emulator serves every region on one endpoint; each region has its own Spot capacity
(``Emulator.set_spot_capacity``). A local base output directory serves every region, so the jobs
share one checkpoint directory here (copies between buckets: test_launcher_regions_gcs.py).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
from artifacts import FakeArtifact
from test_launcher_emulator import PROJECT
from test_launcher_emulator import trainer_package as trainer_package  # the fixture

from kfp_spot import checkpoints
from kfp_spot.jobs.entry import launch_spot_job
from kfp_spot.jobs.launcher import LaunchFailedError
from kfp_spot.jobs.recovery import load_state

Emulator = pytest.importorskip("kfp_spot.emulator").Emulator

REGIONS = ["us-central1", "europe-west4"]
MACHINE = "n1-standard-4"  # the trainer's machine type (the component's default)


def _emulator(tmp_path, env_cache, **kw):
    kw.setdefault("stockout_seconds", 1.0)  # a Spot job without VMs fails after 1 s
    return Emulator(tmp_path / "emu", grace_period=0.5, env_cache_dir=env_cache, **kw)


def _launch(emu, package, outputs, *args, **extra):
    return launch_spot_job(
        project=PROJECT,
        location=REGIONS[0],
        package=package,
        args=list(args),
        api_endpoint=emu.endpoint,
        **outputs,
        **{"regions": REGIONS, **extra},
    )


def _jobs(emu):
    """(region, state) of every CustomJob, oldest first."""
    jobs = sorted(emu.list_jobs(), key=lambda j: j["createTime"])
    return [(j["name"].split("/")[3], j["state"]) for j in jobs]


def _base(outputs):
    """The base output directory a launch derives from the task's checkpoint output."""
    return os.path.join(os.path.dirname(outputs["checkpoint"].uri), "custom_job")


def _submissions(outputs):
    base = os.path.dirname(outputs["checkpoint"].uri)  # after the launch: <base>/checkpoints
    (name,) = os.listdir(os.path.join(base, "_launcher"))
    with open(os.path.join(base, "_launcher", name), encoding="utf-8") as handle:
        run_key = json.load(handle)["run_key"]
    state = load_state(os.path.join(base, "_launcher", name), run_key)
    assert state is not None
    return state.submissions


def _wait(predicate, timeout=120.0):
    """Poll ``predicate`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def _step(root):
    latest = checkpoints.latest(root, check_hashes=False)
    return latest.step if latest else 0


class OnceCommitted:
    """Run ``action(job_name)`` once, when the first job is RUNNING and step ``step`` is on disk."""

    def __init__(self, emu, root, step, action):
        self.emu, self.root, self.step, self.action = emu, root, step, action
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self._thread.join(timeout=10)

    def _loop(self):
        while not self.done.wait(0.05):
            jobs = sorted(self.emu.list_jobs(), key=lambda j: j["createTime"])
            if jobs and jobs[0]["state"] == "JOB_STATE_RUNNING" and _step(self.root) >= self.step:
                self.action(jobs[0]["name"])
                self.done.set()


def test_out_of_spot_in_the_first_region_resumes_in_the_second(
    tmp_path,
    env_cache,
    trainer_package,
    outputs,
):
    args = ("--steps", "20", "--step-seconds", "0.1")
    root = os.path.join(_base(outputs), "checkpoints")
    with _emulator(tmp_path, env_cache) as emu:
        # Spot VMs of the trainer's machine type run out in us-central1 once step 3 is saved.
        def stockout(_job):
            emu.set_spot_capacity(REGIONS[0], MACHINE, available=False)

        with OnceCommitted(emu, root, 3, stockout):
            assert _launch(emu, trainer_package, outputs, *args) == "SUCCEEDED"
        jobs = _jobs(emu)
        # The same training, uninterrupted, for comparison.
        plain = tmp_path / "plain"
        plain_outputs = {
            "checkpoint": FakeArtifact(uri=str(plain / "checkpoint")),
            "model": FakeArtifact(uri=str(plain / "model")),
            "job_report": FakeArtifact(uri=str(plain / "report"), path=str(plain / "report")),
            "gcp_resources": str(plain / "gcp_resources"),
        }
        emu.set_spot_capacity(REGIONS[0], MACHINE, available=True)
        assert _launch(emu, trainer_package, plain_outputs, *args, regions=[]) == "SUCCEEDED"
    assert jobs == [(REGIONS[0], "JOB_STATE_FAILED"), (REGIONS[1], "JOB_STATE_SUCCEEDED")]
    first, second = _submissions(outputs)
    assert (first.region, second.region) == tuple(REGIONS)
    # The second job resumed from the step the first one committed last, before the move.
    records = sorted(checkpoints.read_attempt_records(root), key=lambda r: r.start_time)
    moved_at = max(r.last_committed_step or 0 for r in records[:-1])
    assert moved_at >= 3
    assert second.resume_step == moved_at == records[-1].first_step
    assert second.copied_bytes == 0  # one local directory serves both regions: nothing to copy
    model = os.path.join(outputs["model"].uri, "model.json")
    with (
        open(model, "rb") as ours,
        open(os.path.join(plain_outputs["model"].uri, "model.json"), "rb") as theirs,
    ):
        assert ours.read() == theirs.read()
    assert outputs["checkpoint"].metadata["latest_step"] == 20


def test_eager_leaves_the_region_at_its_first_preemption(
    tmp_path,
    env_cache,
    trainer_package,
    outputs,
):
    root = os.path.join(_base(outputs), "checkpoints")
    with _emulator(tmp_path, env_cache) as emu, OnceCommitted(emu, root, 2, emu.preempt):
        outcome = _launch(
            emu,
            trainer_package,
            outputs,
            "--steps",
            "20",
            "--step-seconds",
            "0.1",
            region_policy="EAGER",
        )
        jobs = _jobs(emu)
    assert outcome == "SUCCEEDED"
    # The first job was given up at its preemption (not left to restart in place) ...
    assert jobs == [(REGIONS[0], "JOB_STATE_CANCELLED"), (REGIONS[1], "JOB_STATE_SUCCEEDED")]
    first, second = _submissions(outputs)
    assert first.outcome.value == "PREEMPTED_EXHAUSTED" and "EAGER" in first.message
    # ... and the next one carried on in the second region from the committed steps.
    assert second.region == REGIONS[1] and (second.resume_step or 0) >= 2


def test_a_user_error_is_not_retried_in_another_region(
    tmp_path,
    env_cache,
    trainer_package,
    outputs,
):
    with _emulator(tmp_path, env_cache) as emu:
        with pytest.raises(LaunchFailedError) as info:
            _launch(emu, trainer_package, outputs, "--steps", "1", "--exit-code", "3")
        jobs = _jobs(emu)
    assert info.value.outcome.value == "USER_ERROR"
    assert jobs == [(REGIONS[0], "JOB_STATE_FAILED")]  # one job: europe-west4 never tried


def test_a_job_that_waits_past_region_wait_seconds_is_given_up_for_the_next_region(
    tmp_path, env_cache, trainer_package, outputs
):
    # us-central1 has no Spot VMs: its job would wait in PENDING for ten minutes (the emulator's
    # stockout) before failing; region_wait_seconds gives it up long before. The wait covers a
    # job's normal start too (here: the package's environment, built on first use), so it is
    # not set tight, and the budget allows a second round should the first start be slow.
    with _emulator(tmp_path, env_cache, stockout_seconds=600.0) as emu:
        emu.set_spot_capacity(REGIONS[0], MACHINE, available=False)
        outcome = _launch(
            emu,
            trainer_package,
            outputs,
            "--steps",
            "2",
            region_wait_seconds=15,
            max_resubmissions=3,
        )
        jobs = _jobs(emu)
    assert outcome == "SUCCEEDED"
    assert jobs[0] == (REGIONS[0], "JOB_STATE_CANCELLED") and jobs[-1] == (
        REGIONS[1],
        "JOB_STATE_SUCCEEDED",
    )
    first = _submissions(outputs)[0]
    assert first.outcome.value == "CAPACITY" and "region_wait_seconds=15" in first.message
    assert not first.start_time  # given up while it waited for VMs, never ran


def _start(launchers, emu, package, task_dir):
    inputs = {
        "project": PROJECT,
        "location": REGIONS[0],
        "regions": REGIONS,
        "package": {"uri": package.uri, "metadata": package.metadata},
        "args": ["--steps", "100000"],
        "checkpoint": {"uri": str(task_dir / "checkpoint")},
        "model": {"uri": str(task_dir / "model")},
        "job_report": {"uri": str(task_dir / "job_report"), "path": str(task_dir / "job_report")},
        "gcp_resources": str(task_dir / "gcp_resources"),
        "api_endpoint": emu.endpoint,
    }
    return launchers.start(inputs, task_dir)


def test_a_rerun_launcher_adopts_the_job_in_the_second_region_and_cancels_it_there(
    launchers,
    tmp_path,
    env_cache,
    trainer_package,
    task_dir,
):
    with _emulator(tmp_path, env_cache) as emu:
        # us-central1 refuses Spot creates (quota): the launch runs in europe-west4.
        emu.set_spot_capacity(REGIONS[0], available=False, refusal="QUOTA")
        first = _start(launchers, emu, trainer_package, task_dir)
        try:
            # Killed once it has recorded the job: the emulator may run it before the launcher
            # has read the create's answer, and a kill in between leaves no gcp_resources.
            _wait(
                lambda: (
                    _jobs(emu) == [(REGIONS[1], "JOB_STATE_RUNNING")]
                    and (task_dir / "gcp_resources").exists()
                )
            )
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=60)
        finally:
            first.kill()
        second = _start(launchers, emu, trainer_package, task_dir)
        try:
            _wait(lambda: "reattaching" in second.stderr_so_far())
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=120)
        finally:
            second.kill()
        assert second.returncode == 128 + signal.SIGTERM, second.stderr_so_far()
        # One CustomJob anywhere: the rerun watched it, and cancelled it in its own region.
        assert _jobs(emu) == [(REGIONS[1], "JOB_STATE_CANCELLED")]
    with open(task_dir / "gcp_resources", encoding="utf-8") as handle:
        (resource,) = json.load(handle)["resources"]
    assert f"/locations/{REGIONS[1]}/customJobs/" in resource["resourceUri"]


def test_a_directory_held_by_a_launch_in_another_region_is_not_shared(
    tmp_path, env_cache, trainer_package
):
    """A launch that failed over to europe-west4 still writes to its base directory: a second
    launch given that directory, starting in us-central1, fails naming its job and creates
    nothing, as it would had both been in one region (listing us-central1 alone found none)."""
    from test_launcher_emulator import _outputs_in

    base, release = str(tmp_path / "shared"), tmp_path / "release"
    with _emulator(tmp_path, env_cache) as emu:
        first: dict = {}

        def launch_first() -> None:
            first["outcome"] = launch_spot_job(
                project=PROJECT,
                location=REGIONS[1],
                package=trainer_package,
                args=["--steps", "3", "--hold", str(release)],
                api_endpoint=emu.endpoint,
                base_output_directory=base,
                **_outputs_in(tmp_path / "a"),
            )

        thread = threading.Thread(target=launch_first, daemon=True)
        thread.start()
        _wait(lambda: checkpoints.list_steps(f"{base}/checkpoints") or not thread.is_alive())
        (job,) = emu.list_jobs()
        with pytest.raises(LaunchFailedError) as info:
            _launch(
                emu,
                trainer_package,
                _outputs_in(tmp_path / "b"),
                "--steps",
                "3",
                base_output_directory=base,
            )
        jobs = _jobs(emu)
        release.touch()
        thread.join(timeout=120)
    assert info.value.outcome.value == "USER_ERROR"
    assert f"is in use by CustomJob {job['name']} of another launch" in str(info.value)
    assert jobs == [(REGIONS[1], "JOB_STATE_RUNNING")]  # nothing created in us-central1
    assert first == {"outcome": "SUCCEEDED"}
