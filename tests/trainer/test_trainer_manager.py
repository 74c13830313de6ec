"""CheckpointManager: save/restore, torn steps, retention, async saves, the notice, records."""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfp_spot import checkpoints
from kfp_spot.trainer import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointManager,
    PreemptionNotice,
    StateEncodingError,
    is_chief,
    load_checkpoint,
)
from kfp_spot.trainer import restore as restore_module


def _manager(root: Path, **kwargs) -> CheckpointManager:
    kwargs.setdefault("handle_signals", False)
    return CheckpointManager(str(root), **kwargs)


def _state(step: int) -> dict:
    rng = np.random.default_rng(step)
    return {
        "weights": rng.normal(size=(16, 4)),
        "rng": rng,
        "progress": {"step": step, "epoch": step // 10},
        "blob": b"raw-%d" % step,
    }


def test_save_restore_is_exact(tmp_path: Path) -> None:
    state = _state(5)
    with _manager(tmp_path, interval="1") as ckpt:
        assert ckpt.restore() is None
        ckpt.save(5, state, metrics={"loss": 0.25})
    restored = _manager(tmp_path).restore()
    assert restored.step == 5
    assert restored.metrics == {"loss": 0.25}
    assert restored.state["weights"].tobytes() == state["weights"].tobytes()
    assert restored.state["progress"] == {"step": 5, "epoch": 0}
    assert restored.state["blob"] == b"raw-5"
    # the RNG continues exactly where the saved one would have
    assert restored.state["rng"].random(4).tolist() == state["rng"].random(4).tolist()
    assert load_checkpoint(restored.path).state["blob"] == b"raw-5"


def test_a_restored_checkpoint_read_as_its_state_says_where_the_values_are(tmp_path: Path) -> None:
    # `(ckpt.restore() or initial)["step"]` ran on a first attempt and failed only when one
    # resumed, with Python's "'Restored' object is not subscriptable".
    with _manager(tmp_path, interval="1") as ckpt:
        ckpt.save(5, _state(5))
    for restored in (_manager(tmp_path).restore(), load_checkpoint(str(tmp_path / "step-5"))):
        with pytest.raises(TypeError) as refused:
            restored["progress"]
        assert str(refused.value) == (
            "a Restored checkpoint is not its state: read restored.state['progress'] (the values "
            "saved at step 5: 'blob', 'progress', 'rng', 'weights') and restored.step"
        )
    with _manager(tmp_path / "wide", interval="1") as ckpt:
        ckpt.save(1, {f"layer{i:02d}": i for i in range(11)})
    with pytest.raises(TypeError, match=r"step 1: 'layer00', .*'layer07' and 3 more\) and"):
        _manager(tmp_path / "wide").restore()[0]


def test_a_manager_saving_without_being_started_is_warned_of_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # `ckpt = CheckpointManager(...)` and `ckpt.maybe_save(...)` saved, silently without the
    # preemption handler and the attempt records `with` (start()) gives.
    ckpt = CheckpointManager(str(tmp_path / "bare"), interval="1")
    with caplog.at_level(logging.WARNING, logger="kfp_spot"):
        for step in (1, 2):
            ckpt.maybe_save(step, {"w": step})
        ckpt.save(3, {"w": 3})
    (told,) = [r.getMessage() for r in caplog.records]
    assert "is saving without having been started: use `with CheckpointManager(...) as" in told
    assert "saves nothing on the preemption notice" in told
    assert "and writes no attempt record" in told
    assert checkpoints.read_attempt_records(str(tmp_path / "bare")) == []
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kfp_spot"):
        with CheckpointManager(str(tmp_path / "entered"), interval="1") as entered:
            entered.maybe_save(1, {"w": 1})
        entered.save(2, {"w": 2})  # after close(): written before it returns, as documented
        own = CheckpointManager(str(tmp_path / "own"), handle_signals=False, record_attempts=False)
        own.save(1, {"w": 1})  # nothing start() would add
    assert caplog.records == []


@pytest.mark.parametrize("damage", ["manifest-missing", "truncated", "hash-mismatch"])
def test_torn_checkpoint_is_never_restored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    ckpt = _manager(tmp_path, keep_last=None)
    ckpt.save(10, _state(10))
    ckpt.save(20, _state(20))
    step20 = tmp_path / "step-20"
    weights = step20 / "weights.npy"
    if damage == "manifest-missing":
        (step20 / "manifest.json").unlink()
    elif damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:-8])
    else:
        data = bytearray(weights.read_bytes())
        data[-1] ^= 1
        weights.write_bytes(bytes(data))
    with caplog.at_level(logging.INFO):
        restored = _manager(tmp_path).restore()
    assert restored.step == 10
    assert "not restoring checkpoint: step 20" in caplog.text
    # A step never committed is skipped quietly; damage is warned about.
    warned = any(r.levelno >= logging.WARNING for r in caplog.records if "step 20" in r.message)
    assert warned == (damage != "manifest-missing")
    with pytest.raises(CheckpointCorruptError):
        _manager(tmp_path).restore(step=20)
    with pytest.raises(CheckpointCorruptError):
        load_checkpoint(str(step20))


def test_retention_keeps_last_and_best(tmp_path: Path) -> None:
    ckpt = _manager(tmp_path, keep_last=2, keep_best=1, best_metric="acc", best_mode="max")
    accuracy = {1: 0.5, 2: 0.9, 3: 0.6, 4: 0.7, 5: 0.65}
    for step, acc in accuracy.items():
        ckpt.save(step, {"x": step}, metrics={"acc": np.float32(acc)})  # numpy scalars are fine
    assert ckpt.committed_steps() == [2, 4, 5]
    minimise = _manager(
        tmp_path / "min", keep_last=1, keep_best=2, best_metric="loss", best_mode="min"
    )
    for step, loss in {1: 3.0, 2: 1.0, 3: 2.0, 4: 0.5, 5: 4.0}.items():
        minimise.save(step, {"x": step}, metrics={"loss": loss})
    assert minimise.committed_steps() == [2, 4, 5]


def test_the_documented_final_save_keeps_the_committed_step_and_its_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/trainer.md's loop: maybe_save(step, ..., metrics=...) each step, then save(step, state)
    # after it. The final step is committed already: rewriting it dropped its metrics (so
    # best:loss skipped the best step) and first removed its commit (a rewrite killed half-way,
    # here a failing one, left no copy of the step: with keep_last=1, none of the run).
    with _manager(tmp_path, interval=1, keep_last=1) as ckpt:
        for step in range(1, 4):
            ckpt.maybe_save(step, lambda step=step: {"x": step}, metrics={"loss": 1.0 / step})
        assert ckpt.save(3, {"x": 3}).metadata["metrics"] == {"loss": 1.0 / 3}
    assert checkpoints.read_manifest(str(tmp_path), 3).metadata["metrics"] == {"loss": 1.0 / 3}

    def failing_write(*args: object, **kwargs: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(checkpoints, "write_step", failing_write)
    with _manager(tmp_path, keep_last=1, save_retries=0) as resumed:
        restored = resumed.restore()
        assert restored is not None and restored.step == 3
        resumed.save(3, restored.state)  # a resumed attempt with nothing left to train
    assert [m.step for m in checkpoints.committed_steps(str(tmp_path))] == [3]


def test_a_save_on_a_full_disk_names_the_step_and_the_root_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bare "[Errno 28] No space left on device" named neither the checkpoint nor what was
    # left of the run's steps.
    write_step = checkpoints.write_step

    def full_after_one_file(root: str, step: int, files: dict, **kwargs: object) -> object:
        def after_file(name: str) -> None:
            if step == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        return write_step(root, step, files, metadata=kwargs.get("metadata"), after_file=after_file)

    monkeypatch.setattr(checkpoints, "write_step", full_after_one_file)
    with _manager(tmp_path, save_retries=1) as ckpt:
        ckpt.save(1, _state(1))
        with pytest.raises(OSError) as info:
            ckpt.save(2, _state(2))
        ckpt.maybe_save(2, lambda: _state(2))  # a periodic save logs it, training goes on
    assert info.value.errno == errno.ENOSPC
    message = str(info.value)
    assert f"checkpoint of step 2 under {tmp_path} failed 2 time(s)" in message
    assert "the disk is full" in message and "kept (the newest, step 1)" in message
    assert sorted(os.listdir(tmp_path)) == ["_attempts", "step-1"]  # nothing half-written
    assert _manager(tmp_path).restore().step == 1


def test_another_process_writing_to_the_root_is_warned_of_and_a_dead_one_is_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Two training runs on one root (or a replica that thinks it is the chief) delete each
    # other's steps and overwrite the steps both save, and nothing said so.
    root = str(tmp_path)
    started = time.time() - 60
    alive, killed = (
        checkpoints.AttemptRecord(f"x-{host}", started, host=host, pid=7, updated_time=started)
        for host in ("vm-alive", "vm-killed")  # both open: neither wrote its end
    )
    for record in (alive, killed):
        checkpoints.write_attempt_record(root, record)
    with _manager(tmp_path, interval=1, heartbeat_seconds=1e-6) as ckpt:
        ckpt.maybe_save(1, lambda: {"x": 1})  # a heartbeat: nobody else updated a record
        assert "another process" not in caplog.text
        checkpoints.write_attempt_record(root, dataclasses.replace(alive, updated_time=time.time()))
        ckpt.maybe_save(2, lambda: {"x": 2})
        ckpt.maybe_save(3, lambda: {"x": 3})
    warnings = [r.getMessage() for r in caplog.records if "another process" in r.getMessage()]
    assert len(warnings) == 1
    assert f"writing checkpoints to {root} now (attempt x-vm-alive, host vm-alive" in warnings[0]


def test_a_replica_restoring_while_the_chief_saves_with_keep_last_finds_its_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A replica that is not the chief restores as the chief commits step 2 and its keep_last=1
    # deletes step 1: step 2 was read before its commit, step 1 after its removal, and the
    # replica started from step 0 beside a chief at step 2.
    chief = _manager(tmp_path, keep_last=1)
    chief.save(1, _state(1))
    (tmp_path / "step-2").mkdir()  # the chief is writing it
    decode_step = restore_module.decode_step

    def replica_behind_the_chief(root: str, step: int, **kwargs: bool) -> object:
        try:
            return decode_step(root, step, **kwargs)
        finally:
            if step == 2 and chief.committed_steps() == [1]:
                chief.save(2, _state(2))
                chief.wait()  # retention included

    monkeypatch.setattr(restore_module, "decode_step", replica_behind_the_chief)
    restored = _manager(tmp_path, writer=False).restore()
    assert restored is not None and restored.step == 2


def test_a_root_holding_only_a_torn_step_is_told_of_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A first attempt killed in its first save: the restore looks again for a commit a writer
    # may have made meanwhile, but says once that the step was never committed.
    (tmp_path / "step-1").mkdir()
    (tmp_path / "step-1" / "x.json").write_text("1")
    with caplog.at_level(logging.INFO):
        assert _manager(tmp_path).restore() is None
    told = [r for r in caplog.records if "not restoring checkpoint: step 1" in r.getMessage()]
    assert [r.levelno for r in told] == [logging.INFO]


@pytest.mark.parametrize(
    ("metric", "kept"), [("rmse", [2, 4]), ("val_loss", [2, 4]), ("accuracy", [3, 4])]
)
def test_keep_best_ranks_a_metric_as_its_name_says_without_best_mode(
    tmp_path: Path, metric: str, kept: list[int]
) -> None:
    # keep_best=1, best_metric="rmse" kept the worst step (rmse 0.9) and deleted the best
    # (0.1): best_mode defaulted to "max" whatever the name, where best:rmse minimises it.
    ckpt = _manager(tmp_path, keep_last=1, keep_best=1, best_metric=metric)
    for step, value in {1: 0.5, 2: 0.1, 3: 0.9, 4: 0.3}.items():
        ckpt.save(step, {"x": step}, metrics={metric: value})
    assert ckpt.committed_steps() == kept
    explicit = _manager(
        tmp_path / "max", keep_last=1, keep_best=1, best_metric=metric, best_mode="max"
    )
    for step, value in {1: 0.5, 2: 0.1, 3: 0.9, 4: 0.3}.items():
        explicit.save(step, {"x": step}, metrics={metric: value})
    assert explicit.committed_steps() == [3, 4]  # an explicit mode is kept


def test_metrics_may_be_numpy_arrays_of_any_size(tmp_path: Path) -> None:
    # A per-class loss array stopped the training with numpy's "can only convert an array of
    # size 1 to a Python scalar", naming no metric: it is kept as a list, as evaluate()'s are.
    with _manager(tmp_path) as ckpt:
        ckpt.save(1, {"x": 1}, metrics={"loss": np.float32(0.5), "per_class": np.array([1, 2])})
    metrics = checkpoints.read_manifest(str(tmp_path), 1).metadata["metrics"]
    assert metrics == {"loss": 0.5, "per_class": [1, 2]}


def test_keep_best_never_ranks_a_nan_metric_above_the_best(tmp_path: Path) -> None:
    ckpt = _manager(tmp_path, keep_last=1, keep_best=1, best_metric="loss", best_mode="min")
    for step, loss in {1: float("nan"), 2: 0.3, 3: 0.8, 4: float("inf"), 5: 0.9}.items():
        ckpt.save(step, {"x": step}, metrics={"loss": loss})
    assert ckpt.committed_steps() == [2, 5]  # the best (0.3) and the newest


def test_keep_best_refuses_a_metric_that_is_no_number_instead_of_deleting_the_best(
    tmp_path: Path,
) -> None:
    # metrics={"val/auc": f"{auc:.4f}"}, formatted for a log: no step ranked, and retention
    # deleted the best step (0.95) as the run went on, silently.
    ckpt = _manager(tmp_path, keep_last=1, keep_best=1, best_metric="val/auc", interval="1")
    ckpt.save(1, {"x": 1}, metrics={"val/auc": np.float32(0.91), "note": "warm-up"})
    with pytest.raises(ValueError) as info:
        ckpt.maybe_save(2, {"x": 2}, metrics={"val/auc": "0.95"})
    assert str(info.value) == (
        "metrics['val/auc'] = '0.95' is a str, not a number: keep_best ranks steps by "
        "'val/auc', and a step whose value is no number never ranks, so the best steps would be "
        "deleted; give it as a number (float(...))"
    )
    assert ckpt.committed_steps() == [1]
    ckpt.save(2, {"x": 2}, metrics={"val/auc": float("nan")})  # a number: it never ranks
    assert ckpt.committed_steps() == [1, 2]


def test_retention_removes_old_torn_steps(tmp_path: Path) -> None:
    (tmp_path / "step-1").mkdir(parents=True)
    (tmp_path / "step-1" / "x.json").write_text("1")  # a killed save, never committed
    ckpt = _manager(tmp_path, keep_last=5)
    ckpt.save(2, {"x": 2})
    ckpt.wait()  # retention runs beside the training loop
    assert checkpoints.list_steps(str(tmp_path)) == [2]


def test_async_save_snapshots_state(tmp_path: Path) -> None:
    weights = np.zeros(1000)
    with _manager(tmp_path, async_save=True, keep_last=None) as ckpt:
        assert ckpt.save(1, {"w": weights}) is None  # written in the background
        weights += 1.0  # the caller goes on training at once
        ckpt.save(2, {"w": weights})
        ckpt.wait()
        assert ckpt.last_committed_step == 2
    assert not _manager(tmp_path).restore(step=1).state["w"].any()
    assert (_manager(tmp_path).restore(step=2).state["w"] == 1.0).all()


def test_async_save_failure_surfaces(tmp_path: Path) -> None:
    blocker = tmp_path / "blocked"
    ckpt = _manager(blocker, async_save=True, record_attempts=False)
    # the storage fails after the start (a root given as a file is refused at once)
    blocker.write_text("a file where the checkpoint root should be a directory")
    ckpt.save(1, {"x": 1})
    with pytest.raises(CheckpointError, match="background checkpoint save failed"):
        ckpt.wait()


def test_a_failed_final_async_save_raises_when_leaving_the_context(tmp_path: Path) -> None:
    """The last save of a run in the background must not fail silently (the run would end 0)."""
    blocker = tmp_path / "blocked"
    settings = {"async_save": True, "record_attempts": False, "save_retries": 0}
    with (
        pytest.raises(CheckpointError, match="background checkpoint save failed"),
        _manager(blocker, **settings) as ckpt,
    ):
        # the storage fails after the start (a root given as a file is refused at once)
        blocker.write_text("a file where the checkpoint root should be a directory")
        ckpt.save(100, {"x": 1})  # the final save, written in the background
    # an error already ending the attempt is not replaced by the save's
    blocker.unlink()
    with pytest.raises(KeyError), _manager(blocker, **settings) as ckpt:
        blocker.write_text("a file where the checkpoint root should be a directory")
        ckpt.save(100, {"x": 1})
        raise KeyError("the user's own error")


def test_unencodable_state_names_the_key(tmp_path: Path) -> None:
    ckpt = _manager(tmp_path)
    with pytest.raises(StateEncodingError, match=r"state\['model'\]"):
        ckpt.save(1, {"model": object()})
    with pytest.raises(ValueError, match="state key"):
        ckpt.save(1, {"a/b": 1})
    with pytest.raises(ValueError, match="step must be"):
        ckpt.save(-1, {"a": 1})
    with pytest.raises(ValueError, match=r"metrics\['acc'\]"):
        ckpt.save(1, {"a": 1}, metrics={"acc": object()})
    assert checkpoints.list_steps(str(tmp_path)) == []


@pytest.mark.parametrize("bad", ["4", 4.0, True, -1])
def test_restore_checks_its_step_as_save_does(tmp_path: Path, bad: object) -> None:
    # "4" was a bare TypeError, 4.0 and True a misleading "step 4.0 ... has no manifest.json".
    ckpt = _manager(tmp_path)
    ckpt.save(4, {"a": 1}, blocking=True)
    for call in (lambda: ckpt.restore(step=bad), lambda: ckpt.save(bad, {"a": 1})):  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^step must be a whole number >= 0.*, got "):
            call()
    assert checkpoints.list_steps(str(tmp_path)) == [4]


def test_a_step_a_pipelines_metadata_cannot_hold_is_refused(tmp_path: Path) -> None:
    """KFP metadata holds numbers as doubles: 2**53 + 1 would come back as 2**53."""
    ckpt = _manager(tmp_path)
    ckpt.save(2**53 - 1, {"a": 1}, blocking=True)
    for call in (lambda: ckpt.save(2**53, {"a": 1}), lambda: ckpt.restore(step=2**70)):
        with pytest.raises(ValueError, match=r"^step must be at most 9007199254740991 .*got "):
            call()
    assert checkpoints.list_steps(str(tmp_path)) == [2**53 - 1]


def test_any_integral_step_is_saved_and_restored(tmp_path: Path) -> None:
    # numpy.int64 (a framework's step counter) was restored but refused by maybe_save and save.
    ckpt = _manager(tmp_path, interval=2)
    assert ckpt.maybe_save(np.int64(6), {"a": np.arange(3)})
    ckpt.save(np.int32(8), {"a": np.arange(3)}, blocking=True)
    ckpt.wait()
    assert ckpt.committed_steps() == [6, 8]
    restored = ckpt.restore(step=np.int64(6))
    assert restored is not None and type(restored.step) is int and restored.step == 6
    assert ckpt.last_committed_step == 6


def test_arguments_are_validated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIP_CHECKPOINT_DIR", raising=False)
    with pytest.raises(ValueError, match="AIP_CHECKPOINT_DIR"):
        CheckpointManager()
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", str(tmp_path))
    assert CheckpointManager().root == str(tmp_path)
    for kwargs, field in [
        ({"keep_last": 0}, "keep_last"),
        ({"keep_best": 1}, "best_metric"),
        ({"best_mode": "up"}, "best_mode"),
        ({"interval": "often"}, "checkpoint interval"),
        ({"grace_period": -1}, "grace_period"),
        ({"grace_period": float("inf")}, "grace_period must be a number of seconds >= 0"),
        ({"grace_period": float("nan")}, "grace_period must be a number of seconds >= 0"),
        ({"grace_period": True}, "grace_period must be a number of seconds >= 0"),
        # True was taken for 1, a string mtbp raised float()'s own message, an infinite one
        # made auto save once and never again, a metric named by a number never ranked.
        ({"keep_last": True}, "keep_last must be an int >= 1"),
        ({"keep_best": True, "best_metric": "acc"}, "keep_best must be an int >= 0"),
        ({"keep_best": 1, "best_metric": 3}, "best_metric must be the name"),
        ({"mtbp": "1h"}, "mtbp must be a number of seconds > 0"),
        ({"mtbp": float("inf")}, "mtbp must be a number of seconds > 0"),
        # A config's "false" is truthy: it turned async saving on; an infinite heartbeat left
        # the attempt record unwritten after the first save, and True meant every second.
        ({"async_save": "false"}, "async_save must be True or False, got 'false'"),
        ({"allow_pickle": "no"}, "allow_pickle must be True or False"),
        ({"handle_signals": None}, "handle_signals must be True or False"),
        ({"record_attempts": 2}, "record_attempts must be True or False"),
        ({"writer": "chief"}, "writer must be True or False"),
        ({"heartbeat_seconds": float("inf")}, "heartbeat_seconds must be a number of seconds"),
        ({"heartbeat_seconds": True}, "heartbeat_seconds must be a number of seconds"),
    ]:
        with pytest.raises(ValueError, match=field):
            CheckpointManager(str(tmp_path), **kwargs)
    # what a switch may also be: NumPy's bool and the ints 0 and 1
    np = pytest.importorskip("numpy")
    manager = CheckpointManager(str(tmp_path), async_save=np.bool_(True), allow_pickle=0)
    assert manager.async_save is True


@pytest.mark.parametrize(
    "kwargs",
    [
        {"keep_last": np.int64(1)},
        {"keep_best": np.int32(1), "best_metric": "loss", "keep_last": np.uint8(1)},
        {"save_retries": np.int64(0), "heartbeat_seconds": np.float32(0.5)},
        {"grace_period": np.float32(5), "interval": np.int16(2)},
    ],
    ids=["keep_last", "keep_best", "retries-heartbeat", "grace-interval"],
)
def test_numpy_numbers_count_as_the_numbers_they_are(tmp_path: Path, kwargs) -> None:
    """A config read through NumPy gives np.int64 and np.float32: each works as its int or float.

    They are no int or float subclasses, so keep_last=np.int64(1) was refused as no int; the
    manager keeps each as the plain Python number (its settings are written into JSON records).
    """
    plain = {k: v.item() if isinstance(v, np.generic) else v for k, v in kwargs.items()}
    kept = {}
    for name, settings_given in (("numpy", kwargs), ("plain", plain)):
        root = tmp_path / name
        with CheckpointManager(str(root), record_attempts=False, **settings_given) as ckpt:
            for step, loss in enumerate([0.5, 0.1, 0.4, 0.3, 0.2], start=1):
                ckpt.save(step, {"w": np.zeros(2)}, metrics={"loss": np.float32(loss)})
        for setting in ("keep_last", "keep_best", "grace_period"):
            assert type(getattr(ckpt, setting)) in (int, float, type(None)), setting
        kept[name] = sorted(p.name for p in root.iterdir())
    assert kept["numpy"] == kept["plain"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"keep_last": np.bool_(True)}, "keep_last must be an int >= 1"),
        ({"keep_last": np.float64(2.0)}, "keep_last must be an int >= 1"),
        ({"save_retries": np.float32(1)}, "save_retries must be an int >= 0"),
        ({"grace_period": np.float64("nan")}, "grace_period must be a number of seconds"),
        ({"heartbeat_seconds": np.array([1.0])}, "heartbeat_seconds must be a number of seconds"),
    ],
)
def test_numpy_values_that_are_no_such_number_are_still_refused(
    tmp_path: Path, kwargs, field
) -> None:
    with pytest.raises(ValueError, match=field):
        CheckpointManager(str(tmp_path), **kwargs)


class _Clock:
    """A clock each save makes jump: saves "take" ``save_cost`` seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_slow_save_warns_about_the_grace_period(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = _Clock()

    class SlowState(dict):
        def items(self):  # encoding the state "takes" 45 s
            clock.now += 45.0
            return super().items()

    ckpt = _manager(tmp_path, grace_period=30.0, clock=clock)
    with caplog.at_level(logging.WARNING):
        ckpt.save(1, SlowState(x=1))
    assert "longer than the 30s grace period" in caplog.text


def test_notice_skips_a_final_save_that_cannot_fit(tmp_path: Path) -> None:
    clock = _Clock()
    notice = PreemptionNotice(grace_period=30.0, clock=clock)
    ckpt = _manager(tmp_path, interval="1000", notice=notice, clock=clock)

    class SlowState(dict):
        def items(self):
            clock.now += 20.0
            return super().items()

    ckpt.save(1, SlowState(x=1))  # a save takes 20 s
    notice.request("test")
    clock.now += 15.0  # 15 s of the grace period left
    assert ckpt.maybe_save(2, lambda: {"x": 2}) is False
    assert ckpt.should_stop
    assert ckpt.committed_steps() == [1]
    notice2 = PreemptionNotice(grace_period=30.0, clock=clock)
    ckpt2 = _manager(tmp_path / "b", interval="1000", notice=notice2, clock=clock)
    ckpt2.save(1, SlowState(x=1))
    notice2.request("test")  # 30 s left: a 20 s save fits
    assert ckpt2.maybe_save(2, lambda: {"x": 2}) is True
    assert ckpt2.committed_steps() == [1, 2]
    assert ckpt2.maybe_save(2, lambda: {"x": 2}) is False  # already saved


def test_sigterm_handler_chains_to_the_previous_one(tmp_path: Path) -> None:
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with CheckpointManager(str(tmp_path), interval="1000") as ckpt:
            assert not ckpt.should_stop
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = threading.Event()
            for _ in range(200):  # the handler runs on the main thread's next bytecode
                if ckpt.should_stop:
                    break
                deadline.wait(0.01)
            assert ckpt.should_stop
            assert ckpt.notice.reason == "received SIGTERM"
            assert seen == [signal.SIGTERM]
            assert ckpt.maybe_save(3, {"x": 3}) is True
        # leaving puts the earlier handler back
        assert signal.getsignal(signal.SIGTERM) is not ckpt.notice._handle
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(200):
            if len(seen) == 2:
                break
            threading.Event().wait(0.01)
        assert seen == [signal.SIGTERM, signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
    records = checkpoints.read_attempt_records(str(tmp_path))
    assert records[-1].exit_reason == "preempted"
    assert records[-1].last_committed_step == 3
    # when step 3 was committed: the report's kept-work boundary, even after retention
    step3 = checkpoints.read_manifest(str(tmp_path), 3)
    assert step3.wall_time <= records[-1].last_commit_time <= records[-1].end_time


def test_install_outside_main_thread_is_refused() -> None:
    errors = []

    def target() -> None:
        try:
            PreemptionNotice().install()
        except RuntimeError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    assert errors and "main thread" in errors[0]


def test_attempt_record_exit_reasons(tmp_path: Path) -> None:
    with _manager(tmp_path, interval="1") as ckpt:
        ckpt.save(1, {"x": 1})
    with pytest.raises(RuntimeError), _manager(tmp_path) as ckpt:
        restored = ckpt.restore()
        assert restored.step == 1
        raise RuntimeError("diverged")
    ckpt = _manager(tmp_path)
    assert ckpt.restore().step == 1  # restored before entering: still recorded
    with ckpt:
        pass
    records = checkpoints.read_attempt_records(str(tmp_path))
    assert [(r.exit_reason, r.first_step) for r in records] == [
        ("finished", 0),
        ("error", 1),
        ("finished", 1),
    ]
    assert records[1].error == "RuntimeError: diverged"
    assert records[0].saves == 1 and records[0].save_seconds_max >= 0


_ENDS_WITHOUT_CLOSE = """
import sys, threading, time
from kfp_spot import checkpoints
from kfp_spot.trainer import CheckpointManager

write_step = checkpoints.write_step


def once_the_loop_has_ended(*args, **kwargs):
    threading.main_thread().join()  # the main thread is done: the interpreter is ending
    time.sleep(0.2)  # (the interpreter stopped the daemon writer here, before the write)
    return write_step(*args, **kwargs)


checkpoints.write_step = once_the_loop_has_ended
ckpt = CheckpointManager(sys.argv[1], handle_signals=False, async_save=True)
ckpt.save(7, {"w": [1.0, 2.0], "progress": {"step": 7}})
print("loop over, no close()")
"""


def test_a_background_save_commits_when_the_process_ends_without_close(tmp_path: Path) -> None:
    # A loop with async_save and no `with` (no close()) ended, exit status 0, and its last
    # save was never written: the writer thread is a daemon, stopped with the interpreter.
    done = subprocess.run(
        [sys.executable, "-c", _ENDS_WITHOUT_CLOSE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    restored = _manager(tmp_path).restore()
    assert restored is not None and restored.step == 7
    assert restored.state == {"w": [1.0, 2.0], "progress": {"step": 7}}


def test_import_pulls_in_neither_kfp_nor_aiplatform() -> None:
    code = (
        "import sys, kfp_spot.trainer\n"
        "bad = sorted(m for m in sys.modules if m == 'kfp' or m.startswith('kfp.')"
        " or m.startswith('google.cloud.aiplatform') or m == 'torch' or m == 'sklearn')\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == ""


@pytest.mark.parametrize(
    ("env", "chief"),
    [
        ({}, True),
        ({"RANK": "0"}, True),
        ({"RANK": "3"}, False),
        ({"CLUSTER_SPEC": '{"task": {"type": "workerpool0", "index": 0}}'}, True),
        ({"CLUSTER_SPEC": '{"task": {"type": "workerpool1", "index": 0}}'}, False),
        ({"CLUSTER_SPEC": '{"task": {"type": "workerpool0", "index": 1}}'}, False),
        ({"TF_CONFIG": '{"task": {"type": "chief", "index": 0}}'}, True),
    ],
)
def test_only_the_chief_replica_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict, chief: bool
) -> None:
    for key in ("RANK", "CLUSTER_SPEC", "TF_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert is_chief() is chief
    with CheckpointManager(str(tmp_path), interval="1", handle_signals=False) as ckpt:
        ckpt.maybe_save(1, {"x": 1})
    assert checkpoints.list_steps(str(tmp_path)) == ([1] if chief else [])
    assert len(checkpoints.read_attempt_records(str(tmp_path))) == (1 if chief else 0)


_DAMAGE = ("flip", "truncate", "drop-manifest")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keep=st.integers(min_value=1, max_value=3),
    ops=st.lists(
        st.one_of(
            st.just(("save", 0, "")),
            st.tuples(st.just("damage"), st.integers(0, 20), st.sampled_from(_DAMAGE)),
        ),
        max_size=14,
    ),
)
def test_restore_always_returns_the_newest_intact_step(tmp_path_factory, keep: int, ops) -> None:
    """Saves, retention and damage in any order: restore() is the newest intact step, exactly."""
    root = tmp_path_factory.mktemp("ck")
    ckpt = _manager(root, keep_last=keep, record_attempts=False)
    status: dict[int, str] = {}  # the model: step -> ok / flip / truncate / drop-manifest
    step = 0
    for op, index, kind in ops:
        if op == "save":
            step += 1
            ckpt.save(step, {"w": np.full(64, float(step)), "step": step})
            ckpt.wait()  # retention removes old steps beside the next training steps
            status[step] = "ok"
            # retention: committed = manifest present and sizes right (hashes are not re-read)
            committed = sorted(s for s, v in status.items() if v in ("ok", "flip"))
            for s in list(status):
                if (s in committed and s not in committed[-keep:]) or (
                    s not in committed and s < committed[-1]
                ):
                    del status[s]
        elif status:
            target = sorted(status)[index % len(status)]
            if status[target] != "ok":
                continue
            directory = root / f"step-{target}"
            weights = directory / "w.npy"
            if kind == "flip":
                data = bytearray(weights.read_bytes())
                data[-1] ^= 0x40
                weights.write_bytes(bytes(data))
            elif kind == "truncate":
                weights.write_bytes(weights.read_bytes()[:-1])
            else:
                (directory / "manifest.json").unlink()
            status[target] = kind
        assert checkpoints.list_steps(str(root)) == sorted(status)
        intact = [s for s, v in status.items() if v == "ok"]
        restored = _manager(root, record_attempts=False).restore()
        if not intact:
            assert restored is None
        else:
            assert restored.step == max(intact)
            assert restored.state["step"] == max(intact)
            assert (restored.state["w"] == float(max(intact))).all()


def test_async_snapshot_copies_mutable_buffers_and_reuses_them(tmp_path: Path) -> None:
    weights = np.zeros(1 << 18)
    scratch = bytearray(b"a" * 1000)
    with _manager(tmp_path, async_save=True, keep_last=None, interval="1") as ckpt:
        for step in (1, 2, 3):
            ckpt.save(step, {"w": weights, "scratch": scratch})
            weights += 1.0  # the loop goes on at once; the checkpoint keeps what was saved
            scratch[:] = str(step).encode() * 1000
        ckpt.wait()
    saved_scratch = {1: b"a" * 1000, 2: b"1" * 1000, 3: b"2" * 1000}
    for step in (1, 2, 3):
        restored = _manager(tmp_path).restore(step=step)
        assert (restored.state["w"] == step - 1.0).all()
        assert restored.state["scratch"] == saved_scratch[step]


def test_async_snapshot_of_a_large_array_is_exact(tmp_path: Path) -> None:
    weights = np.random.default_rng(0).random((5 << 20) + 3)  # > 16 MiB: copied in two halves
    expected = weights.tobytes()
    with _manager(tmp_path, async_save=True) as ckpt:
        ckpt.save(1, {"w": weights})
        weights[:] = 0.0
    assert _manager(tmp_path).restore().state["w"].tobytes() == expected


def test_metrics_given_to_the_save_of_a_committed_step_are_named_as_not_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with _manager(tmp_path, interval=1) as ckpt:
        ckpt.maybe_save(2, lambda: {"x": 2}, metrics={"loss": 0.5})
        with caplog.at_level(logging.WARNING):
            kept = ckpt.save(2, {"x": 2}, metrics={"accuracy": 0.9})
    assert kept is not None and kept.metadata["metrics"] == {"loss": 0.5}
    assert "already committed" in caplog.text and "'accuracy': 0.9" in caplog.text


def test_a_step_that_does_not_exist_is_named_so_with_the_steps_there(tmp_path: Path) -> None:
    # load_checkpoint(".../step-999") said the step had no manifest.json "(torn or still being
    # written)", as of a step directory whose writer stopped, though there was no such step
    from kfp_spot.trainer import load_checkpoint

    ckpt = _manager(tmp_path)
    for step in (3, 5):
        ckpt.save(step, {"a": step}, blocking=True)
    with pytest.raises(checkpoints.CheckpointCorruptError) as missing:
        load_checkpoint(str(tmp_path / "step-999"))
    assert str(missing.value) == f"step 999 does not exist under {tmp_path} (its steps: 3, 5)"
    (tmp_path / "step-7").mkdir()  # a step whose writer stopped before its manifest: as before
    with pytest.raises(checkpoints.CheckpointCorruptError, match=r"torn or still being written"):
        load_checkpoint(str(tmp_path / "step-7"))


def test_keep_best_warns_when_saves_record_other_metrics_than_its_own(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # best_metric="val_acc" with saves recording "val_accuracy": no step ever ranked, so the best
    # step (2) was deleted like any other, without a word.
    ckpt = _manager(tmp_path, keep_last=2, keep_best=1, best_metric="val_acc")
    with caplog.at_level(logging.WARNING, logger="kfp_spot.trainer"):
        for step in range(1, 5):
            ckpt.save(step, {"x": step}, metrics={"val_accuracy": 0.9 if step == 2 else 0.1})
    told = [r.getMessage() for r in caplog.records if "best_metric='val_acc'" in r.getMessage()]
    assert len(told) == 1 and "'val_accuracy'" in told[0]
    caplog.clear()
    ranked = _manager(tmp_path / "ok", keep_last=1, keep_best=1, best_metric="acc")
    with caplog.at_level(logging.WARNING, logger="kfp_spot.trainer"):
        ranked.save(1, {"x": 1}, metrics={"acc": 0.5})
        ranked.save(2, {"x": 2}, metrics={"loss": 0.5})  # recorded on some saves only: fine
    assert not [r for r in caplog.records if "best_metric" in r.getMessage()]


def test_saves_from_two_threads_commit_only_whole_steps(tmp_path: Path) -> None:
    # Two threads saving through one manager interleaved their writes: one's retention deleted
    # the other's step mid-write (committed with a file missing) or joined a retention thread
    # not started yet (RuntimeError from inside the library).
    ckpt = _manager(tmp_path, keep_last=2)
    errors: list[BaseException] = []

    def run(first: int) -> None:
        try:
            for step in range(first, 60, 2):
                ckpt.save(step, {"w": np.full(64, step), "meta": {"step": step}})
        except Exception as exc:  # noqa: BLE001 - the test reports any error
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(first,)) for first in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for step in ckpt.committed_steps():
        restored = ckpt.restore(step=step)
        assert restored is not None and int(restored.state["w"][0]) == step
    assert ckpt.committed_steps() == [58, 59]


def test_an_async_managers_save_after_close_is_committed_before_it_returns(
    tmp_path: Path,
) -> None:
    # The run's last save written after the with block went to a background thread nothing
    # waited for: the process exited with the step half-written, and no error was raised.
    with _manager(tmp_path, async_save=True, interval=1) as ckpt:
        ckpt.maybe_save(1, {"w": np.ones(4)})
    manifest = ckpt.save(2, {"w": np.full(4, 2.0)})
    assert manifest is not None and manifest.step == 2
    assert [m.step for m in checkpoints.committed_steps(str(tmp_path))][-1] == 2
    with ckpt:  # entered again: async as configured
        assert ckpt.save(3, {"w": np.full(4, 3.0)}) is None
    assert ckpt.restore() is not None and ckpt.last_committed_step == 3


def test_a_second_manager_open_on_the_same_root_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Two managers writing one root (a framework callback and the loop's own, say) deleted each
    # other's steps through keep_last and overwrote a step number both saved, without a word.
    def told() -> list[str]:
        return [
            r.getMessage() for r in caplog.records if "another CheckpointManager" in r.getMessage()
        ]

    with caplog.at_level(logging.WARNING, logger="kfp_spot.trainer"):
        with _manager(tmp_path):
            pass
        with _manager(tmp_path):  # one after the other: fine
            assert told() == []
            with _manager(tmp_path / "." / ""), _manager(tmp_path / "other"):
                pass
            assert len(told()) == 1 and str(tmp_path) in told()[0]
            with _manager(tmp_path, writer=False):  # a replica that only restores
                pass
        with _manager(tmp_path):
            pass
    assert len(told()) == 1


def test_a_save_retention_deletes_at_once_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A run that did not restore, in a root an earlier run left steps 8-10 in (or a step count
    # that went back, a per-epoch counter): keep_last kept the higher numbers and deleted each
    # new save as soon as it was committed, silently; a restore returned the old step 10.
    with _manager(tmp_path, keep_last=2) as old:
        for step in (8, 9, 10):
            old.save(step, {"x": step})
    with (
        caplog.at_level(logging.WARNING, logger="kfp_spot.trainer"),
        _manager(tmp_path, keep_last=2) as fresh,
    ):
        fresh.save(1, {"x": 1})
        fresh.save(2, {"x": 2})
        fresh.wait()
    told = [r.getMessage() for r in caplog.records if "deleted right after" in r.getMessage()]
    assert len(told) == 1 and told[0].startswith("checkpoint step 1 was deleted")
    assert str(tmp_path) in told[0]
    caplog.clear()
    with (
        caplog.at_level(logging.WARNING, logger="kfp_spot.trainer"),
        _manager(tmp_path / "new", keep_last=2) as ckpt,
    ):
        for step in (1, 2, 3):
            ckpt.save(step, {"x": step})
        ckpt.wait()
    assert not [r for r in caplog.records if "deleted right after" in r.getMessage()]


def test_a_state_of_many_small_keys_is_warned_of_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A model's parameters given one key each: hundreds of files per save (one upload each on
    # gs://), which a save on the notice may not finish, where one dict of arrays is one .npz.
    from kfp_spot.trainer.saving import MANY_FILES

    params = {f"layer{i}": np.ones(2) for i in range(MANY_FILES + 1)}
    ckpt = _manager(tmp_path, keep_last=1)
    with caplog.at_level(logging.WARNING, logger="kfp_spot.trainer"):
        ckpt.save(1, params)
        ckpt.save(2, params)
        ckpt.save(3, {"params": params})  # one .npz
    told = [r.getMessage() for r in caplog.records if "each is a file of its own" in r.getMessage()]
    assert len(told) == 1 and f"{MANY_FILES + 1} keys" in told[0]
    restored = ckpt.restore()
    assert restored is not None and len(restored.state["params"]) == MANY_FILES + 1
