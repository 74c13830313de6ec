"""A containerSpec CustomJob on the emulator runs in the image it names, and hears its preemption.

Vertex AI runs a custom-container job's image as it is; a preemption sends SIGTERM to the
container's process, then the grace period, then kills it. The emulator runs the replica with
``podman run`` (or ``docker run``): these tests check that the image really runs (not the host's
Python), that the job's output directories are writable from inside the container, and that the
preemption's SIGTERM reaches the training process inside it, through the container runtime.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from google.cloud import aiplatform_v1

from kfp_spot import RUNTIME_IMAGE, image
from kfp_spot.emulator import Emulator
from tests.vertex_jobs import job_client

PARENT = "projects/local-project/locations/us-central1"

# The trainer inside the image: it records where it runs, waits to be preempted (writing down the
# SIGTERM it received), and finishes on the attempt after that.
TRAINER = r"""
import os, pathlib, signal, sys, time
def local(var):
    return pathlib.Path(os.environ[var].split("://", 1)[-1])
ckpt, model = local("AIP_CHECKPOINT_DIR"), local("AIP_MODEL_DIR")
ckpt.mkdir(parents=True, exist_ok=True)
heard = ckpt / "sigterm-heard"
if heard.exists():
    model.mkdir(parents=True, exist_ok=True)
    (model / "python").write_text(sys.executable)
    sys.exit(0)
def on_sigterm(*_):
    heard.write_text("SIGTERM")
    sys.exit(143)
signal.signal(signal.SIGTERM, on_sigterm)
(ckpt / "started").write_text(str(os.getpid()))
print("training", flush=True)
while True:
    time.sleep(0.05)
"""


def container_job(image_uri: str, base: Path) -> aiplatform_v1.CustomJob:
    return aiplatform_v1.CustomJob(
        display_name="container-job",
        job_spec={
            "worker_pool_specs": [
                {
                    "machine_spec": {"machine_type": "n1-standard-4"},
                    "replica_count": 1,
                    "container_spec": {
                        "image_uri": image_uri,
                        "command": ["python3", "-c", TRAINER],
                    },
                }
            ],
            "base_output_directory": {"output_uri_prefix": str(base)},
            "scheduling": {"strategy": aiplatform_v1.Scheduling.Strategy.SPOT},
        },
    )


def wait_for(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {path}")
        time.sleep(0.05)


def test_a_preempted_container_replica_hears_sigterm_and_the_job_resumes(
    images: dict[str, str], engine: image.Engine, tmp_path: Path
) -> None:
    base = tmp_path / "out"
    with Emulator(tmp_path / "state", grace_period=20.0) as emu:
        client = job_client(emu.endpoint)
        job = client.create_custom_job(parent=PARENT, custom_job=container_job(RUNTIME_IMAGE, base))
        # A container takes seconds to start; the preemption must find the trainer running.
        wait_for(base / "checkpoints" / "started", timeout=180)
        emu.preempt(job.name)
        done = emu.wait(job.name, timeout=300)
        attempts = emu.attempts(job.name)
        logs = "\n".join(entry["text"] for entry in emu.logs(job.name))
    assert done.state.name == "JOB_STATE_SUCCEEDED", (done.error.message, logs)
    # The SIGTERM reached Python inside the container, within the grace period (not a SIGKILL).
    assert (base / "checkpoints" / "sigterm-heard").read_text() == "SIGTERM"
    assert [a["endReason"] for a in attempts][:1] == ["PREEMPTED"], attempts
    assert len(attempts) == 2, attempts
    # The image's Python ran (its venv, see the Dockerfile), not this machine's.
    assert (base / "model" / "python").read_text().startswith("/opt/kfp-spot/")
