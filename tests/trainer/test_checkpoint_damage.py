"""A damaged newest step, in every way we know: restore and evaluate fall back to the older one.

Two steps are saved; the newest (20) is then damaged. ``restore()`` must return step 10, exactly
as it was saved, and log why 20 was skipped; ``evaluate`` must refuse 20 and, with
``fallback_to_previous=True``, score 10. "Resealed" damage rewrites the manifest with a valid
seal (a buggy or hostile writer): the checks behind the seal must catch it on their own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfp_spot import checkpoints
from kfp_spot.checkpoints import CheckpointCorruptError
from kfp_spot.evaluation import evaluate
from kfp_spot.packaging import prepare_package
from kfp_spot.trainer import CheckpointManager, load_checkpoint
from tests.packaging.tiny import write_project

ENTRY = "tinytrainer.evaluate:evaluate"


def _state(step: int) -> dict:
    rng = np.random.default_rng(step)
    return {
        "weights": rng.normal(size=(32, 8)).astype(np.float32),
        "rng": rng,
        "progress": {"step": step, "epoch": step // 10},
        "blob": b"raw-%d" % step,
        "model": {"accuracy": 0.5 + step / 100, "step": step},  # what the tiny evaluator reads
    }


def _assert_is_step_10(restored) -> None:
    expected = _state(10)
    assert restored is not None and restored.step == 10
    assert set(restored.state) == set(expected)
    assert restored.state["weights"].tobytes() == expected["weights"].tobytes()
    assert restored.state["weights"].dtype == np.float32
    assert restored.state["rng"].random(3).tolist() == expected["rng"].random(3).tolist()
    assert restored.state["progress"] == expected["progress"]
    assert restored.state["blob"] == expected["blob"]
    assert restored.state["model"] == expected["model"]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine") / "checkpoints"
    ckpt = CheckpointManager(str(root), handle_signals=False, record_attempts=False, keep_last=None)
    ckpt.save(10, _state(10))
    ckpt.save(20, _state(20))
    return root


@pytest.fixture
def root(pristine: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run" / "checkpoints"
    shutil.copytree(pristine, target)
    return target


def _doc(step_dir: Path) -> dict:
    doc = json.loads((step_dir / "manifest.json").read_bytes())
    doc.pop("manifest_sha256", None)
    return doc


def _reseal(mutate: Callable[[dict], object]) -> Callable[[Path], None]:
    def damage(step_dir: Path) -> None:
        doc = _doc(step_dir)
        mutate(doc)
        (step_dir / "manifest.json").write_bytes(checkpoints.seal(doc))

    return damage


def _unsealed(mutate: Callable[[dict], object]) -> Callable[[Path], None]:
    """Edit the manifest and keep its old seal (what damage or a careless edit does)."""

    def damage(step_dir: Path) -> None:
        raw = json.loads((step_dir / "manifest.json").read_bytes())
        mutate(raw)
        (step_dir / "manifest.json").write_text(json.dumps(raw, indent=1))

    return damage


def _file(doc: dict, name: str) -> dict:
    return next(f for f in doc["files"] if f["path"] == name)


def _rename_key(doc: dict) -> None:
    state = doc["metadata"]["state"]
    state["weights2"] = state.pop("weights")


def _drop_entry(doc: dict) -> None:
    del doc["metadata"]["state"]["rng"]


def _drop_entry_and_file(doc: dict) -> None:
    del doc["metadata"]["state"]["rng"]
    doc["files"] = [f for f in doc["files"] if f["path"] != "rng.json"]


def _switch_to_bytes(doc: dict) -> None:
    doc["metadata"]["state"]["weights"]["adapter"] = "bytes"


def _unknown_adapter(doc: dict) -> None:
    doc["metadata"]["state"]["progress"]["adapter"] = "nope"


def _set_size(value: object) -> Callable[[dict], None]:
    return lambda doc: _file(doc, "weights.npy").__setitem__("size", value)


def _write(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda step_dir: (step_dir / name).write_bytes(data)


def _edit(name: str, change: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    return lambda step_dir: (step_dir / name).write_bytes(change((step_dir / name).read_bytes()))


def _flip(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0x10
    return bytes(out)


def _replace_with_dir(name: str) -> Callable[[Path], None]:
    def damage(step_dir: Path) -> None:
        (step_dir / name).unlink()
        (step_dir / name).mkdir()

    return damage


def _replace_with_fifo(name: str) -> Callable[[Path], None]:
    def damage(step_dir: Path) -> None:
        (step_dir / name).unlink()
        os.mkfifo(step_dir / name)

    return damage


def _step_dir_is_a_file(step_dir: Path) -> None:
    shutil.rmtree(step_dir)
    step_dir.write_bytes(b"not a directory")


def _legacy(mutate: Callable[[dict], object] | None = None) -> Callable[[Path], None]:
    """Rewrite the manifest in the first format (sha256 per file, no seal), then mutate it."""

    def damage(step_dir: Path) -> None:
        doc = _doc(step_dir)
        doc["format"] = checkpoints.LEGACY_MANIFEST_FORMAT
        for entry in doc["files"]:
            entry.pop("crc32c")
            entry["sha256"] = hashlib.sha256((step_dir / entry["path"]).read_bytes()).hexdigest()
        if mutate is not None:
            mutate(doc)
        (step_dir / "manifest.json").write_text(json.dumps(doc, indent=1))

    return damage


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    # the manifest: missing, wrong type, not JSON, cut short, unsealed, out of range
    "manifest-missing": (lambda d: (d / "manifest.json").unlink(), "no manifest.json"),
    "manifest-is-a-directory": (_replace_with_dir("manifest.json"), "manifest.json"),
    "manifest-is-a-fifo": (_replace_with_fifo("manifest.json"), "not a regular file"),
    "step-dir-is-a-file": (_step_dir_is_a_file, "no manifest.json"),
    "manifest-not-json": (_write("manifest.json", b"{not json"), "unreadable manifest"),
    "manifest-empty": (_write("manifest.json", b""), "unreadable manifest"),
    "manifest-json-array": (_write("manifest.json", b"[1, 2]"), "not a JSON object"),
    "manifest-truncated": (_edit("manifest.json", lambda b: b[: len(b) // 2]), "manifest"),
    "manifest-seal-removed": (
        lambda d: (d / "manifest.json").write_text(json.dumps(_doc(d))),
        "no seal",
    ),
    "manifest-edited-unsealed": (
        _edit("manifest.json", lambda b: b.replace(b'"step": 20', b'"step": 21')),
        "seal",
    ),
    "manifest-huge": (_write("manifest.json", b" " * (17 << 20)), "over the limit"),
    "size-huge": (_reseal(_set_size(1 << 60)), "out of range"),
    "size-negative": (_reseal(_set_size(-1)), "out of range"),
    "size-bool": (_reseal(_set_size(True)), "out of range"),
    "size-string": (_reseal(_set_size("12")), "out of range"),
    "size-larger-than-file": (_reseal(_set_size(10**9)), "manifest says 1000000000"),
    "step-mismatch": (_reseal(lambda doc: doc.__setitem__("step", 21)), "says step 21"),
    "files-not-a-list": (_reseal(lambda doc: doc.__setitem__("files", {})), "'files'"),
    "file-entry-not-object": (_reseal(lambda doc: doc["files"].append(7)), "not a JSON object"),
    "file-path-escapes": (
        _reseal(lambda doc: _file(doc, "blob.bin").__setitem__("path", "../blob.bin")),
        "climbs out",
    ),
    "file-listed-twice": (
        _reseal(lambda doc: doc["files"].append(dict(_file(doc, "blob.bin")))),
        "twice",
    ),
    "crc-malformed": (
        _reseal(lambda doc: _file(doc, "blob.bin").__setitem__("crc32c", "zz")),
        "malformed",
    ),
    "format-unknown": (_reseal(lambda doc: doc.__setitem__("format", "x/9")), "unknown manifest"),
    # the state index
    "unknown-adapter": (_reseal(_unknown_adapter), "'nope'"),
    "key-renamed": (_reseal(_rename_key), "does not match its key"),
    "entry-dropped": (_reseal(_drop_entry), "no state key names"),
    "entry-and-file-dropped-unsealed": (_unsealed(_drop_entry_and_file), "seal"),
    "adapter-switched-to-bytes": (_reseal(_switch_to_bytes), "does not match its key"),
    "index-missing": (_reseal(lambda doc: doc["metadata"].pop("state")), "index is missing"),
    "index-not-object": (_reseal(lambda doc: doc["metadata"].__setitem__("state", [])), "index"),
    "entry-not-object": (
        _reseal(lambda doc: doc["metadata"]["state"].__setitem__("blob", "blob.bin")),
        "not an object",
    ),
    # the data files
    "file-missing": (lambda d: (d / "weights.npy").unlink(), "missing"),
    "file-truncated": (_edit("weights.npy", lambda b: b[:-1]), "bytes, manifest says"),
    "file-extended": (_edit("weights.npy", lambda b: b + b"\0"), "bytes, manifest says"),
    "file-bit-flip": (_edit("weights.npy", lambda b: _flip(b, len(b) - 3)), "crc32c"),
    "file-header-flip": (_edit("weights.npy", lambda b: _flip(b, 20)), "crc32c"),
    "json-file-flip": (_edit("progress.json", lambda b: _flip(b, 2)), "crc32c"),
    "file-is-a-directory": (_replace_with_dir("weights.npy"), "not a regular file"),
    "file-is-a-fifo": (_replace_with_fifo("blob.bin"), "not a regular file"),
    "file-swapped-with-older-step": (
        lambda d: shutil.copy(d.parent / "step-10" / "weights.npy", d / "weights.npy"),
        "crc32c",
    ),
    # the first format (sha256, no seal): its checks hold without a seal
    "legacy-file-flip": (
        lambda d: (_legacy()(d), _edit("weights.npy", lambda b: _flip(b, 99))(d)),
        "sha256",
    ),
    "legacy-key-renamed": (_legacy(_rename_key), "does not match its key"),
    "legacy-entry-dropped": (_legacy(_drop_entry), "no state key names"),
    "legacy-switched-to-bytes": (_legacy(_switch_to_bytes), "does not match its key"),
    "legacy-unknown-adapter": (_legacy(_unknown_adapter), "'nope'"),
    "legacy-size-huge": (_legacy(_set_size(1 << 60)), "out of range"),
}
# Resealed adapter/index damage is caught by the decoder policy, which the evaluator (it decodes
# nothing) does not apply; everything else it refuses on its own.
NOT_FOR_EVALUATE = {"unknown-adapter", "legacy-unknown-adapter"}
# No manifest: what a writer stopped half-way leaves (and any lister sees while a step is written).
NEVER_COMMITTED = {"manifest-missing"}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_restore_falls_back_to_the_intact_older_step(
    root: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    damage, reason = DAMAGE[kind]
    damage(root / "step-20")
    with caplog.at_level(logging.INFO):
        restored = CheckpointManager(str(root), handle_signals=False).restore()
    _assert_is_step_10(restored)
    skipped = [r for r in caplog.records if "not restoring checkpoint" in r.getMessage()]
    assert len(skipped) == 1 and "step 20" in skipped[0].getMessage(), caplog.text
    assert reason in skipped[0].getMessage(), skipped[0].getMessage()
    # Damage is warned about; a step never committed (an attempt stopped writing it) is not.
    expected = logging.INFO if kind in NEVER_COMMITTED else logging.WARNING
    assert skipped[0].levelno == expected, kind
    with pytest.raises(CheckpointCorruptError):
        load_checkpoint(str(root / "step-20"))
    if kind not in NOT_FOR_EVALUATE:  # the layout alone (launcher, evaluator) refuses it too
        assert checkpoints.latest(str(root)).step == 10


def test_two_damaged_steps_fall_back_to_none(root: Path) -> None:
    DAMAGE["file-bit-flip"][0](root / "step-20")
    DAMAGE["manifest-not-json"][0](root / "step-10")
    assert CheckpointManager(str(root), handle_signals=False).restore() is None


@pytest.fixture(scope="module")
def flip_root(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of ``pristine`` each bit-flip example damages and puts back (not a tree each)."""
    return Path(shutil.copytree(pristine, tmp_path_factory.mktemp("flip") / "checkpoints"))


@settings(max_examples=300, deadline=None)
@given(
    flips=st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(0, 7)), min_size=1, max_size=3)
)
def test_random_bit_flips_of_the_manifest_never_restore_anything_else(
    pristine: Path, flip_root: Path, flips: list[tuple[int, int]]
) -> None:
    original = (pristine / "step-20" / "manifest.json").read_bytes()
    manifest = flip_root / "step-20" / "manifest.json"
    data = bytearray(original)
    for position, bit in flips:
        data[position % len(data)] ^= 1 << bit
    manifest.write_bytes(bytes(data))
    try:
        restored = CheckpointManager(str(flip_root), handle_signals=False).restore()
    finally:
        manifest.write_bytes(original)
    if bytes(data) == original:  # flips cancelled
        assert restored.step == 20
    else:
        _assert_is_step_10(restored)
    tree = sorted(p.relative_to(flip_root) for p in flip_root.rglob("*"))  # restore() only reads:
    assert tree == sorted(p.relative_to(pristine) for p in pristine.rglob("*"))  # same next time


def test_a_manifest_naming_pickle_runs_no_code(root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    crafted = pickle.dumps(Payload())
    step20 = root / "step-20"

    def forge(doc: dict) -> None:
        doc["metadata"]["state"]["clf"] = {"file": "clf.pkl", "adapter": "sklearn"}
        crc = checkpoints.crc32c_b64(checkpoints.crc32c(crafted))
        doc["files"].append({"path": "clf.pkl", "size": len(crafted), "crc32c": crc})

    (step20 / "clf.pkl").write_bytes(crafted)
    _reseal(forge)(step20)  # a forger can seal: the seal guards against damage, not forgery
    restored = CheckpointManager(str(root), handle_signals=False).restore()
    _assert_is_step_10(restored)
    with pytest.raises(CheckpointCorruptError, match="allow_pickle=True"):
        load_checkpoint(str(step20))
    with pytest.raises(CheckpointCorruptError, match="allow_pickle=True"):
        CheckpointManager(str(root), handle_signals=False).restore(step=20)
    # the same through a manifest of the first format, and a value of an allowed adapter
    (step20 / "blob.bin").write_bytes(crafted)
    _legacy(lambda doc: doc["metadata"]["state"]["blob"].__setitem__("adapter", "sklearn"))(step20)
    _assert_is_step_10(CheckpointManager(str(root), handle_signals=False).restore())
    assert not marker.exists()
    # the test of the test: unpickled, the payload does create the file
    pickle.loads(crafted)
    assert marker.exists()


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("pkg")
    return prepare_package(str(write_project(base / "src")), str(base / "stage"))


@pytest.mark.parametrize("kind", sorted(set(DAMAGE) - NOT_FOR_EVALUATE))
def test_evaluate_refuses_the_damaged_step_and_can_fall_back(
    root: Path, kind: str, package, env_cache: Path
) -> None:
    DAMAGE[kind][0](root / "step-20")
    uris = list(package.package_uris)
    with pytest.raises(CheckpointCorruptError, match="step-20"):
        evaluate(str(root), uris, entry_point=ENTRY, cache_dir=env_cache)
    result = evaluate(
        str(root), uris, entry_point=ENTRY, cache_dir=env_cache, fallback_to_previous=True
    )
    assert result.step == 10
    assert result.metrics["seen_step"] == 10.0
    assert [step for step, _ in result.skipped] == [20]


def test_a_step_being_written_is_no_warning_for_a_lister(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The async writer has written step 2's files, not its manifest, while the launcher lists."""
    from kfp_spot.trainer import failpoints

    reached, release = threading.Event(), threading.Event()

    def pause(point: str, step: int) -> None:
        if point == "save-before-manifest" and step == 2:
            reached.set()
            release.wait(30)

    monkeypatch.setattr(failpoints, "hit", pause)
    ckpt = CheckpointManager(str(tmp_path), handle_signals=False, async_save=True).start()
    ckpt.save(1, {"x": np.arange(4)}, blocking=True)
    ckpt.save(2, {"x": np.arange(5)})
    try:
        assert reached.wait(30)
        with caplog.at_level(logging.DEBUG, logger="kfp_spot"):
            seen = checkpoints.latest(str(tmp_path))
            hashed = checkpoints.latest(str(tmp_path), check_hashes=False)
    finally:
        release.set()
        ckpt.close()
    assert seen is not None and hashed is not None and seen.step == hashed.step == 1
    assert checkpoints.list_steps(str(tmp_path))[-1] == 2  # step 2 was there, in progress
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert "step 2" in caplog.text  # said at DEBUG
    # Damage still warns: step 2's manifest exists now; break one of its files.
    caplog.clear()
    payload = next(p for p in (tmp_path / "step-2").iterdir() if p.name != "manifest.json")
    data = bytearray(payload.read_bytes())
    data[-1] ^= 1  # same size, another checksum
    payload.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="kfp_spot"):
        assert checkpoints.latest(str(tmp_path)).step == 1
    assert "skipping checkpoint: step 2" in caplog.text
