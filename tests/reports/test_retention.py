"""The run report keeps the commits that carried a run through its preemptions.

Retention deletes old step directories; the attempt records (which it leaves alone) still say
which step each attempt resumed from and when each attempt last committed. The timeline shows
those commits beside whatever is still on disk.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kfp_spot.reports import load_run, timeline_figure, write_report
from kfp_spot.reports.run import CheckpointSave, commit_marks
from kfp_spot.trainer import CheckpointManager

JOB = "projects/local-project/locations/us-central1/customJobs/1234567890123456789"
STEPS_PER_ATTEMPT = 5


def _attempt(root: Path, *, preempt: bool) -> None:
    """One attempt of the real trainer: resume, train five steps saving each, maybe preempted."""
    ckpt = CheckpointManager(str(root), keep_last=2, handle_signals=False, interval=1)
    with ckpt:
        restored = ckpt.restore()
        start = restored.step if restored is not None else 0
        for step in range(start + 1, start + STEPS_PER_ATTEMPT + 1):
            time.sleep(0.01)  # distinct commit times
            if preempt and step == start + STEPS_PER_ATTEMPT:
                ckpt.notice.request("preempted by the test")
            ckpt.maybe_save(step, {"w": float(step)}, metrics={"loss": 1.0 / step})
            if ckpt.should_stop:
                break


def test_three_preemptions_with_keep_last_2_keep_the_resumed_from_commits(tmp_path: Path):
    root = tmp_path / "checkpoints"
    for preempt in (True, True, True, False):
        _attempt(root, preempt=preempt)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    doc = {"outcome": "SUCCEEDED", "job_names": [JOB], "checkpoint_uri": str(root)}
    (run_dir / "run.json").write_text(json.dumps(doc))

    run = load_run(run_dir)
    assert [s.step for s in run.saves] == [19, 20]  # what retention left on disk
    assert [r.first_step for r in run.records] == [0, 5, 10, 15]

    marks = run.kept_commits  # what report.png draws in the commit lane and the loss plot
    assert [m.step for m in marks] == [5, 10, 15, 19, 20]
    assert [m.step for m in marks if m.resumed_from] == [5, 10, 15]
    assert [m.step for m in marks if not m.on_disk] == [5, 10, 15]
    # Each resumed-from commit sits where its attempt committed it, before the next attempt.
    for mark, nxt in zip(marks[:3], run.records[1:], strict=True):
        assert mark.time <= nxt.start_time
    assert [m.loss for m in marks] == [None, None, None, 1.0 / 19, 1.0 / 20]

    # And that is what the figure draws: the ticks (x = seconds since the run started) and labels.
    lanes_ax, loss_ax = timeline_figure(run).axes[:2]
    ticks = {
        c.get_gid(): [x for x, _ in c.get_offsets()] for c in lanes_ax.collections if c.get_gid()
    }
    t0 = marks[-1].time - ticks["commits-on-disk"][-1]
    assert ticks["commits-deleted"] == pytest.approx([m.time - t0 for m in marks[:3]])
    assert ticks["commits-on-disk"] == pytest.approx([m.time - t0 for m in marks[3:]])
    labels = {t.get_text() for t in lanes_ax.texts}
    assert {"step 5", "step 10", "step 15", "step 20"} <= labels
    # Attempt numbers sit above their bar (lane 0 spans -0.35..0.35), clear of the preemption
    # crosses drawn on it.
    numbers = [t for t in lanes_ax.texts if t.get_text().startswith("#")]
    assert [t.get_text() for t in numbers] == ["#1", "#2", "#3", "#4"]
    assert all(t.get_position()[1] < -0.35 and t.get_va() == "bottom" for t in numbers)
    assert "1234567890123456789" in " ".join(t.get_text() for t in lanes_ax.get_yticklabels())
    (loss,) = [line for line in loss_ax.lines if line.get_gid() == "loss"]
    assert list(loss.get_ydata()) == pytest.approx([1.0 / 19, 1.0 / 20])

    report = write_report(run_dir)
    assert report.png.stat().st_size > 0
    assert report.summary.accounting.preemptions == 3
    markdown = report.markdown.read_text()
    assert "| Checkpoints on disk | 2 |" in markdown
    assert "| Resumed from | step 5, step 10, step 15 |" in markdown
    assert "| Latest step | 20 |" in markdown


def test_a_resumed_from_step_without_a_known_commit_time_is_left_out():
    # Records only: the attempt that committed step 7 left no commit time (killed first).
    from kfp_spot.checkpoints import AttemptRecord, ExitReason

    records = [
        AttemptRecord(
            "a",
            0.0,
            end_time=10.0,
            exit_reason=ExitReason.PREEMPTED,
            first_step=0,
            last_committed_step=7,
            last_commit_time=None,
        ),
        AttemptRecord(
            "b",
            11.0,
            end_time=20.0,
            exit_reason=ExitReason.FINISHED,
            first_step=7,
            last_committed_step=9,
            last_commit_time=19.0,
        ),
    ]
    marks = commit_marks([CheckpointSave(9, 19.0, 0.5)], records)
    assert [(m.step, m.on_disk, m.resumed_from) for m in marks] == [(9, True, False)]
