"""The async save's snapshot: where its checksum is computed, and the CRC32C implementations."""

from __future__ import annotations

import sys
import types
import weakref
from pathlib import Path

import google_crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trainer_testlib import step_writer

from kfp_spot import checkpoints
from kfp_spot.checkpoints import CheckpointCorruptError, checksum
from kfp_spot.trainer import snapshot


@pytest.mark.parametrize(
    ("cpu", "wall", "cores", "memory_speed", "expected"),
    [
        (2.0, 1.0, 2, True, True),  # every core busy
        (1.8, 1.0, 2, True, True),  # at the threshold
        (1.7, 1.0, 2, True, False),  # a core partly idle: the background checksum is free there
        (1.0, 1.0, 8, True, False),  # a GPU loop: one busy core of eight
        (2.0, 1.0, 2, False, False),  # a slower checksum stays in the background
        (0.0, 0.0, 2, True, False),  # no time between two saves: nothing to go on
        (1.0, 1.0, 0, True, False),
    ],
)
def test_the_checksum_goes_into_the_stall_only_when_the_loop_keeps_every_core_busy(
    cpu: float, wall: float, cores: int, memory_speed: bool, expected: bool
) -> None:
    assert snapshot.hash_in_stall(cpu, wall, cores, memory_speed=memory_speed) is expected


class _Clocks:
    """A wall clock and a process CPU clock that advances ``busy`` cores' worth with it."""

    def __init__(self, busy: float) -> None:
        self.now = 0.0
        self.busy = busy

    def wall(self) -> float:
        return self.now

    def cpu(self) -> float:
        return self.now * self.busy

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def memory_speed_crc32c(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's CRC32C switched to a faster one, as after a process's first 256 MiB."""
    pytest.importorskip("crc32c")  # a dev dependency: an optional faster implementation
    impl = checksum._Crc32c(fast_after=0)
    impl.extend(0, b"x")
    monkeypatch.setattr(checksum, "_crc_impl", impl)
    assert checksum.streams_at_memory_speed()


@pytest.mark.usefixtures("memory_speed_crc32c")
@pytest.mark.parametrize(("busy", "hashed"), [(64.0, True), (0.5, False)])
def test_a_busy_loops_snapshot_carries_its_checksum_and_every_save_verifies(
    tmp_path: Path, busy: float, hashed: bool
) -> None:
    clocks = _Clocks(busy)  # 64 cores' worth: busy on any machine the suite runs on
    writer = step_writer(tmp_path, clock=clocks.wall, cpu_clock=clocks.cpu)
    state = np.random.default_rng(0).random((checkpoints.DIRECT_MIN_BYTES // 8) + 3)
    for step in (1, 2, 3):
        clocks.advance(1.0)
        state[step] = step  # the loop changes its state between saves
        taken = writer.snapshot({"w.bin": state, "meta.json": b"{}"})
        # the first save has no time since an earlier one: its checksum stays in the background
        assert isinstance(taken["w.bin"], checkpoints.Hashed) is (hashed and step > 1)
        assert taken["meta.json"] == (b"{}",)  # immutable bytes are never copied
        writer.start(step, taken, {}, clocks.wall())
        writer.wait()
        manifest = checkpoints.verify(str(tmp_path), step)
        crc = {entry.path: entry.crc32c for entry in manifest.files}["w.bin"]
        assert crc == checkpoints.crc32c_b64(google_crc32c.value(state.tobytes()))


@pytest.mark.parametrize("aligned", [True, False])
def test_a_hashed_payload_is_written_with_the_checksum_it_carries(
    tmp_path: Path, aligned: bool
) -> None:
    # The contract of Hashed: write_step does not hash it again, so the buffer must be what
    # was hashed; a reader then refuses a file whose bytes do not match.
    size = checkpoints.DIRECT_MIN_BYTES + 5
    buf = checkpoints.aligned_buffer(size) if aligned else bytearray(size)
    memoryview(buf).cast("B")[:] = np.random.default_rng(1).bytes(size)
    good = checkpoints.crc32c(buf)
    checkpoints.write_step(str(tmp_path), 1, {"a.bin": checkpoints.Hashed(buf, good)})
    _, files = checkpoints.read_verified(str(tmp_path), 1)
    assert bytes(files["a.bin"]) == bytes(buf)
    checkpoints.write_step(str(tmp_path), 2, {"a.bin": checkpoints.Hashed(buf, good ^ 1)})
    with pytest.raises(CheckpointCorruptError, match="crc32c"):
        checkpoints.verify(str(tmp_path), 2)


_ICRAR = "crc32c (ICRAR's)"
_RUST = "crc32c-rs"


def _only(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """This process's faster CRC32C is ``name``'s (the other one is not looked for)."""
    if name == _RUST:
        pytest.importorskip("crc32c_rs")  # a dev dependency on Python 3.11 and later
        monkeypatch.setattr(checksum, "_icrar", lambda: None)
    else:
        pytest.importorskip("crc32c")  # a dev dependency
        monkeypatch.setattr(checksum, "_rust", lambda: None)


@pytest.mark.parametrize("faster", [_RUST, _ICRAR])
@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=70_000), cut=st.integers(0, 69_999))
def test_every_crc32c_implementation_agrees_with_google_crc32c(
    faster: str, data: bytes, cut: int
) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        _only(monkeypatch, faster)
        expected = google_crc32c.value(data)
        cut = cut % (len(data) + 1)
        fast, default = checksum._Crc32c(fast_after=0), checksum._Crc32c(fast_after=None)
        fast.extend(0, b"x")  # its first byte switches it (empty data hashes nothing)
        for impl in (fast, default):
            assert impl.extend(0, data) == expected
            assert impl.extend(0, bytearray(data)) == expected
            assert impl.extend(0, memoryview(data)) == expected
            assert impl.extend(impl.extend(0, data[:cut]), data[cut:]) == expected
        assert fast.name == faster
        assert default.name.startswith("google-crc32c")


@pytest.mark.parametrize("faster", [_RUST, _ICRAR])
def test_a_faster_crc32c_is_given_a_large_buffer_in_calls_of_at_most_a_gibibyte(
    monkeypatch: pytest.MonkeyPatch, faster: str
) -> None:
    # ICRAR's C code takes the length as an unsigned long, 32 bits on Windows: over 4 GiB it wraps.
    _only(monkeypatch, faster)
    monkeypatch.setattr(checksum, "_FAST_CALL_BYTES", 1000)
    impl = checksum._Crc32c(fast_after=0)
    data = np.random.default_rng(2).bytes(4500)
    assert impl.extend(0, data) == google_crc32c.value(data)
    assert impl.name == faster


def test_crc32c_rs_is_preferred_to_icrars_when_both_are_installed() -> None:
    pytest.importorskip("crc32c_rs")
    pytest.importorskip("crc32c")
    impl = checksum._Crc32c(fast_after=0)
    assert impl.extend(0, b"123456789") == 0xE3069283
    assert impl.name == _RUST
    assert checksum.implementation().endswith(f"then {_RUST}")


@pytest.mark.parametrize("faster", [_RUST, _ICRAR])
def test_a_faster_crc32c_takes_over_only_after_enough_bytes_and_only_when_installed(
    monkeypatch: pytest.MonkeyPatch, faster: str
) -> None:
    _only(monkeypatch, faster)
    impl = checksum._Crc32c(fast_after=1000)
    impl.extend(0, b"x" * 999)
    assert impl.name.startswith("google-crc32c")
    assert impl.extend(0, b"123456789") == 0xE3069283
    assert impl.name == faster
    never = checksum._Crc32c(fast_after=None)
    never.extend(0, b"x" * 10_000)
    assert never.name.startswith("google-crc32c")


class _NoVectorPath(Exception):
    pass


def _extend(data: bytes, value: int = 0) -> int:
    return int(google_crc32c.extend(value, bytes(data)))


def _unsupported(data: bytes, value: int = 0) -> int:
    raise _NoVectorPath


@pytest.mark.parametrize(
    ("name", "module"),
    [
        # ICRAR's: wrong answers, a software build, another package of that name
        ("crc32c", types.SimpleNamespace(crc32c=lambda data, value=0: 0, hardware_based=True)),
        ("crc32c", types.SimpleNamespace(crc32c=google_crc32c.value, hardware_based=False)),
        ("crc32c", types.SimpleNamespace(hardware_based=True)),
        # crc32c-rs on a CPU without any of its vector paths: its crc32c is the portable one
        (
            "crc32c_rs",
            types.SimpleNamespace(
                crc32c=_extend,
                crc32c_fallback=_extend,
                crc32c_sse42=_unsupported,
                UnsupportedCPUFeatureError=_NoVectorPath,
            ),
        ),
        # a crc32c-rs build without named vector paths (nothing says it has one)
        (
            "crc32c_rs",
            types.SimpleNamespace(
                crc32c=_extend, crc32c_fallback=_extend, UnsupportedCPUFeatureError=_NoVectorPath
            ),
        ),
        # crc32c-rs giving wrong answers
        (
            "crc32c_rs",
            types.SimpleNamespace(
                crc32c=lambda data, value=0: 0,
                crc32c_sse42=lambda data, value=0: 0,
                UnsupportedCPUFeatureError=_NoVectorPath,
            ),
        ),
        ("crc32c_rs", types.SimpleNamespace(crc32c=_extend)),  # another package of that name
    ],
)
def test_a_faster_crc32c_module_that_does_not_work_here_is_not_used(
    monkeypatch: pytest.MonkeyPatch, name: str, module: object
) -> None:
    monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(checksum, "_rust" if name == "crc32c" else "_icrar", lambda: None)
    impl = checksum._Crc32c(fast_after=0)
    assert impl.extend(0, b"123456789") == 0xE3069283
    assert impl.name.startswith("google-crc32c")


def test_a_crc32c_rs_module_with_one_working_vector_path_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = types.SimpleNamespace(
        crc32c=_extend,
        crc32c_fallback=_extend,
        crc32c_avx512=_unsupported,  # this CPU lacks it
        crc32c_sse42=_extend,  # and has this one
        UnsupportedCPUFeatureError=_NoVectorPath,
    )
    monkeypatch.setitem(sys.modules, "crc32c_rs", module)
    impl = checksum._Crc32c(fast_after=0)
    assert impl.extend(0, b"123456789") == 0xE3069283
    assert impl.name == _RUST


def test_the_snapshot_keeps_its_buffers_for_the_next_save() -> None:
    state = np.arange(1000, dtype=np.float64)
    _, pool = snapshot.take({"w.bin": state}, {}, hash_now=False)
    second, pool2 = snapshot.take({"w.bin": state + 1}, pool, hash_now=True)
    assert pool2["w.bin"] is pool["w.bin"]  # reused: same size
    assert isinstance(second["w.bin"], checkpoints.Hashed)
    assert second["w.bin"].crc32c == google_crc32c.value((state + 1).tobytes())
    assert bytes(pool["w.bin"]) == (state + 1).tobytes()
    _, pool3 = snapshot.take({"w.bin": np.arange(10.0)}, pool2, hash_now=False)
    assert pool3["w.bin"] is not pool["w.bin"]  # a new size: a new buffer


def test_a_busy_loops_checksum_placement_is_measured_then_the_faster_one_kept() -> None:
    placement = snapshot.HashPlacement()
    assert placement.next() == "separate"  # first: copy, then checksum
    placement.record("separate", 0.039)
    assert placement.next() == "fused"  # then: as the copy goes
    placement.record("fused", 0.052)
    # the fused copy lost (in pieces, no non-temporal stores): back to the background writer
    assert [placement.next() for _ in range(3)] == ["background"] * 3
    placement.record("background", 0.001)  # not a stall's time: nothing learned
    assert placement == snapshot.HashPlacement(separate=0.039, fused=0.052)
    won = snapshot.HashPlacement(separate=0.045, fused=0.030)
    assert [won.next() for _ in range(3)] == ["fused"] * 3


@pytest.mark.usefixtures("memory_speed_crc32c")
@pytest.mark.parametrize(
    ("learned", "hashed"),
    [
        (snapshot.HashPlacement(separate=0.045, fused=0.030), True),
        (snapshot.HashPlacement(separate=0.039, fused=0.052), False),
    ],
)
def test_a_busy_loop_keeps_the_placement_its_process_measured(
    tmp_path: Path, learned: snapshot.HashPlacement, hashed: bool
) -> None:
    clocks = _Clocks(64.0)
    writer = step_writer(tmp_path, clock=clocks.wall, cpu_clock=clocks.cpu)
    state = np.random.default_rng(0).random((checkpoints.DIRECT_MIN_BYTES // 8) + 3)
    for step in (1, 2):
        clocks.advance(1.0)
        if step == 2:
            writer._placement = learned  # as two earlier busy saves left it
        taken = writer.snapshot({"w.bin": state})
        assert isinstance(taken["w.bin"], checkpoints.Hashed) is (hashed and step == 2)
        writer.start(step, taken, {}, clocks.wall())
        writer.wait()
        checkpoints.verify(str(tmp_path), step)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
    fused=st.booleans(),
)
def test_a_snapshot_hashed_in_the_stall_holds_the_state_and_its_crc32c(
    sizes: list[int], seed: int, fused: bool
) -> None:
    # pieces of 1000 bytes: parts shorter than one, several, and not a multiple of one
    rng = np.random.default_rng(seed)
    parts = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    whole = b"".join(part.tobytes() for part in parts)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(snapshot, "_HASH_PIECE", 1000)
        _, pool = snapshot.take({"w.bin": parts}, {}, hash_now=False)
        taken, _ = snapshot.take({"w.bin": parts}, pool, hash_now=True, fused=fused)  # reused
    hashed = taken["w.bin"]
    assert isinstance(hashed, checkpoints.Hashed)
    assert bytes(hashed.data) == whole
    assert hashed.crc32c == google_crc32c.value(whole)


def _huge_kib(buf: object) -> int:
    """AnonHugePages (KiB) of the mapping that holds ``buf``'s first byte (/proc/self/smaps)."""
    address = np.frombuffer(buf, np.uint8).ctypes.data  # type: ignore[call-overload]
    inside = False
    with open("/proc/self/smaps", encoding="ascii", errors="replace") as handle:
        for line in handle:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    raise AssertionError("no mapping holds the buffer")


@pytest.mark.skipif(
    not snapshot.huge_pages_available(), reason="no transparent huge pages on this system"
)
def test_a_kept_snapshot_buffer_moves_into_huge_pages_after_the_first_write(
    tmp_path: Path,
) -> None:
    """The first save copies into small pages; the writer then gives later saves huge ones.

    Later saves' copies and O_DIRECT writes then cost the kernel a fraction of the CPU
    (fewer pages to fault, map and pin) that a busy loop would otherwise lose.
    """
    writer = step_writer(tmp_path)
    state = np.random.default_rng(0).random((8 << 20) // 8)  # 8 MiB: at least 3 huge pages
    saved = {}
    for step in (1, 2, 3):
        state[step] = -step
        saved[step] = state.copy()
        taken = writer.snapshot({"w.bin": state, "meta.json": b"{}"})
        kept = writer._pool["w.bin"]
        if step == 1:
            assert _huge_kib(kept) == 0  # new memory: small pages, as the loop waits for it
            small = weakref.ref(kept)
        elif step == 2:
            settled = kept
            assert _huge_kib(kept) >= 3 * 2048  # replaced by the writer after step 1
            assert small() is None  # freed: a state near the VM's memory never held twice
        else:
            assert kept is settled  # once: kept for every later save
        writer.start(step, taken, {}, 0.0)
        del taken, kept
        writer.wait()
    assert "meta.json" not in writer._pool  # bytes are never copied, so never kept
    for step in (1, 2, 3):
        _, files = checkpoints.read_verified(str(tmp_path), step)
        assert bytes(files["w.bin"]) == saved[step].tobytes()
    writer.release_buffers()
    assert writer._pool == {}
