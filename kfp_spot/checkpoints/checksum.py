"""CRC32C, the checksum of every checkpoint file (Cloud Storage's own object checksum).

Three implementations:

- google-crc32c (Apache-2.0, installed with the Google Cloud clients): its bundled C library
  through ctypes, else its Python API. The default.
- ``crc32c-rs`` (the Unlicense), when it is installed and the CPU has a vector path for it
  (SSE4.2/PCLMULQDQ or AVX-512 VPCLMULQDQ on x86_64, the CRC extension on ARM): the fastest we
  measured over memory the CPU has not just read, which is what a checkpoint is.
- ICRAR's ``crc32c`` package (LGPL-2.1-or-later, so never a requirement of kfp-spot), when it is
  installed with its hardware path and crc32c-rs is not: about twice google-crc32c's speed.

The faster ones take 15-30 ms to import, so a process switches to one once it has hashed
:data:`FAST_AFTER` bytes: a small state never pays for the import, a large one pays it back within
its first save or restore.
"""

from __future__ import annotations

import binascii
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CHUNK = 4 << 20
"""Bytes hashed, read or written at a time."""

FAST_AFTER = 256 << 20
"""Bytes a process hashes with google-crc32c before it looks for a faster implementation."""

_FAST_CALL_BYTES = 1 << 30
"""At most this many bytes per call into a faster implementation (ICRAR's length over 4 GiB
would wrap on Windows; a gibibyte per call costs nothing measurable)."""

_CHECK = (b"123456789", 0xE3069283)
"""CRC32C's check value (RFC 3720): an implementation that disagrees is not used."""


def _icrar() -> Callable[[Any, int], int] | None:
    """ICRAR's ``crc32c(data, value)`` when installed with its hardware path, else None.

    It takes any C-contiguous buffer without a copy and releases the GIL over large ones.
    """
    try:
        import crc32c as icrar
    except ImportError:
        return None
    function = getattr(icrar, "crc32c", None)
    if not callable(function) or getattr(icrar, "hardware_based", False) is not True:
        return None  # another package of that name, or a build without SSE4.2 / ARMv8 CRC
    try:
        works = _agrees(function)
    except TypeError:
        return None
    return function if works else None


def _rust() -> Callable[[Any, int], int] | None:
    """crc32c-rs's ``crc32c(data, value)`` when installed and vectorized on this CPU, else None.

    Its ``crc32c`` picks the fastest path the CPU has at run time and falls back to a portable
    one (no faster than google-crc32c) when none fits; the module's named vector paths raise
    ``UnsupportedCPUFeatureError`` on a CPU without them, so one that answers the check value
    means the dispatcher has a vector path too. It takes any buffer, releases the GIL.
    """
    try:
        import crc32c_rs
    except ImportError:
        return None
    function = getattr(crc32c_rs, "crc32c", None)
    unsupported = getattr(crc32c_rs, "UnsupportedCPUFeatureError", None)
    if not callable(function) or not (
        isinstance(unsupported, type) and issubclass(unsupported, Exception)
    ):
        return None
    paths = [
        getattr(crc32c_rs, name)
        for name in dir(crc32c_rs)
        if name.startswith("crc32c_") and name != "crc32c_fallback"
    ]
    try:
        if _agrees(function) and any(_runs_here(path, unsupported) for path in paths):
            found: Callable[[Any, int], int] = function
            return found
    except TypeError:
        return None
    return None


def _runs_here(path: Callable[..., int], unsupported: type[Exception]) -> bool:
    """Whether one of crc32c-rs's named vector paths runs on this CPU and answers right."""
    try:
        return _agrees(path)
    except unsupported:
        return False


def _agrees(function: Callable[..., int]) -> bool:
    """Whether ``function(data, value)`` gives RFC 3720's check value, whole and extended."""
    return bool(
        function(_CHECK[0], 0) == _CHECK[1]
        and function(b"6789", function(b"12345", 0)) == _CHECK[1]
    )


def _faster() -> tuple[str, Callable[[Any, int], int]] | None:
    """The fastest implementation installed besides google-crc32c, with its name; None."""
    rust = _rust()
    if rust is not None:
        return "crc32c-rs", rust
    icrar = _icrar()
    if icrar is not None:
        return "crc32c (ICRAR's)", icrar
    return None


class _Crc32c:
    """CRC32C (Castagnoli) over any buffer, without copying it, outside the GIL.

    google-crc32c's Python API takes only ``bytes`` (a copy of every chunk); its bundled C
    library takes a pointer. We call that through ctypes (which releases the GIL during the call),
    and fall back to the Python API when the library cannot be reached. A faster implementation
    (:func:`_faster`) takes over after ``fast_after`` bytes when one is installed (None: never).
    """

    def __init__(self, *, fast_after: int | None = FAST_AFTER) -> None:
        import google_crc32c

        self._python: Callable[[int, bytes], int] = google_crc32c.extend
        # crc32c_extend(crc, pointer (bytes or an address), length) -> crc
        self._extend: Callable[[int, bytes | int, int], int] | None = None
        self._fast: Callable[[Any, int], int] | None = None
        self._fast_after = fast_after  # None once looked for (or never to be)
        self._hashed = 0
        self.name = "google-crc32c (Python API: copies each chunk)"
        if google_crc32c.implementation != "c":
            return
        try:
            import ctypes

            from google_crc32c import _crc32c

            function = ctypes.CDLL(_crc32c.__file__).crc32c_extend
        except (ImportError, OSError, AttributeError):
            return
        function.restype = ctypes.c_uint32
        function.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
        self._extend = function
        self.name = "google-crc32c (its C library through ctypes)"

    def extend(self, crc: int, data: Any) -> int:
        """``crc`` extended over the bytes of ``data`` (any contiguous buffer)."""
        view = memoryview(data)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        n = view.nbytes
        if not n:
            return crc
        limit = self._fast_after  # read once: the loop's and the writer's threads both hash
        if limit is not None:
            self._hashed += n
            if self._hashed >= limit:
                self._fast_after = None
                found = _faster()
                if found is not None:
                    self.name, self._fast = found
        if self._fast is not None:
            # ICRAR's C code takes the length as an `unsigned long`: 32 bits on Windows.
            for start in range(0, n, _FAST_CALL_BYTES):
                crc = int(self._fast(view[start : start + _FAST_CALL_BYTES], crc))
            return crc
        if self._extend is not None:
            if isinstance(data, bytes):
                return self._extend(crc, data, n)  # ctypes passes bytes by pointer
            if not view.readonly:
                import ctypes  # loaded by __init__ already

                holder = (ctypes.c_char * n).from_buffer(view)  # alive until the call returns
                return self._extend(crc, ctypes.addressof(holder), n)
            np = sys.modules.get("numpy")
            if np is not None:  # a read-only slice (of bytes, say): NumPy knows its address
                return self._extend(crc, np.frombuffer(view, np.uint8).ctypes.data, n)
        return self._python(crc, bytes(view))


_crc_impl: _Crc32c | None = None


def _impl() -> _Crc32c:
    global _crc_impl
    if _crc_impl is None:
        _crc_impl = _Crc32c()
    return _crc_impl


def crc32c(data: Any, crc: int = 0) -> int:
    """CRC32C of ``data`` (bytes-like), extending ``crc``; runs at memory speed, GIL released."""
    return _impl().extend(crc, data)


def streams_at_memory_speed() -> bool:
    """Whether :func:`crc32c` is now one that reads as fast as memory (crc32c-rs, ICRAR's)."""
    return _impl()._fast is not None


def implementation() -> str:
    """Which CRC32C implementation :func:`crc32c` uses (for benchmarks and logs)."""
    impl = _impl()
    found = _faster() if impl._fast_after is not None else None
    if found is not None:
        return f"{impl.name} for a process's first {FAST_AFTER >> 20} MiB, then {found[0]}"
    return impl.name


@dataclass(frozen=True)
class Hashed:
    """One buffer and the CRC32C of its bytes, computed by whoever filled it.

    :func:`kfp_spot.checkpoints.write_step` writes it without hashing it again (the async
    writer hashes its snapshot as it takes it when the training loop keeps every core busy); the
    buffer must not change until the write is done.
    """

    data: Any
    crc32c: int


def crc32c_b64(crc: int) -> str:
    """A CRC32C as Cloud Storage writes it: base64 of the 4 big-endian bytes."""
    return binascii.b2a_base64(crc.to_bytes(4, "big"), newline=False).decode()
