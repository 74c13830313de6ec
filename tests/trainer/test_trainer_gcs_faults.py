"""Checkpoints on gs:// through an unreliable network: no torn step, training goes on.

The GCS emulator sits behind :mod:`faultproxy`, which answers a share of requests with 429/503,
delays them, or cuts the upload or the response mid-body. The bitwise-resume sweep of the example
trainer runs through it; after every attempt each step that has a manifest must verify and
decode completely, and the final weights must equal an uninterrupted run's.
"""

from __future__ import annotations

import logging
import re
import uuid

import numpy as np
import pytest
from faultproxy import FaultProxy
from test_trainer_example import SCENARIOS, _schedule, exit_status, reference, sweep_args
from trainer_testlib import load_model, run_trainer

from kfp_spot import checkpoints, fs
from kfp_spot.trainer import CheckpointManager


@pytest.fixture
def proxy(gs_bucket: str, monkeypatch: pytest.MonkeyPatch):
    import os

    with FaultProxy(os.environ["STORAGE_EMULATOR_HOST"], rate=0.04, seed=7) as faulty:
        yield faulty


def _manifest_present(root: str, step: int) -> bool:
    filesystem, path = fs.filesystem(f"{checkpoints.step_dir(root, step)}/manifest.json")
    filesystem.invalidate_cache()
    return filesystem.exists(path)


def _assert_no_torn_step(root: str) -> list[int]:
    """Every step with a manifest verifies and decodes whole; returns the committed steps."""
    committed = []
    for step in checkpoints.list_steps(root):
        if not _manifest_present(root, step):
            continue
        restored = CheckpointManager(root, handle_signals=False, record_attempts=False).restore(
            step=step
        )
        assert restored.step == step == int(restored.state["progress"]["step"])
        committed.append(step)
    return committed


# One scenario of each shape: sync and async, step intervals and auto, SIGKILL and SIGTERM.
# SCENARIOS[0] and [3] save every 7 and 3 steps: through the faulty proxy that is 18 and 43
# saves per attempt, the slowest tests of the suite. Every 21 and 9 steps keeps their shapes
# (sync/async, a step interval, the same SIGTERM/SIGKILL kinds at a save or a step) with a third
# of the saves; every save still crosses the faulty proxy.
GCS_SCENARIOS = [(0, "21", *SCENARIOS[0][2:]), (1, "9", *SCENARIOS[3][2:]), SCENARIOS[5]]


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "every", "async_save", "kinds"), GCS_SCENARIOS)
def test_preempted_run_on_faulty_gcs_ends_bitwise_equal(
    proxy: FaultProxy,
    gs_bucket: str,
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    every: str,
    async_save: bool,
    kinds: list[str],
) -> None:
    run_id = uuid.uuid4().hex
    ck, model = f"{gs_bucket}/{run_id}/checkpoints", f"{gs_bucket}/{run_id}/model"
    args = sweep_args(seed, every, async_save, pace=every == "auto" or async_save)
    schedule = _schedule(__import__("random").Random(f"{seed}-{every}-{kinds}"), every, kinds)
    through_proxy = {"STORAGE_EMULATOR_HOST": proxy.url}
    for point in schedule:
        run = run_trainer(ck, model, args, failpoints=point, timeout=600, **through_proxy)
        assert run.returncode == exit_status(point), (point, run.output)
        committed = _assert_no_torn_step(ck)
        if point.startswith("term"):
            stopped = int(re.search(r"preempted after step (\d+)", run.output).group(1))
            assert committed and committed[-1] <= stopped
    final = run_trainer(ck, model, args, timeout=600, **through_proxy)
    assert final.returncode == 0, final.output
    _assert_no_torn_step(ck)
    assert load_model(model) == reference(seed, tmp_path_factory), schedule
    assert proxy.counts["requests"] > 100
    injected = {k: proxy.counts[k] for k in ("error", "delay", "cut-request", "cut-response")}
    assert sum(injected.values()) > 0, proxy.counts


def test_a_save_that_keeps_failing_leaves_no_commit_and_training_goes_on(
    proxy: FaultProxy, gs_bucket: str, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    proxy.rate = 0.0
    root = f"{gs_bucket}/{uuid.uuid4().hex}/checkpoints"
    ckpt = CheckpointManager(
        root, interval="1", handle_signals=False, record_attempts=False, save_retries=1
    )
    weights = np.arange(1000.0)
    assert ckpt.maybe_save(1, {"w": weights, "progress": {"step": 1}})
    proxy.deny = re.compile(r"/upload/.*manifest\.json")  # manifest uploads refused: no commit
    with caplog.at_level(logging.WARNING):
        assert ckpt.maybe_save(2, {"w": weights * 2, "progress": {"step": 2}}) is False
    assert "training goes on" in caplog.text
    assert ckpt.failed_saves == 1
    assert not _manifest_present(root, 2)
    assert _assert_no_torn_step(root) == [1]
    proxy.deny = None
    assert ckpt.maybe_save(3, {"w": weights * 3, "progress": {"step": 3}})
    restored = CheckpointManager(root, handle_signals=False, record_attempts=False).restore()
    assert restored.step == 3 and (restored.state["w"] == weights * 3).all()


def test_a_step_file_cloud_storage_refuses_stops_the_restore_naming_it(
    proxy: FaultProxy, gs_bucket: str, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    # A 403 on one file of the newest step: the error is the storage's, not the checkpoint's,
    # so no older step is restored in its place (the local disk and the /gcs mount alike).
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    proxy.rate = 0.0
    root = f"{gs_bucket}/{uuid.uuid4().hex}/checkpoints"
    ckpt = CheckpointManager(root, handle_signals=False, record_attempts=False)
    for step in (1, 2):
        ckpt.save(step, {"w": np.full(100, float(step)), "progress": {"step": step}})
    proxy.deny = re.compile(r"/download/.*step-2%2Fw\.npy")
    with caplog.at_level(logging.WARNING), pytest.raises(OSError) as info:
        CheckpointManager(root, handle_signals=False, record_attempts=False).restore()
    message = str(info.value)
    assert message.startswith(f"step 2: file w.npy cannot be read ({root}/step-2/w.npy): ")
    assert "not a damaged checkpoint" in message
    assert "not restoring checkpoint" not in caplog.text
    proxy.deny = None
    restored = CheckpointManager(root, handle_signals=False, record_attempts=False).restore()
    assert restored.step == 2 and (restored.state["w"] == 2.0).all()
