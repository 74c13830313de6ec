"""The whole spot_training pipeline under kfp.local against the emulator, with a preemption."""

import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from google.cloud import aiplatform_v1

from kfp_spot.emulator import Emulator
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.pipelines import local_run
from tests.vertex_jobs import job_client

pytestmark = pytest.mark.slow

KFP_SPOT = Path(sys.executable).with_name("kfp-spot")
# Anything a terminal would interpret: escape sequences, carriage returns, other C0 controls.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """`kfp-spot run` of the bundled example with one preemption: its run.json is the run's
    result (``LocalRunResult.to_json``). One whole run for what the user sees on the console
    and for what the run did, each checked by the tests below (a run costs the suite ~10 s);
    the Python API's own whole runs are the pulled template's and the interrupted one's."""
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    proc = subprocess.run(
        [
            *(str(KFP_SPOT), "run", "--run-dir", str(run_dir)),
            "--preemptions",
            "1",
            "--grace-period",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    record = run_dir / "run.json"
    return run_dir, json.loads(record.read_text()) if record.exists() else {}, proc


def test_a_successful_run_prints_a_few_lines_and_keeps_the_executor_logs(demo_run):
    run_dir, _, proc = demo_run
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines() + proc.stderr.splitlines()
    assert len(lines) <= 40, "\n".join(lines)
    assert proc.stdout.startswith("outcome:            SUCCEEDED\n")  # the summary, on stdout
    for task in ("prepare-package", "launch-spot-job", "evaluate-checkpoint", "promote-model"):
        assert re.search(rf"^kfp-spot: \[\d+:\d\d\] {task} started$", proc.stderr, re.M)
        assert re.search(rf"^kfp-spot: \[\d+:\d\d\] {task} succeeded in ", proc.stderr, re.M)
    assert re.search(
        r"attempt 1 preempted after [\d.]+ s; latest checkpoint: step \d+", proc.stderr
    )
    assert "attempt 2 running (SPOT, n1-standard-4)" in proc.stderr
    assert "KFP Executor" not in proc.stdout + proc.stderr
    assert not CONTROL.search((proc.stdout + proc.stderr).replace("\n", ""))
    logs = run_dir / "logs"
    pipeline_log = (logs / "pipeline.log").read_text()
    assert "Executing task 'launch-spot-job'" in pipeline_log  # kfp.local's own line
    launch_log = (logs / "launch-spot-job.log").read_text()
    assert re.search(r"submitted projects/\d{12}/locations/us-central1/customJobs/\d+", launch_log)
    assert "launch_spot_job: SUCCEEDED; attempts=2" in launch_log  # the launcher's line
    assert "Executing task 'prepare-package'" not in launch_log
    assert f"logs            {logs}" in proc.stdout


def test_training_survives_a_preemption_and_resumes_from_a_checkpoint(demo_run):
    _, result, _ = demo_run
    assert result["outcome"] == Outcome.SUCCEEDED.value
    assert result["preemptions"] >= 1
    reasons = [row["endReason"] for row in result["ledger"]]
    assert reasons[0] == "PREEMPTED" and reasons[-1] == "SUCCEEDED"
    assert result["resumed_from_steps"], "no attempt resumed from a checkpoint"
    assert min(result["resumed_from_steps"]) > 0


def test_metrics_are_computed_from_the_committed_checkpoint(demo_run):
    _, result, _ = demo_run
    assert result["latest_step"] is not None and result["latest_step"] > 0
    assert int(result["metrics"]["checkpoint_step"]) == result["latest_step"]
    assert 0.85 <= result["metrics"]["accuracy"] <= 1.0
    assert result["passed"] is True


def test_the_emulator_stored_a_spot_custom_job(demo_run):
    run_dir, result, _ = demo_run
    # Reopen the emulator on the run's state: what it stored, read back through the real client.
    with Emulator(run_dir / "emulator") as emu:
        client = job_client(emu.endpoint)
        assert result["job_names"], "the run names no CustomJob: nothing below would be checked"
        for name in result["job_names"]:
            job = client.get_custom_job(name=name)
            assert job.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
            assert job.state == aiplatform_v1.JobState.JOB_STATE_SUCCEEDED


def _promotion_records(run_dir):
    return list((run_dir / "pipeline_root").glob("*/promote-model/promoted_model/PROMOTION.json"))


def test_a_passing_quality_gate_promotes_the_model(demo_run):
    run_dir, result, _ = demo_run
    (record,) = _promotion_records(run_dir)
    model_dir = run_dir / "job" / "model"
    trained = {p.name: p.read_bytes() for p in model_dir.iterdir()}
    assert trained, "the job wrote no model"
    promoted = {p.name: p.read_bytes() for p in record.parent.iterdir() if p != record}
    assert promoted == trained
    assert f'"checkpoint_step": {float(result["latest_step"])}' in record.read_text()


@pytest.fixture(scope="module")
def pulled_run(tmp_path_factory):
    """The committed template pushed to and pulled from the registry, then run with a quality
    gate it cannot pass (2 epochs, no preemption): one run for the two tests below. The gate that
    passes and promotes is the demo run's (test_a_passing_quality_gate_promotes_the_model)."""
    from kfp_spot import __version__
    from kfp_spot.pipelines import catalog
    from kfp_spot.registry import RegistryServer, pull, push

    base = tmp_path_factory.mktemp("pulled")
    committed = catalog.pipeline_path("spot_training")
    with RegistryServer(base / "registry") as server:
        host = server.repository_url()
        pushed = push(committed, host, __version__)
        pulled = pull(host, "spot-training", tag="latest", output=base / "pulled.yaml")
    result = local_run.run_local(
        base / "run",
        template=pulled,
        training_args=("--epochs", "2", "--checkpoint-every", "1"),
        preemptions=0,
        thresholds={"accuracy": ">=0.9999"},
        progress=print,
    )
    return committed, pushed, pulled, base / "run", result


def test_a_failing_quality_gate_skips_promotion(pulled_run):
    *_, run_dir, result = pulled_run
    assert result.outcome is Outcome.SUCCEEDED
    assert result.succeeded  # `kfp-spot run` exits 0: a failed gate is not a failed run
    assert result.passed is False
    assert result.metrics["accuracy"] < 0.9999
    assert _promotion_records(run_dir) == []
    # What a script reads to stop on the gate (README: `jq -e '.passed == true' run.json`).
    assert json.loads((run_dir / "run.json").read_text())["passed"] is False


def test_a_template_pulled_from_the_registry_runs_locally(pulled_run):
    from kfp_spot import __version__

    committed, pushed, pulled, _, result = pulled_run
    assert set(pushed.tags) == {__version__, "latest"}
    assert pulled.read_bytes() == committed.read_bytes()
    assert result.outcome is Outcome.SUCCEEDED
    assert result.latest_step == 2
    assert int(result.metrics["checkpoint_step"]) == 2  # evaluated the pulled run's checkpoint


def test_the_run_report_matches_the_emulator_ledger(demo_run):
    run_dir, result, _ = demo_run
    png = run_dir / "report.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image  # the size alone: no need to import matplotlib in this process

    with Image.open(png) as image:
        width, height = image.size
    assert width > 400 and height > 300
    markdown = (run_dir / "report.md").read_text()
    # The ledger as the emulator serves it, re-read now through its own state.
    with Emulator(run_dir / "emulator") as emu:
        rows = [row for name in result["job_names"] for row in emu.attempts(name)]
    paid = sum(row["cost"] for row in rows)  # what each attempt's strategy paid
    on_demand = sum(row["onDemandCost"] for row in rows)
    billable = sum(row["billableSeconds"] for row in rows)
    assert f"| Cost (what the run paid) | ${paid:,.6f} |" in markdown
    assert f"| On-demand cost (same time) | ${on_demand:,.6f} |" in markdown
    assert f"| Billable time | {billable:.1f} s |" in markdown
    assert f"| Attempts | {len(rows)} |" in markdown


def test_an_interrupted_run_says_so_instead_of_a_short_drill(tmp_path):
    # Ctrl-C while the first attempt runs: the drill had no time to finish. The note said "the
    # job was preempted 0 of the 2 time(s) asked ... save more often or train longer", as if the
    # drill had failed.
    main = threading.get_ident()
    events: list[str] = []
    sent = threading.Event()

    def status(text: str) -> None:  # the live status line names the running attempt
        if "attempt 1 running" in text and not sent.is_set():
            sent.set()
            signal.pthread_kill(main, signal.SIGINT)  # as Ctrl-C: the main thread takes it

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            local_run.run_local(
                tmp_path / "run", preemptions=2, progress=events.append, status=status
            )
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sent.is_set() and any(e.startswith("interrupted; run.json records") for e in events)
    notes = [e for e in events if e.startswith("note:") and "preempted" in e]
    assert len(notes) == 1, events
    assert re.fullmatch(
        r"note: the run was interrupted before the preemption drill finished \(the job was "
        r"preempted [01] of the 2 time\(s\) asked\)",
        notes[0],
    ), notes


def test_a_training_that_saved_nothing_is_told_to_checkpoint_not_to_train_longer(tmp_path):
    # A trainer that never checkpoints was told "save more often or train longer to see a
    # preemption": no length of training gives the drill a checkpoint to preempt after.
    from kfp_spot.pipelines.local_drill import saved_anything, short_drill

    root = tmp_path / "job" / "checkpoints"
    assert not saved_anything(str(root))
    root.mkdir(parents=True)
    assert not saved_anything(str(root))
    assert short_drill([], 1, interrupted=False, saved=False) == (
        "the job was preempted 0 of the 1 time(s) asked: the drill preempts an attempt only after "
        "it commits a new kfp_spot.trainer checkpoint (step-<n>/manifest.json), and the training "
        "saved nothing in its checkpoint directory (AIP_CHECKPOINT_DIR): on Vertex AI each "
        "preemption would restart it from the beginning; checkpoint with kfp_spot.trainer "
        "(CheckpointManager, or a framework's SpotCheckpoint callback)"
    )
    (root / "weights.pkl").write_bytes(b"its own format")  # saved, in a layout of its own
    assert saved_anything(str(root))
    assert short_drill([], 1, interrupted=False, saved=True).endswith(
        "save more often or train longer to see a preemption"
    )
