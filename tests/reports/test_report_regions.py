"""report.md and report.png of a run that failed over from one region to another."""

from __future__ import annotations

import json

from kfp_spot.reports import failover_marks, load_run, summarize, timeline_figure, write_report
from tests.reports.test_reports import Attempt, build_run, table_value

US = "projects/local-project/locations/us-central1/customJobs/123"
EU = "projects/local-project/locations/europe-west4/customJobs/456"


def failed_over_run(run_dir):
    """Two attempts: the first preempted in us-central1, the second in europe-west4."""
    attempts = [
        Attempt(0.0, 100.0, [0.5], "PREEMPTED", 0.5, 3.0),
        Attempt(5.0, 100.0, [0.5], "SUCCEEDED", 0.5, 3.0),
    ]
    doc = build_run(run_dir, attempts)
    doc["ledger"][0]["job"] = US
    doc["ledger"][1].update(job=EU, attempt=1)
    doc.update(
        job_names=[US, EU],
        job_regions={US: "us-central1", EU: "europe-west4"},
        regions=["us-central1", "europe-west4"],
    )
    (run_dir / "run.json").write_text(json.dumps(doc))
    return doc


def test_markdown_has_the_regions_table_and_the_home_baseline(tmp_path):
    failed_over_run(tmp_path)
    report = write_report(tmp_path)
    text = report.markdown.read_text()
    assert "## Regions" in text
    assert "Failover: us-central1 → europe-west4 at step 3" in text
    us = table_value(text, "us-central1").split(" | ")
    eu = table_value(text, "europe-west4").split(" | ")
    assert us[:3] == ["1", "1", "100.0 s"] and eu[:3] == ["1", "1", "100.0 s"]
    baseline = table_value(text, "On demand in us-central1, the whole run (baseline)")
    assert baseline == "$0.166667"  # 200 s at $3/h
    assert "priced with kfp-spot's one price table, us-central1's" in text


def test_timeline_labels_each_lane_with_its_region_and_marks_the_failover(tmp_path):
    doc = failed_over_run(tmp_path)
    run = load_run(tmp_path)
    numbers = summarize(run)
    fig = timeline_figure(run, summary=numbers.accounting, regions=numbers.regions)
    lanes_ax = fig.axes[0]
    labels = [t.get_text() for t in lanes_ax.get_yticklabels()]
    assert any(label.endswith("customJobs/123 · us-central1") for label in labels)
    assert any(label.endswith("customJobs/456 · europe-west4") for label in labels)
    [(when, text)] = failover_marks(numbers.regions)
    assert text == "→ europe-west4"
    second_start = run.ledger[1].start
    assert when == second_start
    [line] = [ln for ln in lanes_ax.lines if ln.get_gid() == "failover"]
    t0 = min(a.start for a in run.ledger)
    assert line.get_xdata()[0] == when - t0
    assert doc["regions"][0] == numbers.regions.home


def test_a_run_in_one_region_has_no_regions_section(tmp_path):
    build_run(tmp_path, [Attempt(0.0, 50.0, [0.5], "SUCCEEDED", 0.5, 3.0)])
    assert "## Regions" not in write_report(tmp_path).markdown.read_text()


def test_launches_side_by_side_in_two_regions_are_no_failover(tmp_path):
    """A team's dsl.ParallelFor over regions: two launches, one job each. The run said
    `failover: us-central1 → europe-west4` (its jobs in order, as if one launch had moved)."""
    doc = failed_over_run(tmp_path)
    doc["job_launches"] = {US: "for-loop-1-iteration-0/launch", EU: "for-loop-1-iteration-1/launch"}
    del doc["regions"]  # the sweep's regions are its items, not a launch's order
    (tmp_path / "run.json").write_text(json.dumps(doc))
    text = write_report(tmp_path).markdown.read_text()
    assert "No failover: each launch ran in its own region." in text
    assert "Failover:" not in text
    one_launch = dict.fromkeys([US, EU], "launch")  # the same two jobs from one launch moved
    doc["job_launches"] = one_launch
    (tmp_path / "run.json").write_text(json.dumps(doc))
    assert "Failover: us-central1 → europe-west4" in write_report(tmp_path).markdown.read_text()
