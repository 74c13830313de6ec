"""The grace period the trainer plans its last save in and reports is the job's, not a constant."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import pytest

from kfp_spot.trainer import CheckpointManager, PreemptionNotice
from kfp_spot.trainer.preemption import DEFAULT_GRACE_PERIOD, GRACE_PERIOD_VAR, job_grace_period


def test_the_job_says_it_else_a_spot_vms_30_seconds() -> None:
    assert job_grace_period({}) == DEFAULT_GRACE_PERIOD == 30.0  # Vertex AI sets no variable
    assert job_grace_period({GRACE_PERIOD_VAR: ""}) == 30.0
    assert job_grace_period({GRACE_PERIOD_VAR: "10.0"}) == 10.0  # what the emulator sets
    assert job_grace_period({GRACE_PERIOD_VAR: " 0 "}) == 0.0


@pytest.mark.parametrize("bad", ["ten", "-1", "nan", "inf"])
def test_a_bad_value_names_the_variable_and_what_is_valid(bad: str) -> None:
    with pytest.raises(ValueError, match=rf"^{GRACE_PERIOD_VAR}='{bad}': must be a number of "):
        job_grace_period({GRACE_PERIOD_VAR: bad})


def test_the_notice_and_the_log_use_the_jobs_grace_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(GRACE_PERIOD_VAR, "10.0")  # read when the manager is made, not on import
    ckpt = CheckpointManager(str(tmp_path), interval="1000", handle_signals=False)
    assert ckpt.grace_period == ckpt.notice.grace_period == 10.0
    ckpt.save(1, {"x": 1})
    ckpt.notice.request("test")
    with caplog.at_level(logging.WARNING, logger="kfp_spot"):
        ckpt.maybe_save(2, lambda: {"x": 2})
    assert "s of the 10s grace period left" in caplog.text
    assert "30s" not in caplog.text
    # An explicit grace period still wins over the job's.
    assert PreemptionNotice(grace_period=5.0).grace_period == 5.0
    monkeypatch.delenv(GRACE_PERIOD_VAR)
    assert PreemptionNotice().grace_period == 30.0


def test_a_handler_set_over_the_managers_is_warned_of_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A trainer (or a framework it imports) that sets its own SIGTERM handler after the manager
    # never got the notice: no save on it, the attempt killed after the grace period, silently.
    previous = signal.getsignal(signal.SIGTERM)
    try:
        warn = caplog.at_level("WARNING", logger="kfp_spot.trainer")
        with warn, CheckpointManager(str(tmp_path), interval="100") as ckpt:
            ckpt.maybe_save(1, {"w": [1.0]})
            assert caplog.records == []
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            for step in (2, 3):
                ckpt.maybe_save(step, {"w": [1.0]})
        warned = [r.getMessage() for r in caplog.records if "was replaced" in r.getMessage()]
        assert len(warned) == 1
        assert (
            "the SIGTERM handler CheckpointManager installed was replaced (now ignored"
            in (warned[0])
        )
        assert "nothing is saved on the notice" in warned[0]
        caplog.clear()
        warn = caplog.at_level("WARNING", logger="kfp_spot.trainer")
        with warn, CheckpointManager(str(tmp_path / "chained"), interval="100") as ckpt:
            managers = signal.getsignal(signal.SIGTERM)
            assert callable(managers)
            signal.signal(signal.SIGTERM, lambda signum, frame: managers(signum, frame))
            ckpt.maybe_save(1, {"w": [1.0]})  # a handler of its own, which may call the manager's
        assert not [r for r in caplog.records if "was replaced" in r.getMessage()]
    finally:
        signal.signal(signal.SIGTERM, previous)
