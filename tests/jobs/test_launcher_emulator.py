"""The launcher against the local Vertex emulator: real jobs, real preemptions, every outcome."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import threading
import time

import pytest
from artifacts import FakeArtifact

from kfp_spot import checkpoints
from kfp_spot.jobs.entry import launch_spot_job
from kfp_spot.jobs.launcher import LaunchFailedError
from kfp_spot.packaging.trainer_dist import build_trainer_wheel
from tests.shared import write_sdist

emulator_module = pytest.importorskip("kfp_spot.emulator")
Emulator = emulator_module.Emulator

PROJECT, LOCATION = "test-proj", "us-central1"

# A trainer that checkpoints every step through kfp_spot.checkpoints, resumes from the newest
# committed step, writes an attempt record and leaves promptly on SIGTERM (the preemption notice).
TASK = r"""
import argparse, dataclasses, json, os, signal, sys, time, uuid
from kfp_spot import checkpoints

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=5)
p.add_argument("--step-seconds", type=float, default=0.05)
p.add_argument("--exit-code", type=int, default=0)
p.add_argument("--hold", default="", help="after one step, wait (for SIGTERM) until this exists")
a = p.parse_args()
root = os.environ["AIP_CHECKPOINT_DIR"]
latest = checkpoints.latest(root)
step = latest.step if latest else 0
attempt = uuid.uuid4().hex
record = checkpoints.AttemptRecord(attempt, time.time(), first_step=step,
                                   job_id=os.environ.get("CLOUD_ML_JOB_ID"))
checkpoints.write_attempt_record(root, record)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
first_step = step
while step < a.steps and not stop:
    if a.hold and step > first_step and not os.path.exists(a.hold):
        time.sleep(0.02)  # held after this attempt's one step: no step is committed meanwhile
        continue
    time.sleep(a.step_seconds)
    step += 1
    checkpoints.write_step(root, step, {"state.json": json.dumps({"step": step}).encode()})
    record = dataclasses.replace(record, last_committed_step=step)
print(f"trained to step {step}", flush=True)
reason = "preempted" if stop else ("error" if a.exit_code else "finished")
record = dataclasses.replace(record, end_time=time.time(),
                             exit_reason=checkpoints.ExitReason(reason))
checkpoints.write_attempt_record(root, record)
if not stop and not a.exit_code:
    os.makedirs(os.environ["AIP_MODEL_DIR"], exist_ok=True)
    with open(os.path.join(os.environ["AIP_MODEL_DIR"], "model.json"), "w") as f:
        json.dump({"step": step}, f)
sys.exit(143 if stop else a.exit_code)
"""


@pytest.fixture(scope="module")
def trainer_package(tmp_path_factory) -> FakeArtifact:
    path = tmp_path_factory.mktemp("pkg") / "ckpttrain-0.1.tar.gz"
    write_sdist(
        path,
        {
            "ckpttrain-0.1/pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
            'build-backend = "setuptools.build_meta"\n'
            '[project]\nname = "ckpttrain"\nversion = "0.1"\n'
            '[tool.setuptools]\npackages = ["ckpttrain"]\n',
            "ckpttrain-0.1/ckpttrain/__init__.py": "",
            "ckpttrain-0.1/ckpttrain/task.py": TASK,
        },
    )
    # The job imports kfp_spot: as prepare_package does, ship the light kfp-spot-trainer wheel
    # (the executor image has no kfp-spot).
    light = build_trainer_wheel(path.parent / "kfp-spot-trainer")
    return FakeArtifact(
        uri=str(path),
        metadata={"python_module": "ckpttrain.task", "package_uris": [str(path), str(light)]},
    )


def _emulator(tmp_path, env_cache, **kw):
    return Emulator(tmp_path / "emu", grace_period=0.5, env_cache_dir=env_cache, **kw)


def _launch(emu, trainer_package, outputs, *args, **extra):
    return launch_spot_job(
        project=PROJECT,
        location=LOCATION,
        package=trainer_package,
        args=list(args),
        api_endpoint=emu.endpoint,
        **outputs,
        **extra,
    )


def _strategies(emu):
    jobs = sorted(emu.list_jobs(), key=lambda j: j["createTime"])
    return [j["jobSpec"]["scheduling"]["strategy"] for j in jobs]


def test_succeeded(tmp_path, env_cache, trainer_package, outputs):
    with _emulator(tmp_path, env_cache) as emu:
        outcome = _launch(emu, trainer_package, outputs, "--steps", "3")
        (job,) = emu.list_jobs()
    assert outcome == "SUCCEEDED"
    assert job["jobSpec"]["scheduling"]["strategy"] == "SPOT"  # what the emulator stored
    assert outputs["checkpoint"].metadata["latest_step"] == 3
    assert os.path.exists(os.path.join(outputs["model"].uri, "model.json"))
    report = outputs["job_report"].metadata
    assert report["attempts"] == 1 and report["preemptions"] == 0
    assert report["billable_seconds"] > 0 and report["cost_on_demand_usd"] > report["cost_spot_usd"]


def test_the_launchers_log_tells_each_attempt_as_it_happens(
    tmp_path, env_cache, trainer_package, outputs, caplog
):
    caplog.set_level(logging.INFO, logger="kfp_spot.jobs.launcher")
    # Attempt 1 is preempted 0.3 s into RUNNING; attempt 2 runs to the end.
    with _emulator(tmp_path, env_cache, preempt_at=(0.3,)) as emu:
        outcome = _launch(emu, trainer_package, outputs, "--steps", "30", "--step-seconds", "0.05")
        (job,) = emu.list_jobs()
        ended = emu.job(job["name"]).end_time.timestamp()
    assert outcome == "SUCCEEDED"
    story = [
        (r.created, r.getMessage()) for r in caplog.records if r.name == "kfp_spot.jobs.launcher"
    ]
    short = "customJobs/" + job["name"].rsplit("/", 1)[-1]
    expected = [
        f"{short}: attempt 1 started (SPOT, n1-standard-4 x1)",
        f"{short}: attempt 1 was preempted after",
        f"{short}: attempt 2 started (SPOT, n1-standard-4 x1)",
        f"{short}: attempt 2 succeeded after",
        f"{short} ended SUCCEEDED",
    ]
    found = [next(i for i, (_, m) in enumerate(story) if m.startswith(e)) for e in expected]
    assert found == sorted(found), story
    # Told while the job ran, not in a summary at the end.
    assert story[found[1]][0] < ended
    # what attempt 2 resumes from: a step, or none when attempt 1 was preempted before its first
    # commit (0.3 s is shorter than an interpreter start on a loaded machine)
    assert re.search(r"; newest checkpoint: (step \d+|none)$", story[found[2]][1]), story


def test_user_error(tmp_path, env_cache, trainer_package, outputs):
    with _emulator(tmp_path, env_cache) as emu:
        with pytest.raises(LaunchFailedError, match="non-zero status of 3") as info:
            _launch(emu, trainer_package, outputs, "--steps", "1", "--exit-code", "3")
        assert len(emu.list_jobs()) == 1  # a bug is not retried
    assert info.value.outcome.value == "USER_ERROR"
    # The component's error shows what the code printed last.
    assert "workerpool0-0 (attempt 1), last lines" in str(info.value)
    assert "trained to step 1" in str(info.value)


@pytest.mark.slow
def test_preempted_exhausted(tmp_path, env_cache, trainer_package, outputs):
    # Every attempt is preempted at once: six restarts, then STOCKOUT.
    with _emulator(tmp_path, env_cache, preempt_at=(0.0,) * 7) as emu:
        outcome = _launch(
            emu,
            trainer_package,
            outputs,
            "--steps",
            "1000",
            max_resubmissions=0,
            fail_on_incomplete=False,
        )
    assert outcome == "PREEMPTED_EXHAUSTED"
    report = outputs["job_report"].metadata
    assert report["attempts"] == 7
    assert report["preemptions"] == 7


def test_capacity(tmp_path, env_cache, trainer_package, outputs):
    with (
        _emulator(tmp_path, env_cache, capacity={"*": 1}) as emu,
        pytest.raises(LaunchFailedError, match="capacity") as info,
    ):
        # Two VMs where the region (the emulator) has one: refused at creation.
        _launch(emu, trainer_package, outputs, replica_count=2, max_resubmissions=0)
    assert info.value.outcome.value == "CAPACITY"


def test_timeout(tmp_path, env_cache, trainer_package, outputs):
    with (
        _emulator(tmp_path, env_cache) as emu,
        pytest.raises(LaunchFailedError, match=r"scheduling\.timeout") as info,
    ):
        _launch(emu, trainer_package, outputs, "--steps", "100000", timeout="1s")
    assert info.value.outcome.value == "TIMEOUT"


def _start_process(launchers, emu, trainer_package, task_dir, *args):
    inputs = {
        "project": PROJECT,
        "package": {"uri": trainer_package.uri, "metadata": trainer_package.metadata},
        "args": list(args),
        "checkpoint": {"uri": str(task_dir / "checkpoint")},
        "model": {"uri": str(task_dir / "model")},
        "job_report": {"uri": str(task_dir / "job_report"), "path": str(task_dir / "job_report")},
        "gcp_resources": str(task_dir / "gcp_resources"),
        "api_endpoint": emu.endpoint,
    }
    return launchers.start(inputs, task_dir)


def _one_running_job(emu):
    jobs = emu.list_jobs()
    return len(jobs) == 1 and jobs[0]["state"] == "JOB_STATE_RUNNING"


def _wait(predicate, timeout=120.0):
    """Poll ``predicate`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_cancelled_by_sigterm(launchers, tmp_path, env_cache, trainer_package, task_dir):
    with _emulator(tmp_path, env_cache) as emu:
        proc = _start_process(launchers, emu, trainer_package, task_dir, "--steps", "100000")
        try:
            _wait(lambda: _one_running_job(emu))
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        assert proc.returncode == 128 + signal.SIGTERM, err
        (job,) = emu.list_jobs()
        assert job["state"] == "JOB_STATE_CANCELLED"


def test_sigkilled_launcher_rerun_reattaches(
    launchers, tmp_path, env_cache, trainer_package, task_dir
):
    with _emulator(tmp_path, env_cache) as emu:
        first = _start_process(launchers, emu, trainer_package, task_dir, "--steps", "40")
        try:
            _wait(lambda: _one_running_job(emu))
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=60)
        finally:
            first.kill()
        second = _start_process(launchers, emu, trainer_package, task_dir, "--steps", "40")
        out, err = second.communicate(timeout=300)
        assert second.returncode == 0, err
        assert json.loads(out.splitlines()[-1])["outcome"] == "SUCCEEDED"
        (job,) = emu.list_jobs()  # exactly one CustomJob: the rerun watched the first one
        assert job["state"] == "JOB_STATE_SUCCEEDED"


class ExhaustSpotJobs:
    """Preempt every attempt of the first ``jobs`` CustomJobs once it has committed a new step.

    Each attempt is preempted exactly once (tracked by its ledger row), and only after it saved
    progress, so the service's restarts run out with work on disk and a later job must resume.
    The trainer runs with ``--hold release``: each attempt commits one step and then waits, so
    however late this thread looks, no attempt trains to the end before it is preempted. Once a
    later job exists, ``release`` lets that one train on.
    """

    def __init__(self, emu, checkpoint_root, jobs, release):
        self.emu, self.root, self.jobs, self.release = emu, checkpoint_root, jobs, release
        self.preempted: list[tuple[str, int, int]] = []  # (job, attempt, step)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)

    def _step(self):
        latest = checkpoints.latest(self.root, check_hashes=False)
        return latest.step if latest else 0

    def _loop(self):
        last = 0  # the step on disk at the last preemption: the next attempt resumes from it
        while not self._stop.wait(0.05):
            every = sorted(self.emu.list_jobs(), key=lambda j: j["createTime"])
            if len(every) > self.jobs:
                self.release.touch()
            for job in every[: self.jobs]:
                rows = self.emu.attempts(job["name"])
                if not rows or rows[-1].get("endTime") or job["state"] != "JOB_STATE_RUNNING":
                    continue
                key = (job["name"], rows[-1]["attempt"])
                step = self._step()
                if step > last and key not in {(j, a) for j, a, _ in self.preempted}:
                    self.emu.preempt(job["name"])
                    self.preempted.append((*key, step))
                    last = step


@pytest.mark.slow
def test_spot_exhausted_twice_then_resumes_and_succeeds(
    tmp_path, env_cache, trainer_package, outputs
):
    # Every attempt of the first two Spot jobs is preempted after it saved a step: both are
    # exhausted (7 attempts each); the third runs free and must resume from a committed step.
    root = os.path.join(os.path.dirname(outputs["checkpoint"].uri), "custom_job", "checkpoints")
    release = tmp_path / "release"
    with (
        _emulator(tmp_path, env_cache) as emu,
        ExhaustSpotJobs(emu, root, jobs=2, release=release) as chaos,
    ):
        outcome = _launch(
            emu,
            trainer_package,
            outputs,
            "--steps",
            "30",
            "--step-seconds",
            "0.1",
            "--hold",
            str(release),
            max_resubmissions=2,
        )
        ledgers = {j["name"]: emu.attempts(j["name"]) for j in emu.list_jobs()}
        strategies = _strategies(emu)
    assert outcome == "SUCCEEDED"
    assert len(chaos.preempted) == 14
    assert strategies == ["SPOT", "SPOT", "SPOT"]
    state_files = os.listdir(os.path.join(os.path.dirname(outputs["checkpoint"].uri), "_launcher"))
    assert len(state_files) == 1
    records = checkpoints.read_attempt_records(outputs["checkpoint"].uri)
    assert len(records) == 15
    assert records[-1].first_step > 0  # the third submission resumed from a checkpoint
    assert records[-1].exit_reason == "finished"
    assert sum(len(rows) for rows in ledgers.values()) == 15
    report = outputs["job_report"].metadata
    assert report["resubmissions"] == 2
    assert report["preemptions"] == 14
    assert 0 < report["goodput"] < 1


@pytest.mark.slow
def test_fallback_after_one_exhausted_spot_job_is_standard(
    tmp_path, env_cache, trainer_package, outputs
):
    # Every Spot attempt is preempted as it starts, so the Spot job cannot finish however fast
    # the machine is: its 7th preemption exhausts it and the fallback runs on STANDARD.
    with _emulator(tmp_path, env_cache, preempt_at=(0.0,) * 7) as emu:
        outcome = _launch(
            emu,
            trainer_package,
            outputs,
            "--steps",
            "20",
            "--step-seconds",
            "0.05",
            fallback_after=1,
        )
        strategies = _strategies(emu)
    assert outcome == "SUCCEEDED"
    assert strategies == ["SPOT", "STANDARD"]


def _outputs_in(path) -> dict:
    path.mkdir(parents=True)
    return {
        "checkpoint": FakeArtifact(uri=str(path / "checkpoint")),
        "model": FakeArtifact(uri=str(path / "model")),
        "job_report": FakeArtifact(uri=str(path / "job_report"), path=str(path / "job_report")),
        "gcp_resources": str(path / "gcp_resources"),
    }


def test_a_second_launch_on_a_directory_in_use_fails_and_a_later_one_resumes_from_it(
    tmp_path, env_cache, trainer_package
):
    """Two launches given one base_output_directory (a ParallelFor passed one URI) would train on
    each other's steps: while the first one's job runs, the second fails naming it, and creates
    nothing; once it has ended, a later launch takes the directory and resumes from its step."""
    base, release = str(tmp_path / "shared"), tmp_path / "release"
    args = ("--steps", "3", "--hold", str(release))
    with _emulator(tmp_path, env_cache) as emu:
        first: dict = {}

        def launch_first() -> None:
            first["outcome"] = _launch(
                emu, trainer_package, _outputs_in(tmp_path / "a"), *args, base_output_directory=base
            )

        thread = threading.Thread(target=launch_first, daemon=True)
        thread.start()
        deadline = time.monotonic() + 120
        while not checkpoints.list_steps(f"{base}/checkpoints"):  # its job runs, and holds
            assert time.monotonic() < deadline and thread.is_alive(), "the first job never ran"
            time.sleep(0.05)
        (job,) = emu.list_jobs()
        with pytest.raises(LaunchFailedError) as info:
            _launch(  # unheld: without the check it would train on the first one's steps
                emu,
                trainer_package,
                _outputs_in(tmp_path / "b"),
                "--steps",
                "3",
                base_output_directory=base,
            )
        assert info.value.outcome.value == "USER_ERROR"
        assert f"is in use by CustomJob {job['name']} of another launch" in str(info.value)
        assert len(emu.list_jobs()) == 1  # nothing created
        release.touch()
        thread.join(timeout=120)
        assert first == {"outcome": "SUCCEEDED"}
        later = _outputs_in(tmp_path / "c")
        outcome = _launch(emu, trainer_package, later, "--steps", "4", base_output_directory=base)
        assert outcome == "SUCCEEDED" and len(emu.list_jobs()) == 2
    assert later["checkpoint"].metadata["latest_step"] == 4
    assert [r.first_step for r in checkpoints.read_attempt_records(f"{base}/checkpoints")] == [0, 3]
