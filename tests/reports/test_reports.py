"""Reports from run directories laid out as `kfp-spot run`, the emulator and the trainer do."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from kfp_spot import checkpoints
from kfp_spot.cli import main
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.reports import ReportError, load_run, write_report

T0 = 1_790_000_000.0  # a fixed epoch second: reports must not depend on "now"


def rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch % 1 * 1e6):06d}Z"


@dataclass
class Attempt:
    queued: float
    duration: float
    commits: list[float]  # offsets into the attempt at which a checkpoint was committed
    reason: str  # PREEMPTED | SUCCEEDED | FAILED
    spot_rate: float
    on_demand_rate: float


attempt_st = st.builds(
    Attempt,
    queued=st.floats(0, 30),
    duration=st.floats(1, 600),
    commits=st.lists(st.floats(0.05, 0.95), max_size=4),
    reason=st.just("PREEMPTED"),
    spot_rate=st.floats(0.01, 2.0),
    on_demand_rate=st.floats(2.0, 9.0),
)


def build_run(
    run_dir: Path, attempts: list[Attempt], *, outcome: str = "SUCCEEDED", step_every: int = 3
):
    """Write run.json, checkpoint manifests (with loss) and attempt records for `attempts`."""
    ckpt = run_dir / "job" / "checkpoints"
    job = "projects/local-project/locations/us-central1/customJobs/123"
    ledger, t, step = [], T0, 0
    for i, a in enumerate(attempts, start=1):
        start = t + a.queued
        end = start + a.duration
        commit_times = sorted(start + f * a.duration for f in a.commits)
        first_step = step
        for ct in commit_times:
            step += step_every
            checkpoints.commit_manifest(
                str(ckpt),
                # as kfp_spot.trainer writes save(..., metrics={"loss": ...})
                checkpoints.Manifest(step, (), ct, {"metrics": {"loss": 1.0 / (1 + step)}}),
            )
        exit_reason = {"PREEMPTED": "preempted", "SUCCEEDED": "finished"}.get(a.reason, "error")
        checkpoints.write_attempt_record(
            str(ckpt),
            checkpoints.AttemptRecord(
                attempt_id=f"attempt-{i:02d}",
                start_time=start,
                end_time=end,
                first_step=first_step,
                last_committed_step=step,
                exit_reason=checkpoints.ExitReason(exit_reason),
            ),
        )
        spot = a.duration / 3600 * a.spot_rate
        on_demand = a.duration / 3600 * a.on_demand_rate
        ledger.append(
            {
                "job": job,
                "attempt": i,
                "startTime": rfc3339(start),
                "endTime": rfc3339(end),
                "endReason": a.reason,
                "billableSeconds": a.duration,
                "queuedSeconds": a.queued,
                "machineType": "n1-standard-4",
                "replicaCount": 1,
                "strategy": "SPOT",
                "spotCost": spot,
                "onDemandCost": on_demand,
                "savings": on_demand - spot,
            }
        )
        t = end
    run_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "outcome": outcome,
        "job_names": [job],
        "ledger": ledger,
        "checkpoint_uri": str(ckpt),
        "metrics": {"accuracy": 0.91, "passed": True},
        "started": T0,
        "finished": t + 1,
        "something_new": {"ignored": True},
    }
    (run_dir / "run.json").write_text(json.dumps(doc))
    return doc


def expected_goodput(attempts: list[Attempt]) -> float | None:
    kept = 0.0
    for a in attempts:
        if a.reason == "SUCCEEDED":
            kept += a.duration
        elif a.commits:
            kept += max(a.commits) * a.duration
    billed = math.fsum(a.duration for a in attempts)
    return kept / billed


def table_value(markdown: str, label: str) -> str:
    match = re.search(rf"^\| {re.escape(label)} \| (.*) \|$", markdown, re.MULTILINE)
    assert match, f"no row {label!r} in:\n{markdown}"
    return match.group(1)


def dollars(text: str) -> float:
    return float(re.match(r"\$([\d,]+\.\d{6})", text).group(1).replace(",", ""))


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size == (1100, 650)
        # Not a blank canvas: a drawn timeline has many colours.
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20)) > 20


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    preempted=st.lists(attempt_st, max_size=6),
    last=attempt_st,
    data=st.data(),
)
def test_markdown_numbers_match_the_ledger(tmp_path_factory, preempted, last, data):
    last.reason = data.draw(st.sampled_from(["SUCCEEDED", "FAILED"]))
    attempts = [*preempted, last]
    run_dir = tmp_path_factory.mktemp("run")
    doc = build_run(run_dir, attempts)

    report = write_report(run_dir)
    markdown = report.markdown.read_text()
    ledger = doc["ledger"]

    spot = math.fsum(r["spotCost"] for r in ledger)
    on_demand = math.fsum(r["onDemandCost"] for r in ledger)
    savings = math.fsum(r["savings"] for r in ledger)
    # Every attempt ran on Spot: what the run paid is the ledger's spotCost.
    paid = dollars(table_value(markdown, "Cost (what the run paid)"))
    assert paid == pytest.approx(spot, abs=1e-6)
    assert dollars(table_value(markdown, "On-demand cost (same time)")) == pytest.approx(
        on_demand, abs=1e-6
    )
    savings_cell = table_value(markdown, "Savings")
    assert dollars(savings_cell) == pytest.approx(savings, abs=1e-6)
    pct = float(re.search(r"\(([\d.]+)%\)", savings_cell).group(1))
    assert pct == pytest.approx(100 * savings / on_demand, abs=0.051)
    billable = float(table_value(markdown, "Billable time").removesuffix(" s"))
    assert billable == pytest.approx(math.fsum(r["billableSeconds"] for r in ledger), abs=0.051)
    assert int(table_value(markdown, "Attempts")) == len(ledger)
    assert int(table_value(markdown, "Preemptions")) == sum(
        r["endReason"] == "PREEMPTED" for r in ledger
    )
    goodput = float(table_value(markdown, "Goodput").removesuffix("%"))
    assert goodput == pytest.approx(100 * expected_goodput(attempts), abs=0.051)
    commits = sum(len(a.commits) for a in attempts)
    assert int(table_value(markdown, "Checkpoints on disk")) == commits
    assert table_value(markdown, "Outcome") == "**SUCCEEDED**"
    # One table row per ledger row, with its own costs.
    rows = [line for line in markdown.splitlines() if line.startswith("| 123 |")]
    assert len(rows) == len(ledger)
    for line, row in zip(rows, ledger, strict=True):
        assert f"${row['spotCost']:,.6f}" in line and row["endReason"] in line

    assert report.png.name == "report.png"
    assert_png(report.png)


def test_report_of_a_run_with_one_preemption(tmp_path: Path):
    attempts = [
        Attempt(5, 100, [0.3, 0.6], "PREEMPTED", 0.4, 2.0),
        Attempt(2, 80, [0.5, 1.0], "SUCCEEDED", 0.4, 2.0),
    ]
    build_run(tmp_path, attempts)
    report = write_report(tmp_path)
    markdown = report.markdown.read_text()
    # kept: 60 s of the preempted attempt (its last commit) + all 80 s of the finished one.
    assert report.summary.kept_seconds == pytest.approx(140)
    assert report.summary.lost_seconds == pytest.approx(40)
    assert table_value(markdown, "Billed time lost") == "40.0 s"
    assert table_value(markdown, "Latest step") == "12"
    assert table_value(markdown, "Final loss") == f"{1 / 13:.6g}"
    assert table_value(markdown, "Quality gate") == "passed"
    assert "| accuracy | 0.91 |" in markdown
    assert "![timeline](report.png)" in markdown
    assert_png(report.png)


def test_a_loss_under_a_twentieth_of_a_second_is_not_shown_as_none(tmp_path: Path):
    # The emulator's attempts last seconds: one decimal showed this loss as "0.0 s" beside a
    # goodput of 98.4%.
    attempts = [
        Attempt(5, 1.0, [0.952], "PREEMPTED", 0.4, 2.0),
        Attempt(2, 2.0, [1.0], "SUCCEEDED", 0.4, 2.0),
    ]
    build_run(tmp_path, attempts)
    report = write_report(tmp_path)
    markdown = report.markdown.read_text()
    assert report.summary.lost_seconds == pytest.approx(0.048, abs=1e-6)
    assert table_value(markdown, "Billed time lost") == "0.048 s"
    assert table_value(markdown, "Billable time") == "3.0 s"  # one decimal from 0.05 s on
    assert table_value(markdown, "Goodput") == "98.4%"


def test_cli_report_writes_png_and_markdown(tmp_path: Path):
    build_run(tmp_path, [Attempt(0, 60, [0.5], "SUCCEEDED", 0.5, 3.0)])
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.md").is_file()
    assert_png(tmp_path / "report.png")
    assert str(tmp_path / "report.md") in result.output


def test_minimal_run_json_without_checkpoints(tmp_path: Path):
    (tmp_path / "run.json").write_text(
        json.dumps(
            {
                "outcome": "PIPELINE_FAILED",
                "job_name": "projects/local-project/locations/l/customJobs/9",
                "ledger": [
                    {
                        "attempt": 1,
                        "startTime": "2026-01-01T00:00:00Z",
                        "endTime": "2026-01-01T00:01:00Z",
                        "endReason": "FAILED",
                        "billableSeconds": "60",  # int64 as a string, as protobuf JSON sends it
                        "strategy": "SPOT",
                        "spotCost": 0.001,
                        "onDemandCost": 0.004,
                        "savings": 0.003,
                    }
                ],
            }
        )
    )
    report = write_report(tmp_path)
    markdown = report.markdown.read_text()
    # A failed attempt, and no checkpoint or attempt record to say what it kept: unknown.
    assert table_value(markdown, "Goodput") == "unknown"
    assert table_value(markdown, "Billable time") == "60.0 s"
    assert table_value(markdown, "Savings") == "$0.003000 (75.0%)"
    assert "No attempt records" in markdown
    assert_png(report.png)


def test_empty_ledger_still_reports(tmp_path: Path):
    (tmp_path / "run.json").write_text(json.dumps({"outcome": "PIPELINE_FAILED", "ledger": []}))
    report = write_report(tmp_path)
    assert "No attempts" in report.markdown.read_text()
    assert_png(report.png)


def test_torn_checkpoint_and_bad_attempt_record_are_skipped(tmp_path: Path):
    build_run(tmp_path, [Attempt(0, 50, [0.2, 0.4], "SUCCEEDED", 0.5, 3.0)])
    ckpt = tmp_path / "job" / "checkpoints"
    (ckpt / "step-99").mkdir()  # no manifest: not a checkpoint
    (ckpt / "_attempts" / "broken.json").write_text("{not json")
    (ckpt / "_attempts" / "weird.json").write_text(json.dumps({"start_time": "yesterday-ish"}))
    run = load_run(tmp_path)
    assert [s.step for s in run.saves] == [3, 6]
    assert [a.attempt_id for a in run.records] == ["attempt-01"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "has no run.json"),
        # said to be missing; a directory of that name too
        ("FIFO", r"run\.json is not a regular file; `kfp-spot run` writes it as one"),
        ("{oops", "not readable JSON"),
        ("[" * 30000, "not readable JSON: nested too deeply"),  # json's RecursionError before
        ("[]", "must hold a JSON object"),
        ('{"ledger": []}', "'outcome' must be a non-empty string"),
        ('{"outcome": "X", "ledger": {}}', "'ledger' must be a list"),
        (
            '{"outcome": "X", "ledger": [{"spotCost": "cheap"}]}',
            r"ledger\[0\]\.spotCost must be a number, got 'cheap'",
        ),
        (
            '{"outcome": "X", "ledger": [{"startTime": "noon"}]}',
            r"ledger\[0\]\.startTime must be a time",
        ),
        # Named 'job_names', a field the file did not hold.
        ('{"outcome": "X", "job_name": 5}', "'job_name' must be a string, got 5"),
        (
            '{"outcome": "X", "evaluated_checkpoint": {"uri": "/c", "step": "2"}}',
            r"'evaluated_checkpoint' must be an object with 'uri' \(a non-empty string\) and "
            r"'step' \(an integer or null\)",
        ),
    ],
)
def test_bad_run_directories_name_the_problem(tmp_path: Path, content, message):
    if content == "FIFO":
        os.mkfifo(tmp_path / "run.json")
    elif content is not None:
        (tmp_path / "run.json").write_text(content)
    with pytest.raises(ReportError, match=message):
        write_report(tmp_path)
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("kfp-spot: error:")]
    assert len(errors) == 1
    assert not (tmp_path / "report.md").exists()


@pytest.mark.parametrize("blocked", ["report.png", "report.md"])
def test_a_report_file_that_cannot_be_written_is_one_clear_error(tmp_path: Path, blocked):
    (tmp_path / "run.json").write_text(json.dumps({"outcome": "PIPELINE_FAILED"}))
    (tmp_path / blocked).mkdir()
    (tmp_path / blocked / "kept.txt").write_text("mine")
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("kfp-spot: error:")]
    assert len(errors) == 1
    assert errors[0].startswith(
        f"kfp-spot: error: cannot write the report into {tmp_path}: Is a directory "
        f"({tmp_path / blocked}); report.png and report.md there must be writable files"
    )
    assert (tmp_path / blocked / "kept.txt").read_text() == "mine"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file


def test_an_unreachable_checkpoint_root_is_one_error_within_its_bound(tmp_path, monkeypatch):
    import gcsfs

    import kfp_spot.reports.run

    with socket.socket() as sock:  # a port nothing listens on once the block ends
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{closed}")
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    monkeypatch.setattr(kfp_spot.reports.run, "STORAGE_TIMEOUT", 2.0)  # not the real 20 s
    gcsfs.GCSFileSystem.clear_instance_cache()
    uri = "gs://kfp-spot-test/run/checkpoints"
    (tmp_path / "run.json").write_text(json.dumps({"outcome": "SUCCEEDED", "checkpoint_uri": uri}))
    try:
        start = time.monotonic()
        result = CliRunner().invoke(main, ["report", str(tmp_path)])
        elapsed = time.monotonic() - start
    finally:
        gcsfs.GCSFileSystem.clear_instance_cache()
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("kfp-spot: error:")]
    assert len(errors) == 1 and f"checkpoint_uri {uri} cannot be read" in errors[0]
    assert elapsed < 2.0 + 15, elapsed  # its own bound, not gcsfs's minutes of retries
    assert not (tmp_path / "report.md").exists()


def test_cli_report_on_a_missing_directory_is_exit_2(tmp_path: Path):
    result = CliRunner().invoke(main, ["report", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "does not exist" in result.output


@given(st.floats(0, 4_000_000_000, allow_nan=False))
def test_rfc3339_and_epoch_times_agree(epoch):
    from kfp_spot.accounting import parse_time

    assert parse_time(rfc3339(epoch), "t") == pytest.approx(epoch, abs=1e-5)
    assert parse_time(epoch, "t") == epoch
    assert parse_time(str(epoch), "t") == epoch


def test_kept_work_survives_retention_deleting_the_attempts_checkpoints(tmp_path: Path):
    attempts = [
        Attempt(5, 100, [0.3, 0.6], "PREEMPTED", 0.4, 2.0),
        Attempt(2, 80, [0.5, 1.0], "SUCCEEDED", 0.4, 2.0),
    ]
    build_run(tmp_path, attempts)
    ckpt = tmp_path / "job" / "checkpoints"
    # Retention (keep the last 2) deleted the steps attempt 1 committed; its record still says
    # when it last saved, as kfp_spot.trainer writes it.
    for step in (3, 6):
        checkpoints.delete_step(str(ckpt), step)
    record = next(
        r for r in checkpoints.read_attempt_records(str(ckpt)) if r.attempt_id == "attempt-01"
    )
    record = dataclasses.replace(record, last_commit_time=T0 + 5 + 60)
    checkpoints.write_attempt_record(str(ckpt), record)
    summary = write_report(tmp_path).summary
    assert summary.kept_seconds == pytest.approx(140)
    assert summary.lost_seconds == pytest.approx(40)


def _ledger(rows: list[tuple[str, str, str, float, float]]) -> list[dict[str, Any]]:
    """Ledger rows of 60 billed seconds each, 100 s apart: (endReason, strategy, job, costs)."""
    return [
        {
            "job": name,
            "attempt": i,
            "startTime": T0 + 100 * i,
            "endTime": T0 + 100 * i + 60,
            "endReason": reason,
            "billableSeconds": 60,
            "strategy": strategy,
            "spotCost": spot,
            "onDemandCost": on_demand,
        }
        for i, (reason, strategy, name, spot, on_demand) in enumerate(rows, start=1)
    ]


def test_an_emulator_restart_is_a_preemption_and_a_fallback_is_paid_on_demand(tmp_path: Path):
    job, fallback = (
        "projects/local-project/locations/l/customJobs/1",
        "projects/local-project/locations/l/customJobs/2",
    )
    rows = [
        ("PREEMPTED", "SPOT", job, 0.001, 0.005),
        ("EMULATOR_RESTARTED", "SPOT", job, 0.002, 0.010),
        ("SUCCEEDED", "STANDARD", fallback, 0.003, 0.003),  # on demand: no Spot price paid
    ]
    doc = {"outcome": "SUCCEEDED", "job_names": [job, fallback], "ledger": _ledger(rows)}
    (tmp_path / "run.json").write_text(json.dumps(doc))
    report = write_report(tmp_path)
    markdown = report.markdown.read_text()
    assert report.summary.preemptions == 2
    assert table_value(markdown, "Preemptions") == "2 (1 of them emulator restarts)"
    # Paid: the two Spot attempts at the Spot price, the STANDARD one on demand.
    assert table_value(markdown, "Cost (what the run paid)") == "$0.006000"
    assert table_value(markdown, "On-demand cost (same time)") == "$0.018000"
    assert table_value(markdown, "Savings") == "$0.012000 (66.7%)"
    # Only the Spot part is an estimate: at 91% / 60% off its $0.015 on demand, plus $0.003.
    assert table_value(markdown, "Cost range at 60-91% Spot discounts") == (
        "$0.004350 to $0.009000"
    )
    assert "Spot prices are estimates" in markdown
    assert_png(report.png)


def _jobless_result(tmp_path: Path, **fields: Any) -> Any:
    """A local run's result with no job, ledger or checkpoint, and ``fields`` (outcome, metrics,
    passed, ...)."""
    from kfp_spot.pipelines import local_run

    empty = {
        "job_names": [],
        "ledger": [],
        "attempt_records": [],
        "preemptions": None,
        "resumed_from_steps": [],
        "checkpoint_uri": "",
        "latest_step": None,
    }
    return local_run.LocalRunResult(run_dir=str(tmp_path), **{**empty, **fields})


@pytest.mark.parametrize(
    ("outputs", "outcome", "printed", "gate"),
    [
        ({"outcome": "SUCCEEDED", "passed": True}, Outcome.SUCCEEDED, "SUCCEEDED", "passed"),
        ({"outcome": "CAPACITY", "passed": False}, Outcome.CAPACITY, "CAPACITY", "failed"),
        ({}, None, "PIPELINE_FAILED", "not evaluated"),  # the pipeline gave no outputs
    ],
)
def test_a_local_run_keeps_enums_inside_and_strings_in_run_json_and_the_printout(
    tmp_path: Path, outputs, outcome, printed, gate
):
    from kfp_spot.pipelines import local_run

    result = _jobless_result(
        tmp_path,
        outcome=local_run._outcome(outputs.get("outcome")),
        metrics={},
        passed=local_run._gate(outputs.get("passed")),
    )
    assert result.outcome is outcome
    assert result.succeeded is (outcome is Outcome.SUCCEEDED)
    doc = json.loads(json.dumps(result.to_json()))
    assert doc["outcome"] == printed and doc["passed"] == outputs.get("passed")
    summary = local_run.summarize(result)
    assert summary.startswith(f"outcome:            {printed}\n")
    assert f"quality gate:       {gate}\n" in summary


def test_the_printout_shows_the_nan_metric_that_failed_the_gate(tmp_path: Path):
    from kfp_spot.pipelines import local_run

    result = _jobless_result(
        tmp_path,
        outcome=Outcome.SUCCEEDED,
        # as the evaluation's metrics hold them: NaN and infinities as text
        metrics={"score": "nan", "ratio": "-inf", "loss": 0.5, "checkpoint_uri": "/c"},
        passed=False,
        thresholds={"score": ">=0.5"},
    )
    summary = local_run.summarize(result)
    assert "evaluation:         loss=0.5, ratio=-inf, score=nan\n" in summary
    assert "quality gate:       failed: score=nan is not >=0.5\n" in summary


def test_the_printout_of_a_sweep_shows_each_evaluation(tmp_path: Path):
    """Evaluations in a dsl.ParallelFor, none returned by the pipeline: the summary said
    `evaluation: -` and `quality gate: not evaluated` though both had run (and one failed)."""
    from kfp_spot.pipelines import local_run

    task = "for-loop-1-iteration-{}/evaluate-checkpoint"
    sweep = [
        {"task": task.format(0), "metrics": {"f1": 0.91, "passed": True}},
        {"task": task.format(1), "metrics": {"f1": 0.42, "passed": False}},
    ]
    result = _jobless_result(
        tmp_path, outcome=Outcome.SUCCEEDED, metrics={}, passed=None, evaluations=sweep
    )
    summary = local_run.summarize(result)
    assert (
        "evaluation:         - (2 evaluations, run.json's evaluations)\n"
        "  for-loop-1-iteration-0/evaluate-checkpoint: f1=0.91; passed\n"
        "  for-loop-1-iteration-1/evaluate-checkpoint: f1=0.42; failed\n"
        "quality gate:       1 of 2 passed\n"
    ) in summary
    assert json.loads(json.dumps(result.to_json()))["evaluations"] == sweep
    one = _jobless_result(tmp_path, outcome=None, metrics={}, passed=None, evaluations=sweep[:1])
    assert "evaluations" not in one.to_json()  # its figures are the run's metrics


def test_the_printout_of_a_failed_gate_names_the_bound_the_metrics_missed(tmp_path: Path):
    # Before: "failed (accuracy@5 >=0.9, val/loss <=0.001)", and which one failed was left to
    # the reader to work out from the evaluation's line.
    from kfp_spot.pipelines import local_run

    result = _jobless_result(
        tmp_path,
        outcome=Outcome.SUCCEEDED,
        metrics={"val/loss": 4.3111, "accuracy@5": 0.93, "checkpoint_uri": "/c"},
        passed=False,
        thresholds={"val/loss": "<=0.001", "accuracy@5": 0.9},
    )
    summary = local_run.summarize(result)
    assert (
        "quality gate:       failed: val/loss=4.311 is not <=0.001 (held: accuracy@5 >=0.9)\n"
    ) in summary
    result.metrics = {"accuracy@5": 0.93}  # no val/loss: the evaluation's error says so
    assert "quality gate:       failed (accuracy@5 0.9, val/loss <=0.001)\n" in (
        local_run.summarize(result)
    )


def test_serving_replicas_have_their_own_section_fed_by_the_accounting(tmp_path: Path):
    build_run(tmp_path, [Attempt(0, 60, [0.5], "SUCCEEDED", 0.5, 3.0)])
    doc = json.loads((tmp_path / "run.json").read_text())
    endpoint = "projects/123/locations/us-central1/endpoints/7"
    doc["serving"] = [
        {
            "endpoint": endpoint,
            "deployedModelId": "42",
            "replica": replica,
            "life": life,
            "startTime": rfc3339(T0 + 100 * life),
            "endTime": rfc3339(T0 + 100 * life + seconds) if reason else None,
            "endReason": reason,
            "billableSeconds": seconds,
            "machineType": "n1-standard-4",
            "strategy": "SPOT",
            "spotCost": spot,
            "onDemandCost": on_demand,
        }
        for replica, life, reason, seconds, spot, on_demand in [
            (0, 1, "PREEMPTED", 30.0, 0.001, 0.004),
            (0, 2, None, 60.0, 0.002, 0.008),
            (1, 1, None, 90.0, 0.003, 0.012),
        ]
    ]
    (tmp_path / "run.json").write_text(json.dumps(doc))
    report = write_report(tmp_path)
    markdown = report.markdown.read_text()
    section = markdown.split("## Serving replicas (serving ledger)", 1)[1].split("\n## ", 1)[0]
    assert f"3 replica lives (3 on Spot VMs) of {endpoint}; 1 preempted." in section
    assert table_value(section, "Cost (what the replicas paid)") == "$0.006000"
    assert table_value(section, "On-demand cost (same time)") == "$0.024000"
    assert table_value(section, "Savings") == "$0.018000 (75.0%)"
    assert table_value(section, "Billable time") == "180.0 s"
    rows = [line for line in section.splitlines() if line.startswith("| 42 |")]
    assert [row.split(" | ")[5] for row in rows] == ["PREEMPTED", "RUNNING", "RUNNING"]
    # The training figures stay the training job's own.
    assert dollars(table_value(markdown, "Cost (what the run paid)")) != 0.006
    assert report.summary.serving is not None and report.summary.serving.preemptions == 1


def test_a_bad_serving_row_names_the_field(tmp_path: Path):
    (tmp_path / "run.json").write_text(
        json.dumps({"outcome": "X", "ledger": [], "serving": [{"billableSeconds": "long"}]})
    )
    with pytest.raises(ReportError, match=r"serving\[0\]\.billableSeconds must be a number"):
        write_report(tmp_path)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            lambda doc: [r.update(machineType="x9-mega-1", spotCost=None) for r in doc["ledger"]],
            "no price for machine type 'x9-mega-1' in kfp_spot/data/machines.csv",
        ),
        # The machine is priced; the rows carry no cost (one of two prices, or none at all).
        (
            lambda doc: [r.pop("onDemandCost") for r in doc["ledger"]],
            "no price for 2 of 2 attempts (the billing ledger does not price them)",
        ),
        (
            lambda doc: doc.pop("ledger"),
            "no price for 2 of 2 attempts (the trainer's attempt records name no machine)",
        ),
    ],
)
def test_an_unknown_cost_says_why_not_always_that_a_machine_has_no_price(tmp_path, change, reason):
    # Every unknown cost said "a machine type has no price in kfp_spot/data/machines.csv", also
    # for n1-standard-4, which has one: a run whose ledger or records did not price it.
    attempts = [
        Attempt(1, 100, [0.5], "PREEMPTED", 0.1, 1.0),
        Attempt(1, 50, [], "SUCCEEDED", 0.1, 1.0),
    ]
    doc = build_run(tmp_path, attempts)
    change(doc)
    (tmp_path / "run.json").write_text(json.dumps(doc))
    markdown = write_report(tmp_path).markdown.read_text()
    assert table_value(markdown, "Cost") == f"unknown: {reason}"
    summary = load_run(tmp_path).account()
    assert summary.costs is None and summary.cost_unknown_reason == reason


def test_a_finished_runs_unclosed_attempt_record_ended_without_a_record_of_why(tmp_path: Path):
    # No ledger (a job run elsewhere): the trainer's records are the source. The last one was
    # never closed and had no notice (its VM vanished, an OOM kill): in a finished run it ended,
    # neither still running nor a preemption.
    from kfp_spot.reports import RunData, render_markdown, summarize

    records = checkpoints.parse_attempt_records(
        [
            {"attempt_id": "a", "start_time": T0, "end_time": T0 + 60, "exit_reason": "preempted"},
            {"attempt_id": "b", "start_time": T0 + 100, "updated_time": T0 + 160},
        ]
    )
    run = RunData(
        tmp_path, "SERVICE_ERROR", ["p/l/customJobs/1"], [], records=records, finished=T0 + 200
    )
    summary = summarize(run)
    assert [str(a.end_reason) for a in summary.accounting.attempts] == ["PREEMPTED", "UNKNOWN"]
    assert summary.accounting.preemptions == 1
    markdown = render_markdown(run, summary)
    assert "| UNKNOWN (ended without a record of why) |" in markdown
    assert "| - | - | not written |" in markdown  # the record itself: no exit reason written
    running = summarize(dataclasses.replace(run, finished=None))  # a run still going
    assert str(running.accounting.attempts[1].end_reason) == "RUNNING"


def test_attempts_that_wrote_no_attempt_record_are_not_said_to_have_never_resumed(tmp_path: Path):
    # A training whose CheckpointManager was never started committed steps over two attempts and
    # wrote no attempt record: the summary said "- (never resumed)" of a run that resumed.
    from kfp_spot.pipelines import local_run

    job = "projects/local-project/locations/l/customJobs/1"
    ledger = _ledger([(end, "SPOT", job, 0.001, 0.005) for end in ("PREEMPTED", "SUCCEEDED")])
    fields = {"outcome": None, "metrics": {}, "passed": None, "job_names": [job], "ledger": ledger}
    unknown = _jobless_result(tmp_path, **fields, latest_step=12)
    assert (
        "resumed from steps: unknown (no attempt records under the checkpoint root: a "
        "CheckpointManager that saves without `with` or start() writes none)\n"
    ) in local_run.summarize(unknown)
    # nothing committed, or records that name no resumption: it never resumed
    for result in (
        _jobless_result(tmp_path, **fields, latest_step=None),
        _jobless_result(tmp_path, **fields, latest_step=12, attempt_records=[{"attempt": 1}]),
    ):
        assert "resumed from steps: - (never resumed)\n" in local_run.summarize(result)
