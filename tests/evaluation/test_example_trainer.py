"""The real example trainer: packaged, trained in its package environment, evaluated."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from kfp_spot import checkpoints, envcache
from kfp_spot.cli import main as cli_main
from kfp_spot.evaluation import evaluate
from kfp_spot.packaging import prepare_package
from kfp_spot.pipelines import catalog

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trainer"


@pytest.fixture(scope="module")
def trained(tmp_path_factory, env_cache):
    root = tmp_path_factory.mktemp("example")
    info = prepare_package(str(EXAMPLE), str(root / "stage"), check_import=True)
    python = envcache.package_env(list(info.package_uris), env_cache)
    env = dict(
        os.environ,
        AIP_CHECKPOINT_DIR=str(root / "base" / "checkpoints"),
        AIP_MODEL_DIR=str(root / "base" / "model"),
    )
    # The tests below read its checkpoints only: no model.joblib, which would import
    # scikit-learn for an export nothing here reads (the pipelines' tests export it).
    args = ["--epochs", "4", "--checkpoint-every", "1", "--no-sklearn-model"]
    subprocess.run(
        [str(python), "-m", info.python_module, *args],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return info, env["AIP_CHECKPOINT_DIR"]


def test_example_package_metadata(trained):
    info, _ = trained
    assert info.name == "kfp-spot-example-trainer"
    assert info.python_module == "trainer.task"
    assert info.import_checked  # imports with only its declared deps and kfp-spot
    assert any(r.startswith("scikit-learn") for r in info.requirements)


def test_example_checkpoint_is_evaluated_with_its_confusion_matrix(trained, env_cache):
    info, root = trained
    latest = checkpoints.latest(root)
    result = evaluate(
        root,
        list(info.package_uris),
        entry_point="trainer.evaluate:evaluate",
        thresholds={"accuracy": ">=0.5"},
        cache_dir=env_cache,
    )
    assert result.step == latest.step and result.manifest_digest == latest.digest
    assert 0.5 <= result.metrics["accuracy"] <= 1.0 and result.passed
    matrix = result.confusion_matrix
    assert matrix.labels == tuple(str(d) for d in range(10))
    assert sum(map(sum, matrix.matrix)) == result.metrics["examples"]


def test_best_by_the_training_loss_the_trainer_records(trained, env_cache):
    info, root = trained
    committed = checkpoints.committed_steps(root)
    best = min(committed, key=lambda m: (m.metadata["metrics"]["loss"], -m.step))
    result = evaluate(
        root,
        list(info.package_uris),
        entry_point="trainer.evaluate:evaluate",
        step="best:loss",
        cache_dir=env_cache,
    )
    assert result.step == best.step


def _evaluate_only(root: str, run_dir: Path, *params: str):
    """``kfp-spot run`` of the evaluate_checkpoint template on ``root``: no CustomJob."""
    template = catalog.pipeline_path("evaluate_checkpoint")
    args = ["run", "--template", str(template), "--source", str(EXAMPLE), "--run-dir", str(run_dir)]
    for param in (f"checkpoint_uri={root}", *params):
        args += ["--param", param]
    return CliRunner().invoke(cli_main, args)


@pytest.fixture(scope="module")
def evaluated_run(trained, tmp_path_factory):
    """An evaluation-only run on the trained checkpoint: its run directory and what it printed.

    One pipeline run (its kfp.local tasks are processes), with a threshold so that it also
    passes or fails: the tests below each read their part of it.
    """
    run_dir = tmp_path_factory.mktemp("evaluated") / "run"
    result = _evaluate_only(trained[1], run_dir, 'thresholds={"accuracy": ">=0.5"}')
    assert result.exit_code == 0, result.output
    return run_dir, result.output


def test_the_evaluate_checkpoint_template_runs_locally_on_the_examples_checkpoint(
    trained, evaluated_run
):
    # it launches and deploys nothing, so it declares no api_endpoint: none is needed locally
    _, root = trained
    run_dir, _ = evaluated_run
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outcome"] == "SUCCEEDED" and record["passed"] is True
    assert int(record["metrics"]["checkpoint_step"]) == checkpoints.latest(root).step
    assert record["metrics"]["checkpoint_uri"] == root
    assert record["job_names"] == []  # nothing was sent to the emulator


def test_an_evaluation_only_run_names_the_checkpoint_it_evaluated_not_a_training(
    trained, evaluated_run
):
    # The run trained nothing: its summary and run.json name the earlier run's checkpoint and
    # step it scored, claim no attempts, preemptions or resumes, and take none of that run's
    # attempt records (its report would count them as this run's).
    _, root = trained
    step = checkpoints.latest(root).step
    assert checkpoints.read_attempt_records(root)  # the training run's, not this run's
    run_dir, output = evaluated_run
    printed = output[output.index("outcome:") :]
    assert f"evaluated:          step {step} of {root}\n" in printed, printed
    assert "training:           none (the pipeline launched no CustomJob)\n" in printed, printed
    for claim in ("attempts:", "preemptions:", "resumed from steps:", "latest checkpoint:"):
        assert claim not in printed, printed
    assert str(run_dir / "job") not in printed, printed
    record = json.loads((run_dir / "run.json").read_text())
    assert record["evaluated_checkpoint"] == {"uri": root, "step": step}
    assert record["checkpoint_uri"] == "" and record["attempt_records"] == []
    assert str(run_dir / "job") not in json.dumps(record)
    assert record["latest_step"] is None and record["resumed_from_steps"] == []
    assert record["preemptions"] is None and record["job_names"] == []


def _no_training_figures(report: str) -> None:
    for figure in ("Attempts", "Preemptions", "Checkpoints on disk", "Latest step", "Goodput"):
        assert f"| {figure} |" not in report, report
    for section in ("## Cost", "## Attempts", "## Training attempts", "No attempt records"):
        assert section not in report, report
    assert "| Training | none (the pipeline launched no CustomJob) |\n" in report, report


def test_an_evaluation_only_runs_report_names_the_checkpoint_not_a_training(trained, evaluated_run):
    # report.md says what the printed summary says: no training (no zero attempts, costs or
    # unknown goodput of a training that never was), and the checkpoint and step evaluated;
    # `kfp-spot report` writes the same from run.json.
    _, root = trained
    step = checkpoints.latest(root).step
    run_dir, output = evaluated_run
    written = (run_dir / "report.md").read_text()
    _no_training_figures(written)
    assert f"| Evaluated | step {step} of {root} |\n" in written, written
    printed = next(line for line in output.splitlines() if line.startswith("evaluated:"))
    assert f"| Evaluated | {printed.split(':', 1)[1].strip()} |" in written, (printed, written)
    assert "## Evaluation metrics" in written and "| accuracy |" in written, written
    again = CliRunner().invoke(cli_main, ["report", str(run_dir)])
    assert again.exit_code == 0, again.output
    assert (run_dir / "report.md").read_text() == written


def test_a_failed_evaluation_only_run_names_the_checkpoint_it_was_asked_to_evaluate(
    trained, tmp_path
):
    # No metrics (the step does not exist): the summary, run.json and report still name the
    # checkpoint the run was given, at an unknown step.
    _, root = trained
    run_dir = tmp_path / "run"
    result = _evaluate_only(root, run_dir, "step=99")
    assert result.exit_code != 0, result.output
    assert "step 99 does not exist" in result.output, result.output
    printed = result.output[result.output.index("outcome:") :]
    named = f"{root}, step unknown (the evaluation gave no metrics)"
    assert f"evaluated:          {named}\n" in printed, printed
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outcome"] == "PIPELINE_FAILED" and record["metrics"] == {}
    assert record["evaluated_checkpoint"] == {"uri": root, "step": None}
    report = (run_dir / "report.md").read_text()
    _no_training_figures(report)
    assert f"| Evaluated | {named} |\n" in report, report


def test_a_training_run_that_stops_before_its_job_claims_no_evaluated_checkpoint(tmp_path):
    # continue_training takes a checkpoint_uri to train from: stopped before its CustomJob (the
    # directory holds no step), it evaluated nothing, and neither the summary nor run.json says so.
    empty = tmp_path / "no-steps"
    empty.mkdir()
    run_dir = tmp_path / "run"
    template = catalog.pipeline_path("continue_training")
    args = ["run", "--template", str(template), "--run-dir", str(run_dir)]
    result = CliRunner().invoke(cli_main, [*args, "--param", f"checkpoint_uri={empty}"])
    assert result.exit_code != 0, result.output
    assert "holds no committed step" in result.output, result.output
    printed = result.output[result.output.index("outcome:") :]
    assert "training:           none" in printed and "evaluated:" not in printed, printed
    record = json.loads((run_dir / "run.json").read_text())
    assert "evaluated_checkpoint" not in record, record
    assert "| Evaluated |" not in (run_dir / "report.md").read_text()
