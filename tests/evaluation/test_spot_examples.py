"""spot_training on the local emulator with the Keras, XGBoost and a foreign-layout trainer.

Each framework example is preempted at least once (after it committed a checkpoint of its own)
and the evaluation must score the newest committed step. The foreign trainer (its own pickles, no
kfp-spot import) runs prepare -> launch -> evaluate with ``allow_foreign_layout``.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kfp_spot import checkpoints
from kfp_spot.drill import CheckpointPreemptionDrill
from tests.evaluation.foreign import write_foreign_project

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
KERAS_IMAGE = "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest"
XGBOOST_IMAGE = "us-docker.pkg.dev/vertex-ai/training/xgboost-cpu.2-1:latest"


def run_spot_training(tmp_path, source, args, image, *, preempt="drill", **pipeline_args):
    """spot_training under kfp.local against a fresh emulator; returns (outputs, emulator rows)."""
    from kfp import local

    from kfp_spot.emulator import Emulator
    from kfp_spot.pipelines.spot_training import spot_training

    job_root = tmp_path / "job"
    root = str(job_root / "checkpoints")
    with Emulator(tmp_path / "emulator", grace_period=10.0) as emu:

        def running() -> list[tuple[str, int]]:
            names = [j["name"] for j in emu.list_jobs() if j.get("state") == "JOB_STATE_RUNNING"]
            return [(n, len(emu.attempts(n))) for n in names]

        local.init(
            local.SubprocessRunner(use_venv=False),
            pipeline_root=str(tmp_path / "pipeline_root"),
            raise_on_error=False,
        )
        stop = threading.Event()
        if preempt == "drill":
            watcher = CheckpointPreemptionDrill(root, running, emu.preempt, count=1)
        else:  # the foreign trainer commits no kfp-spot step: preempt once its own file appears

            def foreign_drill() -> None:
                while not stop.wait(0.2):
                    if (job_root / "checkpoints" / preempt).exists() and running():
                        emu.preempt(running()[0][0])
                        return

            watcher = None
            thread = threading.Thread(target=foreign_drill, daemon=True)
            thread.start()
        try:
            if watcher is not None:
                watcher.__enter__()
            task = spot_training(
                project="local-project",
                source=str(source),
                training_args=args,
                executor_image_uri=image,
                base_output_directory=str(job_root),
                staging_uri=str(tmp_path / "staging"),
                api_endpoint=emu.endpoint,
                **pipeline_args,
            )
        finally:
            stop.set()
            if watcher is not None:
                watcher.__exit__(None, None, None)
        ledger = [row for j in emu.list_jobs() for row in emu.attempts(j["name"])]
        specs = [j["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"] for j in emu.list_jobs()]
    return task.outputs, ledger, specs, root


@pytest.mark.parametrize(
    ("example", "args", "image"),
    [
        (
            "keras",
            ["--epochs", "4", "--checkpoint-every", "10", "--batch-seconds", "0.05"],
            KERAS_IMAGE,
        ),
        (
            "xgboost",
            ["--rounds", "40", "--checkpoint-every", "4", "--round-seconds", "0.1"],
            XGBOOST_IMAGE,
        ),
    ],
)
def test_framework_example_is_preempted_resumes_and_is_evaluated_from_the_newest_step(
    tmp_path, example, args, image
):
    outputs, ledger, specs, root = run_spot_training(
        tmp_path, REPO / "examples" / example, args, image
    )
    assert str(outputs["outcome"]) == "SUCCEEDED"
    reasons = [row["endReason"] for row in ledger]
    assert "PREEMPTED" in reasons and reasons[-1] == "SUCCEEDED", reasons
    assert {s["executorImageUri"] for s in specs} == {image}
    records = checkpoints.read_attempt_records(root)
    assert any(r.first_step for r in records), "no attempt resumed from a checkpoint"
    newest = checkpoints.latest(root)
    metrics = outputs["metrics"].metadata
    assert int(metrics["checkpoint_step"]) == newest.step == int(metrics["step"])
    assert metrics["checkpoint_manifest_sha256"] == newest.digest
    assert metrics["checkpoint_layout"] == "kfp-spot" and metrics["checkpoint_verified"] is True
    assert metrics["accuracy"] >= 0.85 and outputs["passed"] is True
    assert outputs["checkpoint"].metadata["layout"] == "kfp-spot"


def test_foreign_trainer_prepare_launch_evaluate_with_the_explicit_input(tmp_path):
    source = write_foreign_project(tmp_path / "src")
    outputs, ledger, _, root = run_spot_training(
        tmp_path,
        source,
        ["--steps", "30", "--step-seconds", "0.1"],
        "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest",
        preempt="ckpt-5.pkl",
        allow_foreign_layout=True,
        thresholds={"accuracy": ">=0.85"},
    )
    assert str(outputs["outcome"]) == "SUCCEEDED"
    assert ledger[0]["endReason"] == "PREEMPTED"
    assert outputs["checkpoint"].metadata["layout"] == "foreign"
    assert int(outputs["checkpoint"].metadata["latest_step"]) == -1
    metrics = outputs["metrics"].metadata
    assert metrics["checkpoint_layout"] == "foreign" and metrics["checkpoint_verified"] is False
    assert int(metrics["trained_steps"]) == 30 and outputs["passed"] is True
    assert checkpoints.list_steps(root) == []
