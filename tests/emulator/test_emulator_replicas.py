"""Replica plumbing that needs no running emulator: container command lines, clean stops."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from google.cloud.aiplatform_v1.types import ContainerSpec

from kfp_spot.emulator import Emulator, orphans, replicas
from kfp_spot.emulator.replicas import container_command

PARENT = "projects/local-project/locations/us-central1"


def test_container_command_maps_entrypoint_env_and_local_dirs():
    spec = ContainerSpec.pb(
        ContainerSpec(
            image_uri="us-docker.pkg.dev/p/r/trainer:1",
            command=["python", "-m", "trainer.task"],
            args=["--epochs", "3"],
        )
    )
    env = {
        "AIP_MODEL_DIR": "/runs/a/model",
        "AIP_CHECKPOINT_DIR": "/runs/a/checkpoints",
        "AIP_TENSORBOARD_LOG_DIR": "gs://bucket/a/logs",  # remote: nothing to mount
        "CLOUD_ML_JOB_ID": "123",
    }
    cmd = container_command("/usr/bin/docker", spec, env)
    assert cmd[:4] == ["/usr/bin/docker", "run", "--rm", "--network=host"]
    mounts = [cmd[i + 1] for i, part in enumerate(cmd) if part == "-v"]
    assert mounts == ["/runs/a/model:/runs/a/model", "/runs/a/checkpoints:/runs/a/checkpoints"]
    assert "CLOUD_ML_JOB_ID=123" in cmd
    tail = cmd[cmd.index("--entrypoint") :]
    assert tail == [
        "--entrypoint",
        "python",
        "us-docker.pkg.dev/p/r/trainer:1",
        "-m",
        "trainer.task",
        "--epochs",
        "3",
    ]
    plain = container_command("podman", ContainerSpec.pb(ContainerSpec(image_uri="img")), {})
    assert plain == ["podman", "run", "--rm", "--network=host", "img"]


def test_clean_stop_and_restart_carries_the_job_on(
    tmp_path, env_cache, api, make_job, until, lines
):
    progress = tmp_path / "progress.txt"
    state = tmp_path / "state"
    body = make_job("--steps", "40", "--progress", str(progress))
    with Emulator(state, grace_period=1.0, env_cache_dir=env_cache) as emu:
        status, job = api("POST", f"{emu.endpoint}/v1/{PARENT}/customJobs", body)
        assert status == 200
        until(lambda: any("step 1" in x for x in lines(progress)), 60, "the first steps")
    # stopped: the replica got SIGTERM, the attempt is closed, the job waits for the next start
    assert any(x.endswith(" sigterm") for x in lines(progress))
    with Emulator(state, grace_period=1.0, env_cache_dir=env_cache) as emu:
        assert emu.job(job["name"]).display_name == "toy"
        done = emu.wait(job["name"], timeout=60)
        assert done.state.name == "JOB_STATE_SUCCEEDED"
        assert [r["endReason"] for r in emu.attempts(job["name"])] == [
            "EMULATOR_RESTARTED",
            "SUCCEEDED",
        ]


_BSD_PS = f"""#!{sys.executable}
# macOS's `ps -E -ww -o stat= -o command= -p PID`, from Linux's /proc: the process's state, its
# command line, then its environment, one line, as their bytes (what BSD ps may print of one that
# is not UTF-8); nothing and exit 1 when there is no such process.
import pathlib, sys
if sys.argv[1:-1] != {list(orphans.PS_ENVIRONMENT[1:])!r}:
    sys.exit("ps: unexpected arguments " + repr(sys.argv[1:]))
proc = pathlib.Path("/proc", sys.argv[-1])
try:
    state = (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0]
    words = [w for f in ("cmdline", "environ") for w in (proc / f).read_bytes().split(b"\\0")]
except OSError:
    sys.exit(1)
sys.stdout.buffer.write(state.encode() + b" " + b" ".join(w for w in words if w) + b"\\n")
"""


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="the stand-in ps reads /proc")
def test_where_there_is_no_proc_an_orphan_is_told_by_its_environment_as_ps_shows_it(
    tmp_path, monkeypatch
):
    # macOS has no /proc: a restarted emulator asks ps for the environment of its orphans.
    (tmp_path / "ps").write_text(_BSD_PS)
    (tmp_path / "ps").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    mark = f"{replicas.TOKEN_VAR}=0123abcd"
    # A variable that is not UTF-8 (a Latin-1 path) is shown as its bytes.
    env = {**os.environ, replicas.TOKEN_VAR: "0123abcd", "KFP_SPOT_TEST_PATH": "/caf\udce9"}
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        assert orphans._alive_in_ps(orphan.pid, mark)
        assert not orphans._alive_in_ps(orphan.pid, f"{replicas.TOKEN_VAR}=another")  # reused pid
        assert not orphans._alive_in_ps(os.getpid(), mark)  # not started with a token
    finally:
        orphan.kill()
    zombie = orphan.pid  # killed, not yet reaped
    deadline = time.monotonic() + 10
    while orphans._alive_in_ps(zombie, mark):
        assert time.monotonic() < deadline, "a zombie counted as alive"
        time.sleep(0.05)
    orphan.wait()
    assert not orphans._alive_in_ps(zombie, mark)  # gone
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert not orphans._alive_in_ps(os.getpid(), mark)  # no ps at all: never signalled
