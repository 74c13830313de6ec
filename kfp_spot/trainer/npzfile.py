"""The ``.npz`` of a dict of arrays (the ``numpy-dict`` adapter), read back without a copy.

:func:`encode` writes what ``numpy.savez`` writes (an uncompressed zip of one ``<key>.npy`` per
key, readable by ``numpy.load``), with each member's local header padded (the extra field
Android's zipalign uses) so that its array data starts 64-byte aligned in the file. :func:`decode`
then makes each array a view into the buffer the verified file was read into: a restore holds
the file once, not the file, a copy of it and the arrays besides. A member that is compressed or
not aligned (an ``.npz`` written before) is read through :mod:`zipfile`, one member at a time.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

ALIGN = 64
"""The alignment of each array's data in the file (NumPy pads a ``.npy`` header to it)."""
_PAD_ID = 0xD935  # zipalign's extra field: 2 bytes of alignment, then padding
_LOCAL_HEADER = 30  # a zip local file header's fixed part
_ZIP64_EXTRA = 20  # the zip64 extra field zipfile adds to a local header it writes as zip64


def encode(value: Mapping[str, Any], encode_npy: Any) -> list[Any]:
    """The ``.npz`` of ``value`` (keys and arrays already checked by the adapter), as its parts.

    The zip's headers are small bytes; each array's data is ``encode_npy``'s view of the array's
    own memory (the ``numpy`` adapter's ``.npy`` encoder: its header, then that view), not a
    copy: a save holds the state once more only where it must (an async save's snapshot), never
    the whole file built in memory beside it.

    Args:
        value: key -> array, in the order the file holds them.
        encode_npy: array -> the parts of its ``.npy`` file (the last a view of its data).
    """
    import struct
    import zipfile

    out = _Layout()
    # What np.savez writes, without passing the keys as its keyword arguments: a key named
    # "file" made it raise and one named "allow_pickle" was silently dropped from the file.
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key, array in value.items():
            info = zipfile.ZipInfo(f"{key}.npy")
            fixed = _LOCAL_HEADER + len(info.filename.encode("utf-8")) + 6 + _ZIP64_EXTRA
            pad = -(out.tell() + fixed) % ALIGN
            info.extra = struct.pack("<HHH", _PAD_ID, 2 + pad, ALIGN) + bytes(pad)
            with archive.open(info, "w", force_zip64=True) as member:
                for part in encode_npy(array):
                    member.write(part)
    return out.parts


class _Positioned(io.RawIOBase):
    """A seekable file of :mod:`zipfile`'s over memory: the position and the seeks, one rule."""

    _pos = 0

    def _end(self) -> int:
        raise NotImplementedError

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._end()}[whence]
        self._pos = max(0, base + offset)
        return self._pos


_BY_REFERENCE = 16 << 10
"""The smallest array data :class:`_Layout` keeps as a view: a smaller one is copied beside the
headers, as each part costs the write more than copying 16 KiB (an optimizer's 5,000 arrays of
100 floats saved in 0.6 s as 10,001 parts, 0.2 s as one)."""


class _Layout(_Positioned):
    """A seekable file for :mod:`zipfile` that keeps a large written ``memoryview`` by reference.

    Other writes (the zip's headers, small arrays) are copied into buffers between the views,
    which a write over earlier bytes (zipfile seeks back to complete a member's local header)
    patches in place.
    """

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[Any] = []  # bytearray (copied) or memoryview (an array's data)
        self._starts: list[int] = []
        self._size = self._pos = 0
        self._tail: bytearray | None = None  # the last part, where it is a copy

    def writable(self) -> bool:
        return True

    def _end(self) -> int:
        return self._size

    def write(self, data: Any) -> int:
        view = memoryview(data)
        size = view.nbytes
        if self._pos != self._size:
            if self._pos > self._size:
                raise ValueError("a write past the end of an .npz being laid out")
            self._patch(self._pos, view.cast("B"))
            self._pos += size
            return size
        if isinstance(data, memoryview) and size >= _BY_REFERENCE:
            self._starts.append(self._size)
            self.parts.append(data)
            self._tail = None
        else:
            if self._tail is None:
                self._tail = bytearray()
                self._starts.append(self._size)
                self.parts.append(self._tail)
            self._tail += view
        self._size += size
        self._pos = self._size
        return size

    def _patch(self, at: int, data: memoryview) -> None:
        import bisect

        done = 0
        while done < data.nbytes:
            i = bisect.bisect_right(self._starts, at + done) - 1
            part, start = self.parts[i], self._starts[i]
            if not isinstance(part, bytearray):
                raise ValueError("a write over an array's data in an .npz being laid out")
            begin = at + done - start
            n = min(len(part) - begin, data.nbytes - done)
            part[begin : begin + n] = data[done : done + n]
            done += n


class _Reader(_Positioned):
    """A seekable file over a buffer, for :mod:`zipfile`, that copies only what is read."""

    def __init__(self, view: memoryview) -> None:
        super().__init__()
        self._view, self._pos = view, 0

    def readable(self) -> bool:
        return True

    def _end(self) -> int:
        return len(self._view)

    def readinto(self, buffer: Any) -> int:
        chunk = self._view[self._pos : self._pos + len(memoryview(buffer).cast("B"))]
        memoryview(buffer).cast("B")[: len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)


def decode(data: Any, decode_npy: Any) -> dict[str, Any]:
    """Each member ``<key>.npy`` by its exact name, its array in place where it can be.

    Not through ``numpy.load``'s NpzFile: it looks ``npz["a.npy"]`` up as the member ``a.npy``
    (the key ``a``'s), so of the keys ``a`` and ``a.npy`` both came back as ``a``'s array.

    Args:
        data: the file's bytes (a writable buffer keeps the arrays writable).
        decode_npy: the ``numpy`` adapter's decoder of one ``.npy`` (a view over a buffer).

    Raises:
        ValueError: a member is no ``.npy`` file or fails its CRC-32.
    """
    import zipfile
    import zlib

    import numpy as np

    view = memoryview(data).cast("B")
    out = {}
    with zipfile.ZipFile(_Reader(view)) as archive:
        for info in archive.infolist():
            name = info.filename
            if not name.endswith(".npy"):
                raise ValueError(f"the .npz member {name!r} is not a .npy file")
            member = _stored(view, info)
            array = None
            if member is not None:
                if zlib.crc32(member) != info.CRC:
                    raise ValueError(f"the .npz member {name!r} fails its CRC-32")
                array = decode_npy(member)
                if array.ctypes.data % max(array.dtype.alignment, 1):
                    array = None  # written before members were aligned: read it as a copy
            if array is None:
                with archive.open(info) as handle:
                    array = np.lib.format.read_array(handle, allow_pickle=False)
            out[name[: -len(".npy")]] = array
    return out


def _stored(view: memoryview, info: Any) -> memoryview | None:
    """The bytes of an uncompressed, unencrypted member in ``view``; None for any other."""
    import zipfile

    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
        return None
    if info.compress_size != info.file_size:
        return None
    start = info.header_offset
    header = view[start : start + _LOCAL_HEADER]
    if len(header) < _LOCAL_HEADER or bytes(header[:4]) != b"PK\x03\x04":
        return None  # zipfile's own reading says what is wrong with it
    name_len = int.from_bytes(header[26:28], "little")
    extra_len = int.from_bytes(header[28:30], "little")
    begin = start + _LOCAL_HEADER + name_len + extra_len
    end = begin + info.file_size
    return view[begin:end] if end <= len(view) else None
