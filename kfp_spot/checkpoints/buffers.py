"""Memory for a checkpoint file's bytes: read into, or snapshot to be written.

Large buffers start on a page boundary. Reading a file into one, the kernel copies each page of
the page cache to a page-aligned destination, which costs measurably less CPU than the 16-byte
offset that ``malloc`` gives large blocks; writing from one, a file can bypass the page cache
(``O_DIRECT``, :func:`kfp_spot.checkpoints.write_step`). Neither is zero-filled: whatever is
copied or read into it touches each page once.

Huge or small pages: the first touch of memory the process has not used before costs the kernel
a page fault per page, and on a VM the host's own fault behind it. Huge pages (NumPy's allocator
asks for them) win on memory freed and reused within the process; on memory new to the process
small pages cost a third of the CPU on a VM (256 MiB on a 2-core Firecracker VM: 0.6-1.0 s of
system time with huge pages, 0.2-0.3 s with small ones). A snapshot buffer is allocated once,
at the first save of a process, from memory new to it: ``huge_pages=False``.
"""

from __future__ import annotations

from typing import Any

from kfp_spot.checkpoints.checksum import CHUNK

PAGE = 4096
"""The alignment of large buffers (and of ``O_DIRECT``'s offsets and lengths)."""


def aligned_buffer(size: int, *, huge_pages: bool = True) -> Any:
    """A writable buffer of ``size`` bytes at a page-aligned address, never zero-filled.

    Args:
        size: bytes.
        huge_pages: let the kernel back it with huge pages (NumPy's allocator asks for them);
            False: small pages only, asked of the kernel directly (private anonymous memory,
            ``MADV_NOHUGEPAGE`` where the platform has it), for memory new to the process.
    """
    if not huge_pages and size:
        import mmap

        private = getattr(mmap, "MAP_PRIVATE", None)  # absent on Windows
        anonymous = getattr(mmap, "MAP_ANONYMOUS", None)
        if private is not None and anonymous is not None:
            buf = mmap.mmap(-1, size, flags=private | anonymous)
            advice = getattr(mmap, "MADV_NOHUGEPAGE", None)  # Linux only
            if advice is not None:
                buf.madvise(advice)
            return buf
    try:
        import numpy as np  # its allocator asks for huge pages: fewer page faults on first use
    except ImportError:
        import mmap

        return mmap.mmap(-1, size)  # anonymous memory is page-aligned
    raw = np.empty(size + PAGE, dtype=np.uint8)
    skip = -raw.ctypes.data % PAGE
    return raw[skip : skip + size]


def new_buffer(size: int) -> Any:
    """A writable buffer of ``size`` bytes to read a file into (large: page-aligned NumPy).

    Large ones are NumPy ``uint8`` arrays, never zero-filled (``bytearray(n)`` zero-fills: for a
    large checkpoint a whole extra pass over memory); without NumPy, a ``bytearray``.
    """
    if size >= CHUNK:
        try:
            import numpy  # noqa: F401 - only to know aligned_buffer gives a NumPy array
        except ImportError:  # the layout does not need NumPy
            return bytearray(size)
        return aligned_buffer(size)
    return bytearray(size)
