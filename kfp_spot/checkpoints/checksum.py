"""CRC32C, the checksum of every checkpoint file (Cloud Storage's own object checksum)."""

from __future__ import annotations

import binascii
import sys
from collections.abc import Callable
from typing import Any

CHUNK = 4 << 20
"""Bytes hashed, read or written at a time."""


class _Crc32c:
    """CRC32C (Castagnoli) over any buffer, without copying it, outside the GIL.

    google-crc32c's Python API takes only ``bytes`` (a copy of every chunk); its bundled C
    library takes a pointer. We call that through ctypes (which releases the GIL during the call),
    and fall back to the Python API when the library cannot be reached.
    """

    def __init__(self) -> None:
        import google_crc32c

        self._python: Callable[[int, bytes], int] = google_crc32c.extend
        # crc32c_extend(crc, pointer (bytes or an address), length) -> crc
        self._extend: Callable[[int, bytes | int, int], int] | None = None
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

    def extend(self, crc: int, data: Any) -> int:
        """``crc`` extended over the bytes of ``data`` (any contiguous buffer)."""
        view = memoryview(data)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        n = view.nbytes
        if not n:
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


def crc32c(data: Any, crc: int = 0) -> int:
    """CRC32C of ``data`` (bytes-like), extending ``crc``; runs at memory speed, GIL released."""
    global _crc_impl
    if _crc_impl is None:
        _crc_impl = _Crc32c()
    return _crc_impl.extend(crc, data)


def crc32c_b64(crc: int) -> str:
    """A CRC32C as Cloud Storage writes it: base64 of the 4 big-endian bytes."""
    return binascii.b2a_base64(crc.to_bytes(4, "big"), newline=False).decode()
