"""Replica plumbing that needs no running emulator: container command lines, clean stops."""

from __future__ import annotations

from google.cloud.aiplatform_v1.types import ContainerSpec

from kfp_spot.emulator import Emulator
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
