"""What the trainer's fast paths must keep: lazy package names, direct writes, one-read restore."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from trainer_testlib import step_writer

import kfp_spot.trainer
from kfp_spot import checkpoints
from kfp_spot.checkpoints import buffers, write
from kfp_spot.trainer import CheckpointCorruptError, CheckpointManager


def _manager(root: Path, **kwargs: object) -> CheckpointManager:
    kwargs.setdefault("handle_signals", False)
    kwargs.setdefault("record_attempts", False)
    return CheckpointManager(str(root), **kwargs)  # type: ignore[arg-type]


def test_importing_the_package_loads_none_of_its_modules() -> None:
    probe = (
        "import json, sys; import kfp_spot.trainer; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kfp_spot'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == ["kfp_spot", "kfp_spot.trainer"]


def test_every_public_name_resolves_from_its_module() -> None:
    for name in kfp_spot.trainer.__all__:
        value = getattr(kfp_spot.trainer, name)
        assert name in dir(kfp_spot.trainer)
        if isinstance(value, type) or callable(value):
            assert value.__module__.startswith(("kfp_spot.trainer", "kfp_spot.checkpoints"))
    with pytest.raises(AttributeError, match="no_such_name"):
        kfp_spot.trainer.no_such_name  # noqa: B018


@pytest.mark.parametrize("huge_pages", [True, False])
@pytest.mark.parametrize("size", [write.DIRECT_MIN_BYTES, write.DIRECT_MIN_BYTES * 2 + 4097])
def test_an_aligned_buffer_is_written_whole_with_its_crc32c(
    tmp_path: Path, size: int, huge_pages: bool
) -> None:
    buf = buffers.aligned_buffer(size, huge_pages=huge_pages)
    assert len(buf) == size
    assert np.frombuffer(buf, np.uint8).ctypes.data % buffers.PAGE == 0
    buf[:] = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    manifest = checkpoints.write_step(str(tmp_path), 1, {"big.bin": buf})
    data = (tmp_path / "step-1" / "big.bin").read_bytes()
    assert data == bytes(buf)
    assert manifest.files[0].crc32c == checkpoints.crc32c_b64(checkpoints.crc32c(data))
    checkpoints.verify(str(tmp_path), 1)


def test_an_unaligned_or_read_only_buffer_is_written_through_the_page_cache(
    tmp_path: Path,
) -> None:
    base = buffers.aligned_buffer(write.DIRECT_MIN_BYTES + 8)
    base[:] = 7
    unaligned = base[1:]  # one byte past a page boundary
    read_only = bytes(base)
    checkpoints.write_step(str(tmp_path), 1, {"a.bin": unaligned, "b.bin": read_only})
    assert (tmp_path / "step-1" / "a.bin").read_bytes() == bytes(unaligned)
    assert (tmp_path / "step-1" / "b.bin").read_bytes() == read_only
    checkpoints.verify(str(tmp_path), 1)


def test_an_async_save_of_a_large_array_is_a_plain_npy_file(tmp_path: Path) -> None:
    weights = np.random.default_rng(0).random((1 << 20) + 5)  # 8 MiB: a direct write, a tail
    expected = weights.copy()
    with _manager(tmp_path, async_save=True, keep_last=None) as ckpt:
        ckpt.save(1, {"w": weights, "small": bytearray(b"abc")})
        weights[:] = -1.0  # after the snapshot: not in the checkpoint
    assert np.array_equal(np.load(tmp_path / "step-1" / "w.npy"), expected)
    restored = _manager(tmp_path).restore(step=1)
    assert np.array_equal(restored.state["w"], expected)
    assert restored.state["small"] == b"abc"


def test_a_flipped_byte_in_a_large_file_is_refused_on_restore(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    first, second = rng.random(1 << 20), rng.random(1 << 20)
    with _manager(tmp_path, async_save=True, keep_last=None) as ckpt:
        ckpt.save(1, {"w": first})
        ckpt.save(2, {"w": second})
    path = tmp_path / "step-2" / "w.npy"
    with open(path, "r+b") as handle:  # deep in the file: past the first chunk read
        handle.seek(os.path.getsize(path) - 100)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(CheckpointCorruptError, match="crc32c"):
        _manager(tmp_path).restore(step=2)
    restored = _manager(tmp_path).restore()
    assert restored is not None and restored.step == 1
    assert np.array_equal(restored.state["w"], first)


def test_a_large_file_is_read_into_page_aligned_writable_memory(tmp_path: Path) -> None:
    weights = np.arange(1 << 20, dtype=np.float64)  # 8 MiB
    checkpoints.write_step(str(tmp_path), 1, {"w.bin": weights})
    _, files = checkpoints.read_verified(str(tmp_path), 1)
    data = files["w.bin"]
    assert np.frombuffer(data, np.uint8).ctypes.data % buffers.PAGE == 0
    assert bytes(data) == weights.tobytes()
    data[0] = 1  # decoders may use it in place


def _own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="a thread has its own nice value on Linux only"
)


@linux_only
def test_the_background_write_runs_below_the_loops_priority(tmp_path: Path) -> None:
    seen: list[int] = []
    done = threading.Event()

    def retain() -> None:  # the writer thread, after its commit
        seen.append(_own_nice())
        done.set()

    writer = step_writer(tmp_path, retain)
    loop_nice = _own_nice()
    writer.start(1, writer.snapshot({"a.bin": bytearray(b"x" * 100)}), {}, time.monotonic())
    assert done.wait(60)  # not waited for: waiting gives the write the loop's priority
    writer.wait()
    assert seen == [min(19, loop_nice + 10)]
    assert _own_nice() == loop_nice  # the loop's own thread is untouched
    checkpoints.verify(str(tmp_path), 1)


@linux_only
def test_waiting_for_the_background_write_gives_it_the_loops_priority(tmp_path: Path) -> None:
    loop_nice = _own_nice()
    if os.geteuid() != 0 and resource.getrlimit(resource.RLIMIT_NICE)[0] < 20 - loop_nice:
        pytest.skip("this user may not raise a thread's priority back")
    seen: list[int] = []
    entered, release = threading.Event(), threading.Event()

    def retain() -> None:  # the writer thread, after its commit
        seen.append(_own_nice())
        entered.set()
        release.wait(60)
        seen.append(_own_nice())

    writer = step_writer(tmp_path, retain)
    writer.start(1, writer.snapshot({"a.bin": bytearray(b"x" * 100)}), {}, time.monotonic())
    assert entered.wait(60)
    writer.hurry()  # what wait() does first: the next save, the notice's save, close
    release.set()
    writer.wait()
    assert seen == [min(19, loop_nice + 10), loop_nice]


@linux_only
def test_a_sandbox_that_refuses_priorities_still_gets_every_background_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Some container sandboxes filter getpriority/setpriority: the save must not be lost.
    def refused(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refused)
    writer = step_writer(tmp_path, lambda: None)
    for step in (1, 2):
        writer.start(step, writer.snapshot({"a.bin": bytearray(b"x" * 100)}), {}, time.monotonic())
        writer.wait()
    assert checkpoints.list_steps(str(tmp_path)) == [1, 2]
    checkpoints.verify(str(tmp_path), 2)
    monkeypatch.setattr(os, "getpriority", refused)
    writer.start(3, writer.snapshot({"a.bin": bytearray(b"y" * 100)}), {}, time.monotonic())
    writer.wait()
    checkpoints.verify(str(tmp_path), 3)
