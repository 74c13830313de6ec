"""The grace period the trainer plans its last save in and reports is the job's, not a constant."""

from __future__ import annotations

import logging
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
