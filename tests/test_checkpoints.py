"""The shared checkpoint layout: manifest last, torn steps never count, attempt records."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfp_spot import checkpoints
from kfp_spot.checkpoints import CheckpointCorruptError

verify_module = importlib.import_module("kfp_spot.checkpoints.verify")  # the name is a function


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


def test_latest_finds_the_step_a_writer_committed_while_retention_removed_the_listed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # keep_last=1 beside a reader (the progress display, an evaluation): the writer commits
    # step 2 and deletes step 1 between the reader's listing and its read. latest() said there
    # was no checkpoint at all, while one was committed.
    root = str(tmp_path)
    checkpoints.write_step(root, 1, FILES)
    list_steps = verify_module.list_steps

    def listing_then_the_writer_moves_on(where: str) -> list[int]:
        steps = list_steps(where)
        if steps == [1]:
            checkpoints.write_step(root, 2, FILES)
            checkpoints.delete_step(root, 1)
        return steps

    monkeypatch.setattr(verify_module, "list_steps", listing_then_the_writer_moves_on)
    found = checkpoints.latest(root)
    assert found is not None and found.step == 2


def test_latest_finds_a_step_it_saw_uncommitted_once_retention_removed_the_older(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The reader lists [1, 2] while step 2 is written; the writer commits it and deletes step 1
    # before the reader gets to it: both listed steps fail, one is committed.
    root = str(tmp_path)
    checkpoints.write_step(root, 1, FILES)
    (tmp_path / "step-2").mkdir()  # being written
    verify = verify_module.verify

    def reader_behind_the_writer(where: str, step: int, **kwargs: object) -> object:
        try:
            return verify(where, step, **kwargs)
        finally:
            if step == 2 and (tmp_path / "step-1").exists():
                checkpoints.write_step(root, 2, FILES)
                checkpoints.delete_step(root, 1)

    monkeypatch.setattr(verify_module, "verify", reader_behind_the_writer)
    found = checkpoints.latest(root)
    assert found is not None and found.step == 2
    assert "WARNING" not in caplog.text  # no damage anywhere


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


def test_a_step_has_one_directory_name(tmp_path: Path) -> None:
    # step-0003 (and step-٣, a non-ASCII digit) were read as step 3: restoring the folder a user
    # named decoded step-3's files instead, and a root holding both listed step 3 twice.
    root = str(tmp_path)
    checkpoints.write_step(root, 3, FILES)
    for name in ("step-0003", "step-03", "step-\u0663"):
        (tmp_path / name).mkdir()
        with pytest.raises(ValueError, match=r"without leading zeros, e\.g\. step-40"):
            checkpoints.parse_step_dir(str(tmp_path / name))
    (tmp_path / "step-0").mkdir()
    assert checkpoints.list_steps(root) == [0, 3]
    assert checkpoints.parse_step_dir(str(tmp_path / "step-0")) == (root, 0)


def test_attempt_records_round_trip(tmp_path: Path) -> None:
    root = str(tmp_path)
    assert checkpoints.read_attempt_records(root) == []
    Record, Exit = checkpoints.AttemptRecord, checkpoints.ExitReason
    checkpoints.write_attempt_record(root, Record("b", 2.0))
    checkpoints.write_attempt_record(root, Record("a", 1.0, exit_reason=Exit.PREEMPTED))
    last = Record("b", 2.0, end_time=3.5, exit_reason=Exit.FINISHED, first_step=4, saves=2)
    checkpoints.write_attempt_record(root, last)
    (tmp_path / "_attempts" / "junk.json").write_text("{half")
    records = checkpoints.read_attempt_records(root)
    assert [r.exit_reason for r in records] == [Exit.PREEMPTED, Exit.FINISHED]
    assert records[1] == last
    doc = json.loads((tmp_path / "_attempts" / "b.json").read_text())
    assert doc["format"] == checkpoints.ATTEMPT_FORMAT and doc["exit_reason"] == "finished"
    assert doc["end"] == "1970-01-01T00:00:03.500Z"  # for people; never read back
    assert not list((tmp_path / "_attempts").glob("*.tmp"))
    for bad in ("a/b", "", ".hidden"):
        with pytest.raises(ValueError, match="attempt id"):
            checkpoints.write_attempt_record(root, Record(bad, 1.0))


# As the trainer wrote records before they carried a format (the same fields).
UNVERSIONED = {
    "attempt_id": "20261130T103611000001Z-host-7",
    "job_id": None,
    "host": "host",
    "pid": 7,
    "start_time": 100.0,
    "start": "1970-01-01T00:01:40.000Z",
    "end_time": None,
    "end": None,
    "updated_time": 130.0,
    "first_step": 0,
    "last_committed_step": 20,
    "exit_reason": None,
    "error": None,
    "saves": 2,
    "save_seconds_mean": 0.25,
    "save_seconds_max": 0.5,
    "preemption_notice_time": None,
    "grace_period": 30.0,
}


def test_a_record_written_before_the_format_field_reads_the_same() -> None:
    record = checkpoints.AttemptRecord.from_json(UNVERSIONED)
    assert record.updated_time == 130.0 and record.last_committed_step == 20
    assert record.exit_reason is None and record.save_stall_seconds_mean is None
    again = checkpoints.AttemptRecord.from_json(record.to_json())
    assert again == record


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "kfp-spot-attempt/9"}, "unknown format"),
        ({"start_time": "yesterday"}, "start_time must be a number"),
        ({"start_time": None}, "no attempt_id or no start_time"),
        ({"attempt_id": ""}, "no attempt_id or no start_time"),
        ({"exit_reason": "running"}, "exit_reason 'running' is not one of ours"),
        ({"exit_reason": ["finished"]}, "exit_reason must be a string"),
        ({"last_committed_step": 2.5}, "last_committed_step must be an integer"),
        ({"saves": True}, "saves must be an integer"),
        ({"updated_time": float("nan")}, "updated_time must be a finite number"),
        ({"job_id": 42}, "job_id must be a string"),
    ],
)
def test_a_record_with_a_field_of_the_wrong_type_is_refused_naming_it(change, message) -> None:
    with pytest.raises(checkpoints.AttemptRecordError, match=message):
        checkpoints.AttemptRecord.from_json({**UNVERSIONED, **change}, "r.json")


def test_one_bad_record_does_not_hide_the_others(tmp_path: Path, caplog) -> None:
    folder = tmp_path / "_attempts"
    folder.mkdir()
    (folder / "good.json").write_text(json.dumps(UNVERSIONED))
    (folder / "bad.json").write_text(json.dumps({**UNVERSIONED, "saves": "many"}))
    (folder / "list.json").write_text("[]")
    (folder / "huge.json").write_bytes(b" " * (checkpoints.attempts.MAX_ATTEMPT_RECORD_BYTES + 1))
    assert [r.attempt_id for r in checkpoints.read_attempt_records(str(tmp_path))] == [
        UNVERSIONED["attempt_id"]
    ]
    assert "saves must be an integer" in caplog.text and "not a JSON object" in caplog.text
    assert "over 1048576 bytes" in caplog.text


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


def _legacy_write(root: Path, step: int, files: dict[str, bytes], metadata: dict) -> None:
    """A step exactly as the first manifest format wrote it: sha256 per file, no seal."""
    import hashlib

    base = root / f"step-{step}"
    for name, data in files.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_bytes(data)
    doc = {
        "format": "kfp-spot-checkpoint/1",
        "step": step,
        "wall_time": 1.5,
        "time": "1970-01-01T00:00:01Z",
        "files": [
            {"path": n, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
            for n, d in sorted(files.items())
        ],
        "metadata": metadata,
    }
    (base / "manifest.json").write_text(json.dumps(doc, indent=1, sort_keys=True))


def test_first_format_manifests_still_verify(tmp_path: Path) -> None:
    _legacy_write(tmp_path, 4, FILES, {"loss": 1.0})
    manifest, files = checkpoints.read_verified(str(tmp_path), 4)
    assert files == FILES and manifest.metadata == {"loss": 1.0}
    assert manifest.files[0].sha256 and not manifest.files[0].crc32c
    (tmp_path / "step-4" / "weights.bin").write_bytes(b"\x00\x02" * 1000)
    with pytest.raises(CheckpointCorruptError, match="sha256"):
        checkpoints.verify(str(tmp_path), 4)


def test_manifest_is_sealed_and_records_crc32c(tmp_path: Path) -> None:
    import google_crc32c

    checkpoints.write_step(str(tmp_path), 1, FILES)
    raw = (tmp_path / "step-1" / "manifest.json").read_bytes()
    doc = json.loads(raw)
    assert doc["format"] == "kfp-spot-checkpoint/2"
    assert raw.rstrip().endswith(b'"\n}') and list(doc)[-1] == "manifest_sha256"
    for entry in doc["files"]:
        expected = google_crc32c.value(FILES[entry["path"]])
        assert entry["crc32c"] == checkpoints.crc32c_b64(expected)  # as Cloud Storage writes it
    # one changed byte anywhere in the manifest breaks the seal
    flipped = raw.replace(b'"size": 11', b'"size": 12')
    (tmp_path / "step-1" / "manifest.json").write_bytes(flipped)
    with pytest.raises(CheckpointCorruptError, match="seal"):
        checkpoints.verify(str(tmp_path), 1)


@settings(max_examples=30, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 4999))
def test_crc32c_of_any_buffer_kind_matches_google_crc32c(data: bytes, cut: int) -> None:
    import google_crc32c

    expected = google_crc32c.value(data)
    assert checkpoints.crc32c(data) == expected
    assert checkpoints.crc32c(bytearray(data)) == expected
    assert checkpoints.crc32c(memoryview(data)) == expected  # read-only, not bytes
    cut = cut % (len(data) + 1)
    assert checkpoints.crc32c(data[cut:], checkpoints.crc32c(data[:cut])) == expected


def test_commit_files_commits_a_directory_written_by_someone_else(tmp_path: Path) -> None:
    step = tmp_path / "step-5"
    (step / "model" / "variables").mkdir(parents=True)
    (step / "model" / "saved_model.pb").write_bytes(b"graph")
    (step / "model" / "variables" / "data-0").write_bytes(b"\x01" * 5000)
    (step / ".tmp-upload").write_bytes(b"ignored")
    assert checkpoints.latest(str(tmp_path)) is None  # not committed until the manifest
    manifest = checkpoints.commit_files(str(tmp_path), 5, metadata={"epoch": 2})
    assert sorted(checkpoints.files_of(manifest)) == [
        "model/saved_model.pb",
        "model/variables/data-0",
    ]
    assert checkpoints.latest(str(tmp_path)).step == 5
    assert checkpoints.read_verified(str(tmp_path), 5)[1]["model/saved_model.pb"] == b"graph"
    (step / "model" / "saved_model.pb").write_bytes(b"Graph")
    assert checkpoints.latest(str(tmp_path)) is None
    with pytest.raises(FileNotFoundError):
        checkpoints.commit_files(str(tmp_path), 5, ["nope.bin"])
    with pytest.raises(ValueError, match="no files to commit"):
        checkpoints.commit_files(str(tmp_path), 6)


def test_local_checkpoints_never_import_fsspec(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from kfp_spot.trainer import CheckpointManager\n"
        f"root = {str(tmp_path)!r}\n"
        "with CheckpointManager(root, interval='1', handle_signals=False) as c:\n"
        "    c.restore(); c.maybe_save(1, {'x': 1}); c.maybe_save(2, {'x': 2})\n"
        "assert CheckpointManager(root, handle_signals=False).restore().step == 2\n"
        "heavy = ('fsspec', 'gcsfs', 'asyncio')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_trainers_built_in_adapters_are_the_suffix_table() -> None:
    from kfp_spot.trainer import adapters

    builtin = {a.name: a.suffix for a in adapters.BUILTIN_ADAPTERS}
    assert builtin == dict(checkpoints.BUILTIN_SUFFIXES)
    # In a fresh process, where nothing registered an adapter (other tests here do, for good).
    code = (
        "import json; from kfp_spot.trainer import adapters; "
        "print(json.dumps(adapters.allowed(allow_pickle=True)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == builtin


def test_a_built_in_adapter_on_a_file_of_another_suffix_fails_without_the_trainer(
    tmp_path: Path,
) -> None:
    index = {"w": {"file": "w.npy", "adapter": "numpy-dict"}}  # numpy-dict writes .npz
    checkpoints.write_step(str(tmp_path), 1, {"w.npy": b"x"}, metadata={"state": index})
    with pytest.raises(CheckpointCorruptError, match=r"expected 'w\.npz'"):
        checkpoints.verify(str(tmp_path), 1)
    index = {"w": {"file": "w.npz", "adapter": "numpy-dict"}}
    checkpoints.write_step(str(tmp_path), 2, {"w.npz": b"x"}, metadata={"state": index})
    assert checkpoints.verify(str(tmp_path), 2).step == 2


def test_verifying_a_trainers_step_never_imports_the_trainer(tmp_path: Path) -> None:
    import subprocess
    import sys

    write = (
        "from kfp_spot.trainer import CheckpointManager\n"
        f"with CheckpointManager({str(tmp_path)!r}, interval='1', handle_signals=False) as c:\n"
        "    c.maybe_save(1, {'x': 1, 'blob': b'abc'})\n"
    )
    subprocess.run([sys.executable, "-c", write], check=True)
    read = (
        "import sys\n"
        "from kfp_spot import checkpoints, layout\n"
        f"root = {str(tmp_path)!r}\n"
        "assert layout.inspect_layout(root).kind == layout.KFP_SPOT\n"
        "(record,) = checkpoints.read_attempt_records(root)\n"
        "print(checkpoints.latest(root).step, checkpoints.verify(root, 1).metadata['state'] != {},"
        " sorted(m for m in sys.modules if m.startswith('kfp_spot.trainer')))\n"
    )
    out = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "True", "[]"], out.stdout + out.stderr


def test_a_storage_timeout_is_a_storage_error_on_every_python(monkeypatch):
    # fsspec's FSTimeoutError (a bounded listing that got no answer) is an asyncio.TimeoutError,
    # which is an OSError only from Python 3.11 on: on 3.10 `kfp-spot report` on an unreachable
    # gs:// root ended in a bare FSTimeoutError traceback. A stand-in asyncio as on 3.10:
    import types

    class TimeoutError310(Exception):
        pass

    monkeypatch.setitem(sys.modules, "asyncio", types.SimpleNamespace(TimeoutError=TimeoutError310))
    assert TimeoutError310 in checkpoints.storage_errors()
    monkeypatch.undo()
    import asyncio

    from fsspec.exceptions import FSTimeoutError

    assert issubclass(FSTimeoutError, checkpoints.storage_errors())
    assert asyncio.TimeoutError in checkpoints.storage_errors()
