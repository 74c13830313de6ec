"""The report shows the trainer's own metric when it records no ``loss``.

A trainer that saves ``metrics={"rmse": ...}`` gets "Final rmse" in report.md and its rmse in
report.png's lower panel, both from the one choice (``kfp_spot.reports.run.chart_metric``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kfp_spot import checkpoints
from kfp_spot.reports import load_run, timeline_figure, write_report
from kfp_spot.reports.run import chart_metric
from kfp_spot.trainer import CheckpointManager

JOB = "projects/local-project/locations/us-central1/customJobs/42"


def _run_dir(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    doc = {"outcome": "SUCCEEDED", "job_names": [JOB], "checkpoint_uri": str(tmp_path / "ckpt")}
    (run_dir / "run.json").write_text(json.dumps(doc))
    return run_dir


def _train(root: Path, metrics_at: Any, steps: int = 4) -> None:
    """The real trainer, saving ``metrics_at(step)`` with every step."""
    ckpt = CheckpointManager(str(root), keep_last=None, handle_signals=False, interval=1)
    with ckpt:
        for step in range(1, steps + 1):
            time.sleep(0.01)  # distinct commit times
            ckpt.maybe_save(step, {"w": float(step)}, metrics=metrics_at(step))


def _final_row(markdown: str) -> tuple[str, str]:
    match = re.search(r"^\| Final (.+?) \| (.*) \|$", markdown, re.MULTILINE)
    assert match, markdown
    return match.group(1), match.group(2)


def test_a_trainer_that_records_rmse_gets_its_rmse_in_both_report_files(tmp_path: Path):
    _train(tmp_path / "ckpt", lambda step: {"rmse": 2.0 / step})
    run_dir = _run_dir(tmp_path)

    report = write_report(run_dir)

    assert _final_row(report.markdown.read_text()) == ("rmse", f"{2.0 / 4:.6g}")
    run = load_run(run_dir)
    assert run.metric_name == "rmse"
    metric_ax = timeline_figure(run).axes[1]
    (line,) = [ln for ln in metric_ax.lines if ln.get_gid() == "loss"]
    assert list(line.get_ydata()) == pytest.approx([2.0 / s for s in range(1, 5)])
    assert metric_ax.get_ylabel() == "rmse"
    assert not [t for t in metric_ax.texts if "no " in t.get_text()]


def test_loss_is_charted_when_recorded_beside_other_metrics(tmp_path: Path):
    _train(tmp_path / "ckpt", lambda step: {"accuracy": step / 10, "loss": 1.0 / step})
    report = write_report(_run_dir(tmp_path))
    assert _final_row(report.markdown.read_text()) == ("loss", f"{1.0 / 4:.6g}")
    assert timeline_figure(load_run(tmp_path / "run")).axes[1].get_ylabel() == "training loss"


def test_no_metric_at_all_names_loss_as_before(tmp_path: Path):
    _train(tmp_path / "ckpt", lambda step: None)
    run_dir = _run_dir(tmp_path)
    report = write_report(run_dir)
    assert _final_row(report.markdown.read_text()) == ("loss", "-")
    texts = [t.get_text() for t in timeline_figure(load_run(run_dir)).axes[1].texts]
    assert "no loss recorded in checkpoint manifests" in texts


def test_a_metric_that_is_not_a_number_is_not_charted(tmp_path: Path):
    root = tmp_path / "ckpt"
    for step, metrics in enumerate(
        [{"phase": "warmup", "mae": 0.9}, {"phase": "main", "mae": 0.4}], start=1
    ):
        # as kfp_spot.trainer writes save(..., metrics=...)
        checkpoints.commit_manifest(
            str(root), checkpoints.Manifest(step, (), 1000.0 + step, {"metrics": metrics})
        )
    report = write_report(_run_dir(tmp_path))
    assert _final_row(report.markdown.read_text()) == ("mae", "0.4")


@pytest.mark.parametrize(
    ("recorded", "chosen"),
    [
        ([{"rmse": 1.0}], "rmse"),
        ([{"rmse": 1.0, "loss": 2.0}], "loss"),
        ([{"rmse": 1.0}, {"loss": 0.5}], "loss"),  # any checkpoint recording loss
        ([{"accuracy": 0.9, "val_loss": 0.3}], "val_loss"),  # a *loss name before the others
        ([{"rmse": 1.0, "accuracy": 0.9}], "accuracy"),  # else alphabetical: manifests sort
        ([{"mae": 1.0}, {"accuracy": 0.9}], "accuracy"),
        ([], "loss"),
        ([{}], "loss"),
    ],
)
def test_the_choice_of_metric_is_deterministic(
    recorded: list[Mapping[str, float]], chosen: str
) -> None:
    assert chart_metric(recorded) == chosen
    assert chart_metric(list(reversed(recorded))) == chosen


def test_a_final_save_without_metrics_is_not_marked_as_deleted_by_retention(tmp_path: Path):
    # The documented loop: maybe_save(..., metrics=...) each step, then ckpt.save(step, state)
    # at the end, without metrics. That last step is on disk: no "retention deleted" mark.
    root = tmp_path / "ckpt"
    with CheckpointManager(str(root), keep_last=2, handle_signals=False, interval=1) as ckpt:
        for step in range(1, 5):
            time.sleep(0.01)
            ckpt.maybe_save(step, {"w": float(step)}, metrics={"train_loss": 1.0 / step})
        time.sleep(0.01)
        ckpt.save(5, {"w": 5.0})
    metric_ax = timeline_figure(load_run(_run_dir(tmp_path))).axes[1]
    labels = {ln.get_label(): len(ln.get_xdata()) for ln in metric_ax.lines}
    assert "commit whose train_loss\nretention deleted" not in labels
    assert labels["commit saved without train_loss"] == 1


@pytest.mark.parametrize("evaluated_only", [False, True])
def test_a_nan_or_infinite_evaluation_metric_is_listed_not_dropped(tmp_path: Path, evaluated_only):
    # The evaluation keeps a NaN or infinite metric as text ("nan"): artifact metadata holds no
    # such number. A NaN loss is why a gate failed; report.md left it out of its table.
    from kfp_spot.reports import render_markdown, run_from_json, summarize

    doc: dict[str, Any] = {
        "outcome": "SUCCEEDED",
        "metrics": {
            "val_loss": "nan",
            "r2": "-inf",
            "accuracy": 0.5,
            "checkpoint_step": 3,
            "checkpoint_uri": "gs://b/ckpt",
            "passed": False,
        },
    }
    if evaluated_only:
        doc["evaluated_checkpoint"] = {"uri": "gs://b/ckpt", "step": 3}
    run = run_from_json(tmp_path, doc)
    markdown = render_markdown(run, summarize(run))
    table = markdown.split("## Evaluation metrics", 1)[1]
    rows = re.findall(r"^\| (\S+) \| (\S+) \|$", table, re.MULTILINE)
    assert rows[2:] == [
        ("accuracy", "0.5"),
        ("checkpoint_step", "3"),
        ("r2", "-inf"),
        ("val_loss", "nan"),
    ], table
    assert "| Quality gate | failed |" in markdown


def test_a_sweeps_evaluations_are_each_in_report_md_with_the_gate_count(tmp_path: Path):
    # run.json keeps a sweep's evaluations as `evaluations` (the pipeline returns none of them):
    # the printed summary showed each and "N of M passed"; report.md showed no metric and "-".
    from kfp_spot.reports import ReportError, render_markdown, run_from_json, summarize

    doc: dict[str, Any] = {
        "outcome": "SUCCEEDED",
        "metrics": {},
        "evaluations": [
            {
                "task": "for-loop-1-iteration-0/evaluate-checkpoint",
                "metrics": {
                    "accuracy": 0.91,
                    "val_loss": "nan",
                    "checkpoint_step": 20,
                    "passed": True,
                },
            },
            {
                "task": "for-loop-1-iteration-1/evaluate-checkpoint",
                "metrics": {"accuracy": 0.62, "checkpoint_step": 20, "passed": False},
            },
        ],
    }
    run = run_from_json(tmp_path, doc)
    markdown = render_markdown(run, summarize(run))
    assert "| Quality gate | 1 of 2 passed |" in markdown
    table = markdown.split("## Evaluation metrics", 1)[1].strip().splitlines()
    assert table == [
        "| Task | accuracy | checkpoint_step | val_loss | Quality gate |",
        "| --- | --- | --- | --- | --- |",
        "| for-loop-1-iteration-0/evaluate-checkpoint | 0.91 | 20 | nan | passed |",
        "| for-loop-1-iteration-1/evaluate-checkpoint | 0.62 | 20 | - | failed |",
    ]
    with pytest.raises(ReportError, match=r"run.json: 'evaluations' must be a list of objects"):
        run_from_json(tmp_path, {**doc, "evaluations": [{"task": "t", "metrics": [1]}]})
