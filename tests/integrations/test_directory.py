"""A framework's own checkpoint directory, committed as a kfp-spot step and found again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kfp_spot import checkpoints
from kfp_spot.trainer import CheckpointManager
from kfp_spot.trainer.integrations.directory import (
    commit_directory,
    latest_directory,
    step_directory,
)


def write_tree(base: Path, tag: str) -> dict[str, bytes]:
    """An orbax/DCP-like tree: nested folders, a large-ish file, an empty file."""
    files = {
        "checkpoint.json": f'{{"tag": "{tag}"}}'.encode(),
        "state/params/0.0": os.urandom(1 << 20),
        "state/opt/_METADATA": b"",
        "rng/seed.txt": tag.encode(),
        ".metadata": b"torch DCP's index of the checkpoint: a hidden file",
        "state/params/.zarray": b'{"zarr_format": 2}',
    }
    for name, data in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def read_tree(base: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(base):
        for name in names:
            full = Path(dirpath, name)
            rel = full.relative_to(base).as_posix()
            if rel != checkpoints.MANIFEST_NAME:
                out[rel] = full.read_bytes()
    return out


def test_commit_a_directory_written_elsewhere_then_find_it(tmp_path):
    root = str(tmp_path / "ckpts")
    files = write_tree(tmp_path / "staging", "a")
    manifest = commit_directory(root, 40, tmp_path / "staging", metrics={"loss": 0.5})
    assert manifest.metadata["layout"] == "directory"
    assert manifest.metadata["metrics"] == {"loss": 0.5}
    assert sorted(f.path for f in manifest.files) == sorted(files)
    found = latest_directory(root)
    assert found.step == 40 and found.path == os.path.join(root, "step-40")
    assert read_tree(found.path) == files
    assert found.metrics == {"loss": 0.5}


def test_commit_in_place_where_the_framework_wrote(tmp_path):
    root = str(tmp_path / "ckpts")
    files = write_tree(Path(step_directory(root, 5)), "b")
    manifest = commit_directory(root, 5)  # files already under <root>/step-5
    assert sorted(f.path for f in manifest.files) == sorted(files)  # hidden ones too
    assert checkpoints.verify(root, 5, check_hashes=True).step == 5
    assert read_tree(latest_directory(root).path) == files


def test_a_torn_newer_step_is_skipped_and_a_corrupted_one_too(tmp_path, caplog):
    root = str(tmp_path / "ckpts")
    write_tree(tmp_path / "s1", "one")
    commit_directory(root, 1, tmp_path / "s1")
    write_tree(Path(step_directory(root, 2)), "two")  # never committed: no manifest
    write_tree(tmp_path / "s3", "three")
    commit_directory(root, 3, tmp_path / "s3")
    Path(step_directory(root, 3), "rng", "seed.txt").write_bytes(b"thrEE")  # same size, new bytes
    found = latest_directory(root)
    assert found.step == 1
    assert "step 3: file rng/seed.txt fails its" in caplog.text  # its checksum (CRC32C)


def test_bad_sources_are_refused_with_the_reason(tmp_path):
    root = str(tmp_path / "ckpts")
    with pytest.raises(ValueError, match="does not exist"):
        commit_directory(root, 1, tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no files"):
        commit_directory(root, 1, tmp_path / "empty")
    with pytest.raises(ValueError, match="holds no files: write the framework"):
        commit_directory(root, 9)
    with pytest.raises(ValueError, match="step must be a whole number >= 0"):
        commit_directory(root, -1, tmp_path / "empty")
    write_tree(Path(step_directory(root, 4)), "x")
    with pytest.raises(ValueError, match="is the step directory itself"):
        commit_directory(root, 4, step_directory(root, 4))
    assert latest_directory(str(tmp_path / "nothing-here")) is None


def test_the_manager_commits_directories_with_retention_and_attempt_records(tmp_path):
    root = str(tmp_path / "ckpts")
    with CheckpointManager(root, keep_last=2, handle_signals=False) as ckpt:
        assert ckpt.restore_directory() is None
        for step in (10, 20, 30):
            write_tree(tmp_path / f"hf-{step}", str(step))
            ckpt.save_directory(step, str(tmp_path / f"hf-{step}"), metrics={"step": step})
    assert checkpoints.list_steps(root) == [20, 30]
    (first,) = checkpoints.read_attempt_records(root)
    assert first.last_committed_step == 30 and first.exit_reason == "finished"
    with CheckpointManager(root, handle_signals=False) as ckpt:
        found = ckpt.restore_directory()
        assert found.step == 30 and read_tree(found.path)["rng/seed.txt"] == b"30"
    second = checkpoints.read_attempt_records(root)[-1]
    assert second.first_step == 30


def test_a_gcs_root_uploads_and_downloads_a_verified_copy(tmp_path, gs_bucket):
    root = f"{gs_bucket}/directory-test/checkpoints"
    files = write_tree(tmp_path / "staging", "gcs")
    commit_directory(root, 3, tmp_path / "staging")
    found = latest_directory(root, download_to=str(tmp_path / "restore"))
    assert found.step == 3 and found.path.startswith(str(tmp_path / "restore"))
    assert read_tree(found.path) == files
    # In place on gs://: the framework uploaded straight into <root>/step-4.
    from kfp_spot import fs

    for name, data in files.items():
        fs.atomic_write(fs.join(step_directory(root, 4), name), data)
    commit_directory(root, 4)
    found = latest_directory(root, download_to=str(tmp_path / "r4"))
    assert found.step == 4 and read_tree(found.path) == files


def test_a_gcs_step_downloads_to_a_folder_given_under_the_home_directory(
    tmp_path, gs_bucket, monkeypatch
):
    # download_to="~/restore" made a folder named "~" in the working directory.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    root = f"{gs_bucket}/directory-home-test/checkpoints"
    files = write_tree(tmp_path / "staging", "gcs")
    commit_directory(root, 3, tmp_path / "staging")
    found = latest_directory(root, download_to="~/restore")
    assert found.path.startswith(str(tmp_path / "home" / "restore"))
    assert read_tree(found.path) == files
    assert not (tmp_path / "~").exists()
