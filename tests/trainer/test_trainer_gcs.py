"""The same checkpoint guarantees on gs:// paths, against a local GCS emulator."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from trainer_testlib import TWO_EPOCHS, load_model, run_trainer, two_epoch_run

from kfp_spot import checkpoints, fs
from kfp_spot.checkpoints import CheckpointCorruptError
from kfp_spot.trainer import CheckpointManager, load_checkpoint


@pytest.fixture
def gs_root(gs_bucket: str) -> str:
    return f"{gs_bucket}/{uuid.uuid4().hex}/checkpoints"


def _put(uri: str, data: bytes) -> None:
    filesystem, path = fs.filesystem(uri)
    with filesystem.open(path, "wb") as handle:
        handle.write(data)


def _get(uri: str) -> bytes:
    filesystem, path = fs.filesystem(uri)
    with filesystem.open(path, "rb") as handle:
        return handle.read()


@pytest.mark.parametrize("damage", ["manifest-missing", "truncated", "hash-mismatch"])
def test_torn_checkpoint_on_gcs_is_never_restored(gs_root: str, damage: str) -> None:
    ckpt = CheckpointManager(gs_root, handle_signals=False, keep_last=None)
    weights = np.arange(1000.0)
    ckpt.save(1, {"w": weights})
    ckpt.save(2, {"w": weights * 2})
    target = checkpoints.step_dir(gs_root, 2)
    if damage == "manifest-missing":
        filesystem, path = fs.filesystem(f"{target}/manifest.json")
        filesystem.rm_file(path)
    elif damage == "truncated":
        _put(f"{target}/w.npy", _get(f"{target}/w.npy")[:-8])
    else:
        data = bytearray(_get(f"{target}/w.npy"))
        data[-1] ^= 1
        _put(f"{target}/w.npy", bytes(data))
    with pytest.raises(CheckpointCorruptError):
        checkpoints.verify(gs_root, 2)
    restored = CheckpointManager(gs_root, handle_signals=False).restore()
    assert restored.step == 1
    assert restored.state["w"].tobytes() == weights.tobytes()
    assert checkpoints.latest(gs_root).step == 1


def test_layout_and_records_on_gcs(gs_root: str) -> None:
    with CheckpointManager(gs_root, interval="1", keep_last=2, handle_signals=False) as ckpt:
        for step in range(1, 5):
            ckpt.maybe_save(step, {"step": step})
    assert [m.step for m in checkpoints.committed_steps(gs_root)] == [3, 4]
    assert load_checkpoint(checkpoints.step_dir(gs_root, 4)).state == {"step": 4}
    records = checkpoints.read_attempt_records(gs_root)
    assert [(r.exit_reason, r.last_committed_step) for r in records] == [("finished", 4)]
    assert checkpoints.delete_step(gs_root, 4) is True
    assert checkpoints.latest(gs_root).step == 3


def test_a_step_that_does_not_exist_on_gcs_is_named_so(gs_root: str) -> None:
    with CheckpointManager(gs_root, interval="1", handle_signals=False) as ckpt:
        ckpt.maybe_save(2, {"step": 2})
    with pytest.raises(CheckpointCorruptError) as missing:
        load_checkpoint(checkpoints.step_dir(gs_root, 999))
    assert str(missing.value) == f"step 999 does not exist under {gs_root} (its steps: 2)"


def test_async_save_on_gcs(gs_root: str) -> None:
    with CheckpointManager(gs_root, async_save=True, handle_signals=False) as ckpt:
        w = np.ones(10_000)
        ckpt.save(1, {"w": w})
        w[:] = 7
    assert (CheckpointManager(gs_root, handle_signals=False).restore().state["w"] == 1).all()


@pytest.mark.slow
def test_example_trainer_preempted_on_gcs_ends_like_an_uninterrupted_run(
    gs_bucket: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    run_id = uuid.uuid4().hex
    # Compared with the run's shared uninterrupted run of the same settings (a checkpoint every
    # 20 steps there: the interval does not change the weights); model.npz only, no export.
    args = [*TWO_EPOCHS, "--checkpoint-every", "10"]
    local = two_epoch_run(tmp_path_factory)

    ck = f"{gs_bucket}/{run_id}/checkpoints"
    model = f"{gs_bucket}/{run_id}/model"
    killed = run_trainer(ck, model, args, failpoints="kill@save-mid:30")
    assert killed.returncode == -9, killed.output
    assert checkpoints.latest(ck).step == 20  # step 30 is torn
    termed = run_trainer(ck, model, args, failpoints="term@step:47")
    assert termed.returncode == 143, termed.output
    assert "resuming from step 20" in termed.output
    assert checkpoints.latest(ck).step == 47
    final = run_trainer(ck, model, args)
    assert final.returncode == 0, final.output
    assert "resuming from step 47" in final.output
    assert load_model(model) == load_model(local["model"])
    reasons = [r.exit_reason for r in checkpoints.read_attempt_records(ck)]
    assert reasons == [None, "preempted", "finished"]
