"""A step in a newer manifest format than this version reads is no damage: never skipped or deleted.

A newer kfp-spot may write ``kfp-spot-checkpoint/3`` into a root an older one reads (two teams on
one root, an evaluation image older than the trainer). Taken for damage, restore resumed from an
older step and keep_last then deleted the newer steps, and the evaluation took an older step for
the latest: a user's progress was lost without a word.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from kfp_spot import checkpoints
from kfp_spot.checkpoints import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointFormatError,
    Manifest,
)

NEWER = "kfp-spot-checkpoint/3"


def _refile(manifest: Path, fmt: object, *, sealed: bool = True) -> None:
    """Rewrite a step's manifest as a writer of format ``fmt`` would: its fields, sealed."""
    doc = json.loads(manifest.read_bytes())
    doc.pop("manifest_sha256")
    doc["format"] = fmt
    doc["layout"] = {"shards": 4}  # a field this version has never heard of
    manifest.write_bytes(checkpoints.seal(doc) if sealed else json.dumps(doc).encode())


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Steps 10, 20 and 30 with a metric; step 30 in the newer format."""
    root = tmp_path / "ckpt"
    for step in (10, 20, 30):
        checkpoints.write_step(
            str(root), step, {"w.bin": bytes([step]) * 64}, metadata={"metrics": {"acc": step}}
        )
    _refile(root / "step-30" / "manifest.json", NEWER)
    return root


def _sealed(fmt: object) -> bytes:
    doc = json.loads(Manifest(5, (), 1.0).to_bytes())
    doc.pop("manifest_sha256")
    doc["format"] = fmt
    return checkpoints.seal(doc)


def test_a_newer_format_is_its_own_error_and_anything_else_is_damage() -> None:
    assert issubclass(CheckpointFormatError, CheckpointError)
    assert not issubclass(CheckpointFormatError, CheckpointCorruptError)
    for newer in (NEWER, "kfp-spot-checkpoint/12"):
        with pytest.raises(CheckpointFormatError) as info:
            Manifest.from_bytes(_sealed(newer))
        assert info.value.found == newer
    unsealed = json.loads(_sealed(NEWER))  # a newer manifest's fields, whole, without the seal
    with pytest.raises(CheckpointFormatError):
        Manifest.from_bytes(json.dumps(unsealed).encode())
    damaged = {
        "torn": _sealed(NEWER)[:-30],
        "failing its seal": _sealed(NEWER).replace(b'"step": 5', b'"step": 6'),
        "a format of someone else": _sealed("orbax-checkpoint/3"),
        "a kfp-spot format that never existed": _sealed("kfp-spot-checkpoint/0"),
        "a format that is no number": _sealed("kfp-spot-checkpoint/3a"),
        "a format that is no string": _sealed(3),
        "no format": _sealed(None),
    }
    for what, data in damaged.items():
        with pytest.raises(CheckpointCorruptError) as info:
            Manifest.from_bytes(data)
        assert not isinstance(info.value, CheckpointFormatError), what


def test_the_error_is_one_line_naming_step_file_format_formats_read_and_fix(root: Path) -> None:
    with pytest.raises(CheckpointFormatError) as info:
        checkpoints.verify(str(root), 30)
    message = str(info.value)
    assert "\n" not in message and info.value.step == 30
    assert "step 30" in message and str(root / "step-30" / "manifest.json") in message
    assert repr(NEWER) in message
    assert all(fmt in message for fmt in checkpoints.READ_FORMATS)
    assert "upgrade kfp-spot" in message and "kfp-spot-trainer" in message


def test_no_reader_of_the_newest_step_falls_back_past_it(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        with pytest.raises(CheckpointFormatError):
            checkpoints.latest(str(root))
        with pytest.raises(CheckpointFormatError):
            checkpoints.newest_of(str(root), lambda step: checkpoints.verify(str(root), step))
        with pytest.raises(CheckpointFormatError):  # which steps are committed is not known
            checkpoints.committed_steps(str(root))
    assert "skipping" not in caplog.text  # not taken for damage either
    assert checkpoints.verify(str(root), 20).step == 20  # the older steps read as before


def test_the_trainer_stops_its_restore_and_its_retention_deletes_nothing(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from kfp_spot.trainer import CheckpointManager, load_checkpoint

    with pytest.raises(CheckpointFormatError, match="step 30"):
        CheckpointManager(str(root), handle_signals=False).restore()  # was step 20
    with pytest.raises(CheckpointFormatError):
        load_checkpoint(str(root / "step-30"))
    # A run that restores an older step by number, then saves past the newer one.
    ckpt = CheckpointManager(
        str(root), handle_signals=False, keep_last=1, keep_best=1, best_metric="acc"
    )
    with caplog.at_level(logging.WARNING), ckpt:
        restored = ckpt.restore(step=10)
        assert restored is not None and restored.step == 10
        for step in (11, 40):  # 40: step 30 once ranked as an old torn step, and was deleted
            ckpt.save(step, {"w": b"x" * 8}, metrics={"acc": 0})
    assert checkpoints.list_steps(str(root)) == [10, 11, 20, 30, 40]
    assert "retention deletes no step" in caplog.text and NEWER in caplog.text
    assert "skipping" not in caplog.text and "not restoring" not in caplog.text


def test_the_evaluation_stops_on_it_even_with_fallback(root: Path, tmp_path: Path) -> None:
    from kfp_spot.evaluation.selection import materialize_step, parse_step, select_step

    def select(step: str, *, hint: int | None = None) -> object:
        return select_step(
            str(root),
            parse_step(step),
            latest_hint=hint,
            fallback_to_previous=True,
            load=lambda n: materialize_step(str(root), n, tmp_path / "work"),
        )

    for step in ("latest", "30", "best:acc"):  # each took step 20 (best: ranked without 30)
        with pytest.raises(CheckpointFormatError, match="step 30"):
            select(step)
    assert select("20").manifest.step == 20  # an older step asked for by number still is


def test_the_launcher_does_not_resume_or_carry_an_older_step(root: Path, tmp_path: Path) -> None:
    from kfp_spot.jobs.regions import carry_step
    from kfp_spot.jobs.resume import seed_checkpoint

    with pytest.raises(CheckpointFormatError, match="step 30"):
        seed_checkpoint(str(root), str(tmp_path / "new" / "checkpoints"))  # seeded step 20
    assert not (tmp_path / "new" / "checkpoints").exists()
    with pytest.raises(CheckpointFormatError, match="step 30"):
        carry_step([str(root)], str(tmp_path / "other" / "checkpoints"))  # copied step 20
    with pytest.raises(CheckpointFormatError):
        carry_step([], str(root))


def test_a_step_a_newer_writer_committed_since_is_not_written_over(tmp_path: Path) -> None:
    from kfp_spot.trainer import CheckpointManager

    root = tmp_path / "ckpt"
    with CheckpointManager(str(root), handle_signals=False) as ckpt:
        ckpt.save(40, {"w": b"x" * 8})
        _refile(root / "step-40" / "manifest.json", NEWER)  # a newer trainer on the same root
        with pytest.raises(CheckpointFormatError):  # the loop's last save(40): it wrote 40 again
            ckpt.save(40, {"w": b"x" * 8})
    assert json.loads((root / "step-40" / "manifest.json").read_bytes())["format"] == NEWER


def test_the_watchers_show_the_newest_step_without_reading_it(root: Path) -> None:
    # A job is running while they look: a log line or a poll must not stop the launch.
    from kfp_spot.jobs.watch import AttemptWatcher
    from kfp_spot.progress.localrun import latest_step

    newest = AttemptWatcher(None, str(root))._newest()  # type: ignore[arg-type]
    assert newest.startswith("step 30, in format kfp-spot-checkpoint/3, newer than"), newest
    assert latest_step(str(root))("job") == 30


def test_the_run_report_lists_it_as_a_newer_format_not_as_damage(root: Path, tmp_path: Path):
    from kfp_spot.reports import load_run
    from kfp_spot.reports.summary import render_markdown, summarize

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    job = "projects/local-project/locations/us-central1/customJobs/1234567890123456789"
    doc = {"outcome": "SUCCEEDED", "job_names": [job], "checkpoint_uri": str(root)}
    (run_dir / "run.json").write_text(json.dumps(doc))
    run = load_run(run_dir)  # it left step 30 out as torn
    assert [s.step for s in run.saves] == [10, 20] and run.newer_steps == [30]
    markdown = render_markdown(run, summarize(run))
    assert "| Checkpoints on disk | 2 (and in a newer format, not read: step 30; " in markdown


def test_a_save_of_the_same_step_number_does_not_write_over_it(root: Path) -> None:
    from kfp_spot.trainer import CheckpointManager

    with pytest.raises(CheckpointFormatError, match="step 30"):
        checkpoints.write_step(str(root), 30, {"w.bin": b"older"})  # it deleted step 30 first
    ckpt = CheckpointManager(str(root), handle_signals=False)
    with ckpt:
        ckpt.restore(step=20)
        with pytest.raises(CheckpointFormatError):
            ckpt.save(30, {"w": b"x" * 8})
        assert not ckpt.maybe_save(30, {"w": b"x" * 8}, metrics=None)  # logged, training goes on
    assert json.loads((root / "step-30" / "manifest.json").read_bytes())["format"] == NEWER
    assert checkpoints.write_step(str(root), 31, {"w.bin": b"x"}).step == 31  # others as before


def test_files_committed_in_place_do_not_replace_a_newer_writers_manifest(root: Path) -> None:
    # A framework wrote its files into step 30 (a directory integration), then commits them.
    (root / "step-30" / "model.bin").write_bytes(b"older")
    with pytest.raises(CheckpointFormatError, match="step 30"):
        checkpoints.commit_files(str(root), 30)
    assert json.loads((root / "step-30" / "manifest.json").read_bytes())["format"] == NEWER
    (root / "step-31").mkdir()
    (root / "step-31" / "model.bin").write_bytes(b"x")
    assert checkpoints.commit_files(str(root), 31).step == 31  # others as before
