"""The committed components run inside the runtime image, as Vertex AI Pipelines would run them.

prepare_package → launch_spot_job (preempted once, resumed) → evaluate_checkpoint, each started
with its compiled command and args from its committed component.yaml and the executor input the
KFP driver would pass, inside `podman run --network=host` (or docker), against the local emulator
on the host. Paths are mounted at the same place in the container, as a shared disk would be.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kfp_spot import RUNTIME_IMAGE, checkpoints, image
from kfp_spot.drill import CheckpointPreemptionDrill
from kfp_spot.emulator import Emulator
from tests.image.kfp_task import Task, prepare

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "trainer"
TRAINING_ARGS = ["--epochs", "24", "--checkpoint-every", "3", "--step-seconds", "0.2"]


def container(engine: image.Engine, image_ref: str, task: Task, mounts: list[Path]) -> list[str]:
    """`<engine> run` of ``task``'s command in ``image_ref``: the command replaces the entrypoint,
    as a Kubernetes container's ``command`` does."""
    volumes = [f"--volume={m}:{m}" for m in mounts]
    return [
        engine.name,
        "run",
        "--rm",
        "--network=host",
        *volumes,
        f"--entrypoint={task.command[0]}",
        image_ref,
        *task.command[1:],
    ]


def run(engine, image_ref, task, mounts, timeout=600) -> dict:
    proc = subprocess.run(
        container(engine, image_ref, task, mounts),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{task.name} failed in {image_ref}:\n{proc.stdout}{proc.stderr}"
    return task.outputs()


@pytest.mark.slow
def test_prepare_launch_evaluate_run_from_their_yaml_inside_the_image(
    engine, images, tmp_path: Path
):
    root = tmp_path / "pipeline_root"
    job_dir = tmp_path / "job"
    mounts = [tmp_path, EXAMPLE]
    # Run by image ID: another checkout on the machine may retag the names meanwhile.
    runtime_id, examples_id = images[RUNTIME_IMAGE], images[image.EXAMPLES_IMAGE]

    prepare_task = prepare(
        "prepare_package",
        {"source": str(EXAMPLE), "staging_uri": str(tmp_path / "staging")},
        root,
    )
    assert prepare_task.image == RUNTIME_IMAGE  # the image the YAML names is the one built here
    prepared = run(engine, runtime_id, prepare_task, mounts)
    package = prepared["package"]
    assert package.metadata["python_module"] == "trainer.task"
    assert Path(package.uri).is_file()

    checkpoint_root = str(job_dir / "checkpoints")
    with Emulator(tmp_path / "emulator", grace_period=10.0) as emu:
        launch_task = prepare(
            "launch_spot_job",
            {
                "project": "local-project",
                "package": package,
                "args": TRAINING_ARGS,
                "base_output_directory": str(job_dir),
                "api_endpoint": emu.endpoint,
                "poll_interval_seconds": 0.5,
            },
            root,
        )
        assert launch_task.image == RUNTIME_IMAGE

        def running_attempts():
            running = [j["name"] for j in emu.list_jobs() if j.get("state") == "JOB_STATE_RUNNING"]
            return [(name, len(emu.attempts(name))) for name in running]

        with CheckpointPreemptionDrill(checkpoint_root, running_attempts, emu.preempt) as drill:
            launched = run(engine, runtime_id, launch_task, mounts)
        (job,) = emu.list_jobs()
        ledger = emu.attempts(job["name"])
    assert launched["Output"] == "SUCCEEDED"
    assert len(drill.preempted_at_steps) == 1
    assert [row["endReason"] for row in ledger] == ["PREEMPTED", "SUCCEEDED"]
    report = launched["job_report"].metadata
    assert report["preemptions"] == 1
    latest = checkpoints.latest(checkpoint_root)
    assert latest is not None and launched["checkpoint"].metadata["latest_step"] == latest.step

    evaluate_task = prepare(
        "evaluate_checkpoint",
        {
            "checkpoint": launched["checkpoint"],
            "package": package,
            "thresholds": {"accuracy": ">=0.5"},
        },
        root,
    )
    assert evaluate_task.image == RUNTIME_IMAGE
    # The example trainer's evaluate() needs scikit-learn: it runs in the runtime image plus the
    # `examples` extra (the Dockerfile's stage on top of the runtime image; asserted below).
    runtime_layers = engine.inspect(runtime_id, "{{json .RootFS.Layers}}")
    examples_layers = engine.inspect(examples_id, "{{json .RootFS.Layers}}")
    assert examples_layers.startswith(runtime_layers[:-1])
    evaluated = run(engine, examples_id, evaluate_task, mounts)
    assert evaluated["Output"] is True
    metrics = evaluated["metrics"].metadata
    assert metrics["accuracy"] >= 0.5
    assert metrics["checkpoint_step"] == latest.step
