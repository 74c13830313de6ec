"""The shared checkpoint layout: manifest last, torn steps never count, attempt records."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfp_spot import checkpoints
from kfp_spot.checkpoints import CheckpointCorruptError

FILES = {"weights.bin": b"\x00\x01" * 1000, "nested/opt.json": b'{"lr": 0.1}'}


def test_write_then_verify_and_read(tmp_path: Path) -> None:
    root = str(tmp_path)
    manifest = checkpoints.write_step(root, 7, FILES, metadata={"loss": 0.5})
    assert manifest.step == 7
    assert manifest.metadata == {"loss": 0.5}
    assert sorted(checkpoints.files_of(manifest)) == sorted(FILES)
    doc = json.loads((tmp_path / "step-7" / "manifest.json").read_text())
    assert doc["format"] == checkpoints.MANIFEST_FORMAT
    assert {f["path"]: f["size"] for f in doc["files"]} == {k: len(v) for k, v in FILES.items()}
    again, files = checkpoints.read_verified(root, 7)
    assert files == FILES
    assert again.digest == checkpoints.verify(root, 7).digest
    assert checkpoints.latest(root).step == 7


def test_manifest_is_the_commit(tmp_path: Path) -> None:
    root = str(tmp_path)
    checkpoints.write_step(root, 1, FILES)
    checkpoints.write_step(root, 2, FILES)
    (tmp_path / "step-2" / "manifest.json").unlink()  # died before the commit
    assert checkpoints.list_steps(root) == [1, 2]
    assert [m.step for m in checkpoints.committed_steps(root)] == [1]
    assert checkpoints.latest(root).step == 1
    with pytest.raises(CheckpointCorruptError, match=r"no manifest\.json"):
        checkpoints.verify(root, 2)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-1]), "bytes, manifest says"),
        (lambda p: p.write_bytes(b"\xff" + p.read_bytes()[1:]), "crc32c"),
        (lambda p: p.unlink(), "missing"),
    ],
    ids=["truncated", "hash-mismatch", "file-missing"],
)
def test_damaged_step_is_never_the_latest(tmp_path: Path, damage, message: str) -> None:
    root = str(tmp_path)
    checkpoints.write_step(root, 1, FILES)
    checkpoints.write_step(root, 2, FILES)
    damage(tmp_path / "step-2" / "weights.bin")
    with pytest.raises(CheckpointCorruptError, match=message):
        checkpoints.verify(root, 2)
    with pytest.raises(CheckpointCorruptError, match=message):
        checkpoints.read_verified(root, 2)
    assert checkpoints.latest(root).step == 1


def test_unreadable_or_misplaced_manifest(tmp_path: Path) -> None:
    root = str(tmp_path)
    checkpoints.write_step(root, 3, FILES)
    manifest = tmp_path / "step-3" / "manifest.json"
    manifest.write_text("{not json")
    with pytest.raises(CheckpointCorruptError, match="unreadable manifest"):
        checkpoints.verify(root, 3)
    manifest.write_text(json.dumps({"format": "something-else/9", "step": 3, "files": []}))
    with pytest.raises(CheckpointCorruptError, match="unknown manifest format"):
        checkpoints.verify(root, 3)
    checkpoints.write_step(root, 4, FILES)
    os.rename(tmp_path / "step-4", tmp_path / "step-5")  # a step directory holding another step
    with pytest.raises(CheckpointCorruptError, match="says step 4"):
        checkpoints.verify(root, 5)
    assert checkpoints.latest(root) is None


def test_rewriting_a_torn_step_drops_its_leftovers(tmp_path: Path) -> None:
    root = str(tmp_path)
    (tmp_path / "step-9").mkdir()
    (tmp_path / "step-9" / "stale.bin").write_bytes(b"from a killed attempt")
    checkpoints.write_step(root, 9, {"a.bin": b"new"})
    assert sorted(p.name for p in (tmp_path / "step-9").iterdir()) == ["a.bin", "manifest.json"]


@pytest.mark.parametrize("name", ["", "/abs", "../up", "a/../../b", "manifest.json"])
def test_write_step_rejects_bad_file_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="invalid checkpoint file name"):
        checkpoints.write_step(str(tmp_path), 1, {name: b"x"})
    assert checkpoints.list_steps(str(tmp_path)) == []


def test_delete_step_uncommits_first(tmp_path: Path) -> None:
    root = str(tmp_path)
    checkpoints.write_step(root, 1, FILES)
    assert checkpoints.delete_step(root, 1) is True
    assert checkpoints.list_steps(root) == []
    assert checkpoints.delete_step(root, 1) is False


def test_step_dir_and_parse_round_trip(tmp_path: Path) -> None:
    assert checkpoints.step_dir("gs://b/run/ck/", 12) == "gs://b/run/ck/step-12"
    assert checkpoints.parse_step_dir("gs://b/run/ck/step-12/") == ("gs://b/run/ck", 12)
    assert checkpoints.parse_step_dir(str(tmp_path / "step-3")) == (str(tmp_path), 3)
    with pytest.raises(ValueError, match="not a checkpoint step directory"):
        checkpoints.parse_step_dir(str(tmp_path / "model"))
    with pytest.raises(ValueError, match=">= 0"):
        checkpoints.step_dir(str(tmp_path), -1)


def test_attempt_records_round_trip(tmp_path: Path) -> None:
    root = str(tmp_path)
    assert checkpoints.read_attempt_records(root) == []
    checkpoints.write_attempt_record(root, "b", {"start_time": 2.0, "exit_reason": None})
    checkpoints.write_attempt_record(root, "a", {"start_time": 1.0, "exit_reason": "preempted"})
    checkpoints.write_attempt_record(root, "b", {"start_time": 2.0, "exit_reason": "finished"})
    (tmp_path / "_attempts" / "junk.json").write_text("{half")
    records = checkpoints.read_attempt_records(root)
    assert [r["exit_reason"] for r in records] == ["preempted", "finished"]
    assert not list((tmp_path / "_attempts").glob("*.tmp"))
    with pytest.raises(ValueError, match="attempt id"):
        checkpoints.write_attempt_record(root, "a/b", {})


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    files=st.dictionaries(
        st.from_regex(r"[a-z]{1,8}(/[a-z]{1,8})?\.(bin|npy)", fullmatch=True),
        st.binary(max_size=2048),
        min_size=1,
        max_size=5,
    ),
    flip=st.integers(min_value=0),
)
def test_any_single_byte_flip_is_detected(tmp_path_factory, files, flip: int) -> None:
    root = str(tmp_path_factory.mktemp("ck"))
    checkpoints.write_step(root, 1, files)
    assert checkpoints.read_verified(root, 1)[1] == files
    name = sorted(files)[flip % len(files)]
    path = Path(root, "step-1", name)
    data = bytearray(path.read_bytes())
    if data:
        data[flip % len(data)] ^= 0xFF
    else:
        data = bytearray(b"!")
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptError):
        checkpoints.read_verified(root, 1)
    assert checkpoints.latest(root) is None
