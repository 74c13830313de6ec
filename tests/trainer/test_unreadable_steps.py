"""A step file the storage cannot read is an error naming it, never damage to skip or delete.

Damage is what preemption leaves (a torn step) or a file that fails its check. A file that is
there but cannot be read (permission denied, an I/O error: what Cloud Storage FUSE answers for a
failed request) says nothing of the step. Taken for damage, restore resumed from an older step,
and keep_last then deleted the new saves (the unreadable higher step ranked as newest) or the
unreadable step itself (it ranked as torn): a run's progress was lost either way.

Running as root, a chmod does not stop reads; the storage's refusal is injected where the
operating system answers: ``os.open`` for the file refuses, or reads of it fail.
"""

from __future__ import annotations

import builtins
import errno
import io
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from kfp_spot import checkpoints
from kfp_spot.trainer import CheckpointCorruptError, CheckpointManager, load_checkpoint


def _storage_fails(monkeypatch: pytest.MonkeyPatch, path: Path, code: int, at: str) -> None:
    """Make the storage fail with ``code`` opening ``path`` (``at="open"``) or reading it."""
    target = os.path.realpath(path)
    real_os_open, real_open = os.open, builtins.open
    faulty: set[int] = set()

    def os_open(name: object, flags: int, *args: object, **kwargs: object) -> int:
        if os.path.realpath(os.fspath(name)) == target:  # type: ignore[arg-type]
            if at == "open":
                raise OSError(code, os.strerror(code), os.fspath(name))  # type: ignore[arg-type]
            fd = real_os_open(name, flags, *args, **kwargs)  # type: ignore[arg-type]
            faulty.add(fd)
            return fd
        return real_os_open(name, flags, *args, **kwargs)  # type: ignore[arg-type]

    class FailingReads(io.FileIO):
        def readinto(self, buffer: object) -> int:
            raise OSError(code, os.strerror(code))

        def read(self, size: int = -1) -> bytes:
            raise OSError(code, os.strerror(code))

        readall = read

    def open_(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        if isinstance(file, int) and file in faulty:
            return FailingReads(file, "rb", closefd=bool(kwargs.get("closefd", True)))
        return real_open(file, mode, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", open_)


def _state(step: int) -> dict:
    return {"weights": np.full((8, 4), step, np.float32), "progress": {"step": step}}


def _manager(root: Path, **kwargs: object) -> CheckpointManager:
    return CheckpointManager(str(root), handle_signals=False, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    with _manager(tmp_path / "ckpt", keep_last=None) as ckpt:
        for step in (10, 20, 30):
            ckpt.save(step, _state(step))
    return tmp_path / "ckpt"


FAULTS = {
    "open-permission-denied": ("weights.npy", errno.EACCES, "open", PermissionError),
    "open-io-error": ("weights.npy", errno.EIO, "open", OSError),
    "read-io-error": ("weights.npy", errno.EIO, "read", OSError),
    "manifest-read-io-error": ("manifest.json", errno.EIO, "read", OSError),
    "manifest-permission-denied": ("manifest.json", errno.EACCES, "open", PermissionError),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_an_unreadable_newest_step_stops_the_restore_naming_the_file_and_loses_nothing(
    root: Path, fault: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    name, code, at, kind = FAULTS[fault]
    unreadable = root / "step-30" / name
    _storage_fails(monkeypatch, unreadable, code, at)
    ckpt = _manager(root, keep_last=2)
    with caplog.at_level(logging.WARNING), pytest.raises(kind) as info, ckpt:
        ckpt.restore()  # it resumed from step 20 here, with a warning
        ckpt.save(25, _state(25))  # and keep_last then deleted the new saves
        ckpt.save(26, _state(26))
    assert info.value.errno == code
    assert info.value.filename == str(unreadable)
    assert "step 30" in str(info.value) and "not a damaged checkpoint" in str(info.value)
    assert "not restoring checkpoint" not in caplog.text  # nothing skipped as damaged
    with pytest.raises(kind):  # the step alone, and the layout's readers, say the same
        load_checkpoint(str(root / "step-30"))
    with pytest.raises(kind):
        checkpoints.latest(str(root))
    monkeypatch.undo()  # the storage answers again: every step is there, the newest restores
    assert checkpoints.list_steps(str(root)) == [10, 20, 30]
    restored = _manager(root).restore()
    assert restored is not None and restored.step == 30
    assert restored.state["weights"].tobytes() == _state(30)["weights"].tobytes()


def test_damage_still_falls_back_to_the_older_step(root: Path) -> None:
    # The line between the two: a file cut short is damage, as before.
    weights = root / "step-30" / "weights.npy"
    weights.write_bytes(weights.read_bytes()[:-4])
    restored = _manager(root).restore()
    assert restored is not None and restored.step == 20
    with pytest.raises(CheckpointCorruptError):
        load_checkpoint(str(root / "step-30"))


def test_retention_deletes_no_step_because_another_cannot_be_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # keep_best kept step 1 (the best loss); its manifest became unreadable for a while, and the
    # next save's retention took it for a torn step older than the newest and deleted it.
    root = tmp_path / "ckpt"
    ckpt = _manager(root, keep_last=1, keep_best=1, best_metric="loss")
    for step, loss in ((1, 0.1), (2, 0.5), (3, 0.4)):
        ckpt.save(step, _state(step), metrics={"loss": loss})
    assert ckpt.committed_steps() == [1, 3]
    with monkeypatch.context() as patch:
        _storage_fails(patch, root / "step-1" / "manifest.json", errno.EACCES, "open")
        with caplog.at_level(logging.WARNING):
            ckpt.save(4, _state(4), metrics={"loss": 0.3})
            ckpt.wait()
        assert checkpoints.list_steps(str(root)) == [1, 3, 4]  # nothing deleted
    warned = [r.getMessage() for r in caplog.records if "retention after step 4" in r.getMessage()]
    assert len(warned) == 1 and "step-1/manifest.json" in warned[0], caplog.text
    ckpt.save(5, _state(5), metrics={"loss": 0.6})  # readable again: retention as usual
    assert ckpt.committed_steps() == [1, 5]
