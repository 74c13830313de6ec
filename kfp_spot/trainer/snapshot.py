"""The async save's snapshot: the state's files copied into buffers kept between saves.

The training loop waits for the copy (an async save's whole stall); the background writer then
writes from the copy while the loop goes on. Where the copy's CRC32C is computed is a policy
(:func:`hash_in_stall`): in the background, or in the stall when the loop keeps every core busy
and the checksum runs at memory speed; there, as the copy goes (:func:`copy_and_hash`) or after
it, whichever a process measured faster (:class:`HashPlacement`), else in the background again.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kfp_spot import checkpoints
from kfp_spot.checkpoints.buffers import PAGE
from kfp_spot.checkpoints.write import byte_views

_PARALLEL_COPY_BYTES = 16 << 20
_HASH_PIECE = 512 << 10
"""Bytes :func:`copy_and_hash` copies, then hashes while they are still in the core's cache."""
BUSY = 0.9
"""The share of every core's time, between two saves, above which the loop counts as busy."""


def hash_in_stall(
    cpu_seconds: float, wall_seconds: float, cores: int, *, memory_speed: bool
) -> bool:
    """Whether an async save checksums its snapshot while the loop waits, not in the background.

    ``cpu_seconds``: the process's CPU time (every thread) over the ``wall_seconds`` since the
    last save; ``cores``: the cores it may run on; ``memory_speed``: whether the checksum reads
    as fast as memory does (:func:`kfp_spot.checkpoints.checksum.streams_at_memory_speed`).

    On a core the loop leaves idle a background checksum costs the loop nothing. Where the loop
    keeps every core busy (at least :data:`BUSY` of them), a checksum that streams the snapshot
    at memory speed costs it less in the stall: in the background it takes a core from the
    loop's threads mid-step and the memory bandwidth they work with. A NumPy loop on two busy
    cores, saving 256 MiB every second with ICRAR's CRC32C (0.022 s of CPU), lost 0.064 s in the
    steps after each save with the checksum in the background, against 0.020 s more stall and
    0.014-0.035 s after it with the checksum in the stall. google-crc32c, half as fast, gained
    nothing there (0.100 s a save in the background, 0.107 s with it in the stall), so it stays
    in the background (benchmarks/checkpoint_bench.py ``stall``; docs/trainer.md).
    """
    return (
        memory_speed
        and wall_seconds > 0
        and cores > 0
        and cpu_seconds >= BUSY * cores * wall_seconds
    )


Placement = Literal["separate", "fused", "background"]
"""Where a busy loop's snapshot is checksummed: in the stall after the copy (``separate``), in
the stall as the copy goes (``fused``, :func:`copy_and_hash`), or by the background writer."""


@dataclass
class HashPlacement:
    """Where a busy loop's saves checksum their snapshot, learned from two of them.

    Checksumming each piece right after copying it reads it from the core's cache, but copies in
    pieces, and a piece never gets the non-temporal stores that ``memcpy`` uses for one large
    copy. Which wins is the machine's: on one 2-core x86_64 VM copy-and-hash of 256 MiB took
    25-34 ms against 39-46 ms for the copy and then the checksum; on another, whose whole copy
    took 22 ms and a copy in pieces of any size up to 64 MiB 37-41 ms, it took 49-54 ms against
    39 ms, and a NumPy loop on both cores lost less to each save with the checksum in the
    background (60 ms) than in the stall (64 ms after the copy, 70-90 ms as it went;
    benchmarks/checkpoint_bench.py ``stall``). So the first save that checksums in the stall
    does it after the copy, the next as the copy goes, each timed; from then on the faster of
    the two where it is the fused one, else the background writer (as before the stall took
    the checksum, and as on a loop that leaves a core idle).

    Attributes:
        separate: seconds of the stall copying, then checksumming (None: not measured yet).
        fused: seconds of the stall copying and checksumming piece by piece (None: not yet).
    """

    separate: float | None = None
    fused: float | None = None

    def next(self) -> Placement:
        """Where the next busy save checksums its snapshot."""
        if self.separate is None:
            return "separate"
        if self.fused is None:
            return "fused"
        return "fused" if self.fused < self.separate else "background"

    def record(self, placement: Placement, seconds: float) -> None:
        """A stall that checksummed as ``placement`` took ``seconds`` (a reused buffer's)."""
        if placement == "separate":
            self.separate = seconds
        elif placement == "fused":
            self.fused = seconds


def cores() -> int:
    """The cores this process may run on (its affinity where the platform has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return len(affinity(0))
    return os.cpu_count() or 1


_THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def huge_pages_available() -> bool:
    """Whether this system gives a process transparent huge pages where it asks (Linux)."""
    import mmap

    if getattr(mmap, "MADV_HUGEPAGE", None) is None or getattr(mmap, "MAP_ANONYMOUS", None) is None:
        return False
    try:
        with open(_THP_ENABLED, encoding="ascii") as handle:
            return "[never]" not in handle.read()
    except OSError:  # a kernel without them
        return False


def settled_buffer(size: int) -> Any | None:
    """A snapshot buffer for a process's later saves: ``size`` bytes in huge pages, faulted in.

    The first save copies into small pages (:func:`take`: new memory faults in fastest so, and
    the loop waits for it). A buffer kept for the next saves does better in huge pages: on a
    2-core VM, with a NumPy loop keeping both cores busy and 256 MiB saved every second, the
    kernel pinned a small-page buffer for its ``O_DIRECT`` write with 10 ms more of the writer's
    CPU and about 20 ms more of its own, and the loop lost 9.5-10% of its time to each save
    against 5% with huge pages (benchmarks/checkpoint_bench.py ``pages``). The background
    writer calls this after a write, at its own low priority, so the faults (and any
    compaction the kernel does to find huge pages) never stall the loop; a save on a
    preemption notice that waits for that write waits for them once.

    None where the system has no transparent huge pages to give (not Linux, or disabled).

    Raises:
        OSError: the memory could not be mapped.
    """
    import mmap

    if not size or not huge_pages_available():
        return None
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    advice = mmap.MADV_HUGEPAGE
    buf = mmap.mmap(-1, size, flags=flags)
    buf.madvise(advice)
    view = memoryview(buf)
    for start in range(0, size, PAGE):  # every page: small ones where none is huge
        view[start] = 0
    view.release()
    return buf


def copy_into(dst: memoryview, src: memoryview, *, fresh: bool) -> None:
    """Copy ``src`` into ``dst``, the async save's whole stall: the training loop waits for it.

    Into a ``fresh`` buffer (memory new to the process: the first save's, or one whose size
    changed) a large copy runs in two threads: the kernel's work of faulting in each new page is
    most of it, and that work divides. Into a buffer reused from the last save one thread
    copies at memory speed: the loop's own worker threads (BLAS, a framework's intra-op pool)
    are still spinning on the other cores when the loop stops to save, and a second copying
    thread fought them, which made the stall of a 256 MiB save in a NumPy loop on two cores
    0.042 s instead of 0.022 s (benchmarks/checkpoint_bench.py ``stall``). NumPy's copy
    releases the GIL.
    """
    np = sys.modules.get("numpy")
    if not fresh or np is None or src.nbytes < _PARALLEL_COPY_BYTES or (os.cpu_count() or 1) < 2:
        dst[:] = src
        return
    target, source = np.frombuffer(dst, np.uint8), np.frombuffer(src, np.uint8)
    half = (len(source) // 2) & ~4095
    helper = threading.Thread(target=np.copyto, args=(target[:half], source[:half]))
    helper.start()
    np.copyto(target[half:], source[half:])
    helper.join()


def copy_and_hash(dst: memoryview, src: memoryview, crc: int) -> int:
    """Copy ``src`` into ``dst`` a piece at a time; ``crc`` extended over each piece as it lands.

    The busy loop's stall when its checksum is taken there (:func:`hash_in_stall`): hashing each
    512 KiB piece right after copying it reads it from the core's cache (L2 is 512 KiB-2 MiB
    on current x86 and ARM server cores), not from memory again. With crc32c-rs, whose CRC32C runs
    at the memory's speed, copy and checksum of 256 MiB took 25-34 ms on a 2-core x86_64 VM,
    against 39-46 ms for the copy and then the checksum; the copy alone took 23-32 ms.
    """
    for start in range(0, src.nbytes, _HASH_PIECE):
        piece = dst[start : start + _HASH_PIECE]
        piece[:] = src[start : start + _HASH_PIECE]
        crc = checkpoints.crc32c(piece, crc)
    return crc


def take(
    files: Mapping[str, Any], pool: Mapping[str, Any], *, hash_now: bool, fused: bool = True
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``files`` copied into snapshot buffers, and the buffers to keep for the next save.

    A file whose parts are all ``bytes`` (immutable) is kept as it is. Any other is copied,
    parts one after the other, into one buffer: ``pool``'s for that name when its size is the
    same, else a new one (a large one page-aligned, :func:`kfp_spot.checkpoints.aligned_buffer`,
    in small pages: its first touch is here, where small pages fault in with less CPU). With
    ``hash_now`` each copy comes back as a :class:`~kfp_spot.checkpoints.Hashed` (its CRC32C
    computed here: into a reused buffer as the copy goes where ``fused``, else after the copy),
    else as a one-part payload.
    """
    kept: dict[str, Any] = {}
    out: dict[str, Any] = {}
    for name, payload in files.items():
        parts = payload if isinstance(payload, (list, tuple)) else (payload,)
        if all(isinstance(part, bytes) for part in parts):
            out[name] = tuple(parts)
            continue
        views = byte_views(parts)
        size = sum(view.nbytes for view in views)
        buf = pool.get(name)
        fresh = False  # whether the copy goes into memory new to the process
        if buf is None or len(buf) != size:
            fresh = True
            large = size >= checkpoints.DIRECT_MIN_BYTES
            # allocated at a process's first save, from memory new to it: small pages
            buf = checkpoints.aligned_buffer(size, huge_pages=False) if large else bytearray(size)
        target = memoryview(buf).cast("B")
        offset = 0
        crc = 0
        as_copied = hash_now and fused and not fresh  # checksummed piece by piece, in the cache
        for view in views:
            into = target[offset : offset + view.nbytes]
            if as_copied:
                crc = copy_and_hash(into, view, crc)
            else:
                copy_into(into, view, fresh=fresh)
            offset += view.nbytes
        kept[name] = buf
        if hash_now and not as_copied:
            crc = checkpoints.crc32c(buf)
        out[name] = checkpoints.Hashed(buf, crc) if hash_now else (buf,)
    return out, kept
