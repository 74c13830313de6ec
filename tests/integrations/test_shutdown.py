"""Cleanup hooks on the preemption notice: after the save, time-boxed, never fatal."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from kfp_spot import checkpoints
from kfp_spot.trainer import CheckpointManager, PreemptionNotice
from kfp_spot.trainer.shutdown import CleanupHooks

REPO = Path(__file__).resolve().parents[2]


def frozen_notice(grace: float) -> PreemptionNotice:
    """A notice whose clock stands still: the grace period left is exactly ``grace``."""
    notice = PreemptionNotice(grace, clock=lambda: 100.0)
    notice.request("test")
    return notice


def test_a_hook_past_the_grace_left_is_cut_off_and_the_checkpoint_is_committed(tmp_path, caplog):
    release = threading.Event()
    ran_after_save: list[list[int]] = []
    ckpt = CheckpointManager(
        str(tmp_path), interval="1000", notice=frozen_notice(1.5), handle_signals=False
    )

    @ckpt.on_preemption
    def upload_logs() -> None:
        ran_after_save.append([m.step for m in checkpoints.committed_steps(str(tmp_path))])
        release.wait()  # hangs, as an upload to an unreachable host would

    with caplog.at_level(logging.WARNING), ckpt:
        assert ckpt.maybe_save(7, {"w": b"weights"}) is True
        assert ckpt.should_stop
    release.set()
    (result,) = ckpt.cleanup.results
    assert result.name.endswith("upload_logs") and result.status == "timeout"
    # Budget: the grace period left (1.5 s) less the reserve (1 s).
    assert 0.5 <= result.seconds < 5
    assert ran_after_save == [[7]], "the hook must run after the save is committed"
    assert [m.step for m in checkpoints.committed_steps(str(tmp_path))] == [7]
    assert any("cleanup hook" in r.message and "cut off" in r.message for r in caplog.records)
    (record,) = checkpoints.read_attempt_records(str(tmp_path))
    assert record.exit_reason == "preempted" and record.last_committed_step == 7


def test_hook_errors_are_logged_and_the_next_hook_still_runs(caplog):
    calls = []
    hooks = CleanupHooks(frozen_notice(30.0))

    def flush_metrics() -> None:
        calls.append("flush")
        raise ConnectionError("metrics backend is down")

    hooks.add(flush_metrics)
    hooks.add(lambda: calls.append("unlock"), name="release-lock")
    with caplog.at_level(logging.ERROR):
        results = hooks.run()
    assert calls == ["flush", "unlock"]
    assert [(r.status, r.error) for r in results] == [
        ("error", "ConnectionError: metrics backend is down"),
        ("ok", None),
    ]
    assert "metrics backend is down" in caplog.text
    assert hooks.run() == results  # once only


def test_no_time_left_skips_hooks_and_timeouts_bound_each_hook(caplog):
    hooks = CleanupHooks(frozen_notice(0.5))  # less than the 1 s reserve
    hooks.add(lambda: None, name="late")
    with caplog.at_level(logging.WARNING):
        assert [r.status for r in hooks.run()] == ["skipped"]
    assert "skipped" in caplog.text
    bounded = CleanupHooks(frozen_notice(30.0))
    stuck = threading.Event()
    bounded.add(stuck.wait, name="stuck", timeout=0.2)
    (result,) = bounded.run()
    stuck.set()
    assert result.status == "timeout" and result.seconds < 25


@pytest.mark.parametrize("bad", [0, -1, "5", True])
def test_bad_timeouts_are_refused(bad):
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0"):
        CleanupHooks(frozen_notice(1.0)).add(lambda: None, timeout=bad)
    with pytest.raises(TypeError, match="must be callable"):
        CleanupHooks(frozen_notice(1.0)).add("not a function")


SCRIPT = textwrap.dedent(
    """
    import logging, sys, threading
    from kfp_spot.trainer import CheckpointManager, PREEMPTED_EXIT_CODE
    logging.basicConfig(level=logging.INFO)
    with CheckpointManager(sys.argv[1], interval="1000", grace_period=3.0) as ckpt:
        ckpt.on_preemption(threading.Event().wait, name="hang-forever")
        for step in range(1, 1000000):
            ckpt.maybe_save(step, lambda: {"w": step.to_bytes(8, "little")})
            if ckpt.should_stop:
                sys.exit(PREEMPTED_EXIT_CODE)
    """
)


def test_a_real_sigterm_saves_runs_the_hook_cuts_it_off_and_exits_143(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), KFP_SPOT_FAILPOINTS="term@step:25")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # a hook that was not cut off would hang here
    )
    assert proc.returncode == 143, proc.stderr
    assert "cleanup hook hang-forever cut off" in proc.stderr
    assert [m.step for m in checkpoints.committed_steps(str(tmp_path))] == [25]
    (name,) = os.listdir(tmp_path / "_attempts")
    record = json.loads((tmp_path / "_attempts" / name).read_text())
    assert record["exit_reason"] == "preempted"
