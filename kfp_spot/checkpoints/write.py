"""Writing a step: its files from the caller's memory, then the sealed manifest (the commit).

Object stores have no atomic rename, so "manifest last" is the commit on local disks and ``gs://``
alike (one object PUT). Each file's CRC32C is computed as it is written (a
:class:`~kfp_spot.checkpoints.checksum.Hashed` payload brings its own); on object stores the
uploaded objects are checked against it before the commit. Deleting a step removes its manifest
first, so a crash half-way leaves a step every reader ignores.

A large file given as one page-aligned buffer (``buffers.aligned_buffer``: the async writer's
snapshots) is written locally with ``O_DIRECT`` where the filesystem takes it: the disk reads the
buffer itself, so the kernel neither copies it into the page cache nor has dirty pages to write
back and free later. That copy was most of a background save's CPU time, taken from the training
loop on a small machine.

A step is never written over where a newer kfp-spot committed it in a format this version does
not read (:class:`~kfp_spot.checkpoints.CheckpointFormatError`): that commit would be lost.

Why one module: a step's files, its commit and its removal are one sequence whose order is the
guarantee (the step written over is checked, then un-committed manifest first, then its files
written and checked, then the manifest); split apart, each part would have to restate when the
others may run, and the checks before a write would drift from what the write then does.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kfp_spot import fs
from kfp_spot.checkpoints.buffers import PAGE
from kfp_spot.checkpoints.checksum import CHUNK, Hashed, crc32c, crc32c_b64
from kfp_spot.checkpoints.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    CheckpointError,
    CheckpointFormatError,
    FileEntry,
    Manifest,
    check_name,
)
from kfp_spot.checkpoints.paths import stat_remote, step_dir, storage_errors

Payload = Any
"""A file's content for :func:`write_step`: a bytes-like object, a sequence of them, or
:class:`~kfp_spot.checkpoints.checksum.Hashed`."""


DIRECT_MIN_BYTES = CHUNK
"""Files at least this large, given as one page-aligned buffer, bypass the page cache."""

DIRECT_PIECE = 64 << 20
"""Bytes handed to the disk per ``O_DIRECT`` write: the kernel pins and maps each write's pages,
and fewer, larger writes cost it less CPU (256 MiB on a 2-core VM: 4 MiB pieces 0.013 s of
system time, 64 MiB pieces 0.006 s); the buffer is the caller's, so a piece costs no memory."""


def _address(view: memoryview) -> int | None:
    """The address of a writable buffer's first byte (None for a read-only one)."""
    if view.readonly or not view.nbytes:
        return None
    import ctypes

    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def byte_views(payload: Payload) -> list[memoryview]:
    """A payload's parts as flat views of their bytes, without a copy (a :class:`Hashed`'s data)."""
    if isinstance(payload, Hashed):
        payload = payload.data
    parts = payload if isinstance(payload, (list, tuple)) else (payload,)
    out = []
    for part in parts:
        view = memoryview(part)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        out.append(view)
    return out


def _crc_of(views: Sequence[memoryview]) -> int:
    crc = 0
    for view in views:
        for start in range(0, view.nbytes, CHUNK):
            crc = crc32c(view[start : start + CHUNK], crc)
    return crc


def _write_hashed(target: str, payload: Payload) -> FileEntry:
    """Write ``payload`` to ``target`` from its own memory and compute its CRC32C.

    Locally the CRC32C runs in a helper thread while the disk flushes (``fsync`` waits for the
    disk far longer than CRC32C takes over the same bytes), so a save costs what the write
    costs. Remotely each chunk is hashed just before it is handed to the upload. A
    :class:`Hashed` payload is not hashed again.
    """
    views = byte_views(payload)
    known = payload.crc32c if isinstance(payload, Hashed) else None
    size = sum(view.nbytes for view in views)
    local = fs.to_local_path(target)
    if local is not None:
        os.makedirs(os.path.dirname(local), exist_ok=True)
        if len(views) == 1 and size >= DIRECT_MIN_BYTES:
            direct = _write_direct(local, views[0], hash_it=known is None)
            if direct is not None:  # None: not an aligned writable buffer, nothing written
                return FileEntry(
                    target, size, crc32c=crc32c_b64(direct if known is None else known)
                )
        with open(local, "wb", buffering=0) as handle:
            for view in views:
                for start in range(0, view.nbytes, CHUNK):
                    piece = view[start : start + CHUNK]
                    while piece.nbytes:
                        piece = piece[handle.write(piece) :]
            if known is not None:
                crc = known
                os.fsync(handle.fileno())
            elif size < CHUNK:
                crc = _crc_of(views)
                os.fsync(handle.fileno())
            else:
                result: list[Any] = []

                def hash_views() -> None:
                    try:
                        result.append(_crc_of(views))
                    except BaseException as exc:  # noqa: BLE001 - re-raised by the writer
                        result.append(exc)

                helper = threading.Thread(target=hash_views, name="kfp-spot-crc32c")
                helper.start()
                try:
                    os.fsync(handle.fileno())
                finally:
                    helper.join()
                if isinstance(result[0], BaseException):
                    raise result[0]
                crc = result[0]
    else:
        crc = 0
        filesystem, path = fs.filesystem(target)
        with filesystem.open(path, "wb") as handle:
            for view in views:
                for start in range(0, view.nbytes, CHUNK):
                    piece = view[start : start + CHUNK]
                    if known is None:
                        crc = crc32c(piece, crc)
                    handle.write(piece)
        if known is not None:
            crc = known
    return FileEntry(target, size, crc32c=crc32c_b64(crc))


def _write_direct(path: str, view: memoryview, *, hash_it: bool = True) -> int | None:
    """Write ``view`` to ``path`` with ``O_DIRECT`` and fsync it; its CRC32C (0 unless ``hash_it``).

    Each piece is checksummed just before the disk reads it. The unaligned tail, if any, goes
    through the page cache. None (nothing written) when the platform, the filesystem or the
    buffer's address does not allow direct I/O: the caller then writes through the page cache.
    """
    address = _address(view)
    flag = getattr(os, "O_DIRECT", 0)
    if not flag or address is None or address % PAGE:
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flag, 0o666)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):  # tmpfs, some FUSE mounts
            return None
        raise
    try:
        size = view.nbytes
        aligned = size - size % PAGE
        crc = 0
        pos = 0
        direct = True
        while pos < size:
            piece = view[pos : min(pos + DIRECT_PIECE, aligned)] if pos < aligned else view[pos:]
            if hash_it:
                crc = crc32c(piece, crc)
            while piece.nbytes:
                if direct and (pos % PAGE or piece.nbytes % PAGE):  # the tail, a short write
                    import fcntl

                    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~flag)
                    direct = False
                try:
                    written = os.write(fd, piece)
                except OSError as exc:
                    if pos == 0 and exc.errno == errno.EINVAL:  # opened, refuses direct writes
                        return None
                    raise
                piece = piece[written:]
                pos += written
        os.fsync(fd)
    finally:
        os.close(fd)
    return crc


def _check_uploaded(root: str, step: int, entries: Sequence[FileEntry]) -> None:
    """Before committing on an object store: the stored objects are exactly what was hashed."""
    listed = stat_remote(step_dir(root, step))
    for entry in entries:
        info = listed.get(entry.path) or {}
        crc = info.get("crc32c")
        if int(info.get("size", -1)) != entry.size or (crc and crc != entry.crc32c):
            raise OSError(
                f"step {step}: uploaded object {entry.path} does not match what was written "
                f"(size {info.get('size')}, crc32c {crc}; expected {entry.size}, {entry.crc32c})"
            )


def write_step(
    root: str,
    step: int,
    files: Mapping[str, Payload],
    *,
    metadata: Mapping[str, Any] | None = None,
    after_file: Callable[[str], None] | None = None,
) -> Manifest:
    """Write the files of ``step``, then its sealed manifest (the commit).

    Each file is written from the memory it is given (no copy), its CRC32C computed chunk by
    chunk just before each chunk is written. Leftovers of an earlier, torn write of the same step
    are removed first, so a committed step holds exactly the files its manifest lists. On local
    disks every file is fsync'ed before the manifest is written; on object stores the uploaded
    objects' sizes and CRC32Cs are checked against what was hashed before the commit.

    Args:
        root: the checkpoint root (path or URI).
        step: the training step this checkpoint captures.
        files: relative file name -> content (a bytes-like object, a list/tuple of them that
            are written one after the other, or a :class:`~kfp_spot.checkpoints.Hashed` whose
            CRC32C is recorded without hashing its bytes again).
        metadata: small JSON-serialisable facts kept in the manifest (loss, epoch, ...).
        after_file: called with each file name once it is written (before the manifest); the
            trainer's fault injection uses it to die in the middle of a save.

    Returns:
        The committed manifest.

    Raises:
        ValueError: a file name is empty, absolute, climbs out with ``..`` or is the manifest's.
        OSError: the storage failed; the step is not committed.
        CheckpointFormatError: a newer kfp-spot committed ``step`` in its format: it is kept.
    """
    for name in files:
        problem = check_name(name)
        if problem:
            raise ValueError(
                f"invalid checkpoint file name {name!r}: {problem}; use a relative path inside "
                f"the step directory, other than {MANIFEST_NAME!r}"
            )
    base = step_dir(root, step)
    _keep_newer(root, step)
    delete_step(root, step)
    entries = []
    for name in sorted(files):
        written = _write_hashed(fs.join(base, name), files[name])
        entries.append(FileEntry(name, written.size, crc32c=written.crc32c))
        if after_file is not None:
            after_file(name)
    manifest = Manifest(step, tuple(entries), time.time(), dict(metadata or {}))
    return _commit(root, manifest, entries, uploaded=True)


def commit_files(
    root: str,
    step: int,
    names: Iterable[str] | None = None,
    *,
    metadata: Mapping[str, Any] | None = None,
) -> Manifest:
    """Commit files already written into ``<root>/step-<step>/`` (by a framework, say) as a step.

    Reads each file once to compute its CRC32C (on ``gs://`` the object's CRC32C is taken from
    its metadata instead), then writes the sealed manifest. Call it only once every file is
    complete (closed, and on local disks fsync'ed).

    Args:
        root: the checkpoint root.
        step: the step; its directory must hold the files.
        names: the relative names to commit; default: every file under the step directory
            (except the manifest and hidden temp files starting with ``.``).
        metadata: small JSON-serialisable facts kept in the manifest.

    Returns:
        The committed manifest.

    Raises:
        ValueError: a name is invalid, or there is nothing to commit.
        FileNotFoundError: a named file does not exist.
        CheckpointFormatError: a newer kfp-spot committed ``step`` in its format: it is kept.
    """
    base = step_dir(root, step)
    _keep_newer(root, step)
    local = fs.to_local_path(base)
    listed = None if local is not None else stat_remote(base)
    if names is None:
        if local is not None:
            names = [
                os.path.relpath(os.path.join(d, f), local)
                for d, _, fnames in os.walk(local)
                for f in fnames
            ]
        else:
            assert listed is not None  # listed exactly when the step is remote
            names = list(listed)
        names = [
            n for n in names if n != MANIFEST_NAME and not n.rsplit("/", 1)[-1].startswith(".")
        ]
    names = sorted(names)
    if not names:
        raise ValueError(f"no files to commit under {base}")
    entries = []
    for name in names:
        problem = check_name(name)
        if problem:
            raise ValueError(f"invalid checkpoint file name {name!r}: {problem}")
        if listed is not None and (info := listed.get(name)) is not None and info.get("crc32c"):
            entries.append(FileEntry(name, int(info["size"]), crc32c=info["crc32c"]))
            continue
        if listed is not None and name not in listed:
            raise FileNotFoundError(fs.join(base, name))
        entries.append(_hash_existing(fs.join(base, name), name))
    manifest = Manifest(step, tuple(entries), time.time(), dict(metadata or {}))
    return _commit(root, manifest, entries, uploaded=False)


def _hash_existing(uri: str, name: str) -> FileEntry:
    crc = 0
    size = 0
    local = fs.to_local_path(uri)
    if local is not None:
        handle = open(local, "rb", buffering=0)  # noqa: SIM115 (closed below)
    else:
        filesystem, path = fs.filesystem(uri)
        handle = filesystem.open(path, "rb")
    with handle:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while n := handle.readinto(view):
            crc = crc32c(view[:n], crc)
            size += n
    return FileEntry(name, size, crc32c=crc32c_b64(crc))


def _commit(
    root: str, manifest: Manifest, entries: Sequence[FileEntry], uploaded: bool
) -> Manifest:
    if uploaded and fs.to_local_path(root) is None:
        _check_uploaded(root, manifest.step, entries)
    return commit_manifest(root, manifest)


def commit_manifest(root: str, manifest: Manifest) -> Manifest:
    """Write ``manifest`` (sealed) for files that are already in place. Call only after they are.

    Returns:
        The manifest as written (its ``digest`` set).
    """
    data = manifest.to_bytes()
    # The manifest is either absent or whole: a local rename, or one object PUT on gs://.
    fs.atomic_write(fs.join(step_dir(root, manifest.step), MANIFEST_NAME), data)
    return Manifest(
        manifest.step,
        manifest.files,
        manifest.wall_time,
        manifest.metadata,
        hashlib.sha256(data).hexdigest(),
    )


def _keep_newer(root: str, step: int) -> None:
    """Raise :class:`CheckpointFormatError` where a newer kfp-spot committed ``step``.

    Written over, that commit would be lost. A step not there (the usual case: one failed open),
    or damaged, is written over as before.
    """
    uri = fs.join(step_dir(root, step), MANIFEST_NAME)
    local = fs.to_local_path(uri)
    try:
        if local is None:
            filesystem, path = fs.filesystem(uri)
            with filesystem.open(path, "rb") as handle:
                data = handle.read(MAX_MANIFEST_BYTES + 1)
        else:  # O_NONBLOCK: a FIFO there must not block the writer
            with open(os.open(local, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
                if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                    return
                data = handle.read(MAX_MANIFEST_BYTES + 1)
        Manifest.from_bytes(data)
    except CheckpointFormatError as exc:
        raise exc.at(f"step {step} ({uri})", step) from None
    except storage_errors(CheckpointError):  # none there, or damage: written over as before
        return


def delete_step(root: str, step: int) -> bool:
    """Remove checkpoint ``step``: its manifest first (un-committing it), then its files.

    A crash half-way leaves a step without a manifest, which every reader already ignores.

    Returns:
        Whether there was anything to remove.
    """
    base = step_dir(root, step)
    local = fs.to_local_path(base)
    if local is not None:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError):
            os.unlink(os.path.join(local, MANIFEST_NAME))
        if not os.path.lexists(local):
            return False
        if os.path.isdir(local) and not os.path.islink(local):
            import shutil

            shutil.rmtree(local, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(local)
        return True
    filesystem, path = fs.filesystem(base)
    with contextlib.suppress(FileNotFoundError):
        filesystem.rm_file(f"{path}/{MANIFEST_NAME}")
    try:
        if not filesystem.exists(path):
            return False
        filesystem.rm(path, recursive=True)
    except FileNotFoundError:
        return False
    return True
