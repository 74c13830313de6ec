"""The checkpoint layout every part of kfp-spot agrees on.

``<root>/step-<n>/<files...>`` plus ``<root>/step-<n>/manifest.json``, written last. The manifest
lists every file with its size and CRC32C (Cloud Storage's own object checksum), and is **sealed**:
its last field is the sha256 of the bytes before it, so a manifest that was cut, garbled or edited
is never trusted. A step whose sealed manifest is missing or does not verify does not exist.
Object stores have no atomic rename, so "manifest last" is the commit on local disks and ``gs://``
alike (one object PUT). Attempt records (one JSON file per training attempt) live in
``<root>/_attempts/``.

Every reader verifies a step through one function (:func:`verify` and :func:`read_verified` are
its two faces): the seal, the manifest's fields and ranges, the state index against the file list
and, when the reader says which decoders it allows, the adapters it names; then every file's type
and size (before anything is allocated) and checksum. Manifests of the first format (sha256 per
file, no seal) still verify.

This module has no dependency on kfp or google-cloud-aiplatform: it runs inside training
containers (through :mod:`kfp_spot.trainer`) as well as in the launcher and the evaluator. Local
paths never import fsspec.
"""

from __future__ import annotations

import binascii
import contextlib
import hashlib
import json
import logging
import math
import os
import re
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kfp_spot import fs

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "kfp-spot-checkpoint/2"
LEGACY_MANIFEST_FORMAT = "kfp-spot-checkpoint/1"  # sha256 per file, no seal: still restores
ATTEMPTS_DIR = "_attempts"
MAX_MANIFEST_BYTES = 16 << 20
"""A manifest larger than this is refused unread (they hold names, sizes and small metadata)."""
MAX_FILE_BYTES = 1 << 48
_STEP_RE = re.compile(r"^step-(\d+)$")
_SEAL_KEY = "manifest_sha256"
_SEAL_RE = re.compile(rb',\n "manifest_sha256": "([0-9a-f]{64})"\n\}\n?\Z')
_CRC_RE = re.compile(r"^[A-Za-z0-9+/]{6}==$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_STATE_KEY_RE = re.compile(r"^[^/._][^/]*$")
_CHUNK = 4 << 20


class CheckpointError(Exception):
    """A checkpoint cannot be used; the message says which one and why."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint step exists but is torn, damaged or not allowed; the message says why."""


# -- CRC32C ------------------------------------------------------------------------------------
class _Crc32c:
    """CRC32C (Castagnoli) over any buffer, without copying it, outside the GIL.

    google-crc32c's Python API takes only ``bytes`` (a copy of every chunk); its bundled C
    library takes a pointer. We call that through ctypes (which releases the GIL during the call),
    and fall back to the Python API when the library cannot be reached.
    """

    def __init__(self) -> None:
        import google_crc32c

        self._python = google_crc32c.extend
        self._extend = None
        self._ctypes = None
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
        self._ctypes = ctypes

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
                holder = (self._ctypes.c_char * n).from_buffer(view)
                return self._extend(crc, self._ctypes.addressof(holder), n)
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


# -- the manifest ------------------------------------------------------------------------------
@dataclass(frozen=True)
class FileEntry:
    """One file of a checkpoint step, as its manifest records it.

    ``crc32c`` (base64, as Cloud Storage reports it) is what this version writes; ``sha256`` is
    what the first format wrote. Verification uses whichever is present, CRC32C first.
    """

    path: str
    size: int
    sha256: str = ""
    crc32c: str = ""

    def to_json(self) -> dict[str, Any]:
        """The entry as the manifest stores it."""
        out: dict[str, Any] = {"path": self.path, "size": self.size}
        if self.crc32c:
            out["crc32c"] = self.crc32c
        if self.sha256:
            out["sha256"] = self.sha256
        return out


@dataclass(frozen=True)
class Manifest:
    """The commit record of one checkpoint step."""

    step: int
    files: tuple[FileEntry, ...]
    wall_time: float
    metadata: Mapping[str, Any] = field(default_factory=dict)
    digest: str = ""  # sha256 of the manifest file's bytes, set when read or written

    def to_json(self) -> dict[str, Any]:
        """The manifest's fields as written to ``manifest.json`` (without the seal)."""
        return {
            "format": MANIFEST_FORMAT,
            "step": self.step,
            "wall_time": self.wall_time,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.wall_time)),
            "files": [f.to_json() for f in self.files],
            "metadata": dict(self.metadata),
        }

    def to_bytes(self) -> bytes:
        """The sealed ``manifest.json``: the fields, then the sha256 of the bytes before it."""
        data = seal(self.to_json())
        if len(data) > MAX_MANIFEST_BYTES:
            raise ValueError(
                f"the manifest of step {self.step} would be {len(data)} bytes (limit "
                f"{MAX_MANIFEST_BYTES}): keep metadata and metrics small"
            )
        return data

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse and check a manifest; raises CheckpointCorruptError naming the first problem.

        The seal is checked before any field is read. Every field is checked for type and range
        (a size read from a damaged manifest is never used to allocate memory).
        """
        if len(data) > MAX_MANIFEST_BYTES:
            raise CheckpointCorruptError(f"manifest is {len(data)} bytes, over the limit")
        sealed = _SEAL_RE.search(data)
        if sealed is not None:
            body = data[: sealed.start()] + b"\n}"
            if hashlib.sha256(body).hexdigest() != sealed.group(1).decode():
                raise CheckpointCorruptError("manifest fails its seal (sha256 of its own bytes)")
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise CheckpointCorruptError(f"unreadable manifest: {exc}") from exc
        if not isinstance(doc, dict):
            raise CheckpointCorruptError("unreadable manifest: not a JSON object")
        fmt = doc.get("format")
        if fmt == MANIFEST_FORMAT:
            if sealed is None:
                raise CheckpointCorruptError("manifest has no seal (cut short or edited)")
        elif fmt == LEGACY_MANIFEST_FORMAT:
            if sealed is not None or _SEAL_KEY in doc:
                raise CheckpointCorruptError(f"a {fmt} manifest cannot carry a seal")
        else:
            raise CheckpointCorruptError(
                f"unknown manifest format {fmt!r} (expected {MANIFEST_FORMAT!r})"
            )
        step = _field(doc, "step", int)
        if step < 0:
            raise CheckpointCorruptError(f"manifest step {step} is negative")
        wall_time = _field(doc, "wall_time", (int, float))
        if not math.isfinite(wall_time):
            raise CheckpointCorruptError("manifest wall_time is not a finite number")
        metadata = doc.get("metadata", {})
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict):
            raise CheckpointCorruptError("manifest metadata is not a JSON object")
        raw_files = _field(doc, "files", list)
        files = []
        seen = set()
        for raw in raw_files:
            entry = _file_entry(raw, legacy=fmt == LEGACY_MANIFEST_FORMAT)
            if entry.path in seen:
                raise CheckpointCorruptError(f"manifest lists file {entry.path!r} twice")
            seen.add(entry.path)
            files.append(entry)
        return cls(
            step=step,
            files=tuple(files),
            wall_time=float(wall_time),
            metadata=metadata,
            digest=hashlib.sha256(data).hexdigest(),
        )


def seal(doc: Mapping[str, Any]) -> bytes:
    """``doc`` as manifest bytes, sealed: its last field is the sha256 of every byte before it.

    Readers check the seal on the raw bytes before they parse a single field, so a manifest that
    was cut short, garbled or edited is refused, whatever it says.
    """
    body = json.dumps(dict(doc), indent=1, sort_keys=True).encode()
    digest = hashlib.sha256(body).hexdigest()
    # body ends with "\n}": the seal becomes the last field
    return body[:-2] + f',\n "{_SEAL_KEY}": "{digest}"\n}}\n'.encode()


def _field(doc: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = doc.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise CheckpointCorruptError(f"manifest field {name!r} is missing or of the wrong type")
    return value


def _check_name(name: str) -> str | None:
    """Why ``name`` cannot be a file of a step, or None when it can."""
    if not isinstance(name, str) or not name:
        return "it is empty or not a string"
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return "it is absolute, has empty parts or climbs out with '..'"
    if name == MANIFEST_NAME or "\x00" in name or "\\" in name:
        return f"it is {MANIFEST_NAME!r} or holds NUL or backslash characters"
    return None


def _file_entry(raw: Any, *, legacy: bool) -> FileEntry:
    if not isinstance(raw, dict):
        raise CheckpointCorruptError("manifest file entry is not a JSON object")
    path = raw.get("path")
    problem = _check_name(path)
    if problem:
        raise CheckpointCorruptError(f"manifest file name {path!r} is invalid: {problem}")
    size = raw.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FILE_BYTES:
        raise CheckpointCorruptError(f"manifest size of {path!r} is out of range: {size!r}")
    sha = raw.get("sha256", "")
    crc = "" if legacy else raw.get("crc32c", "")
    if not isinstance(sha, str) or (sha and not _SHA_RE.fullmatch(sha)):
        raise CheckpointCorruptError(f"manifest sha256 of {path!r} is malformed")
    if not isinstance(crc, str) or (crc and not _CRC_RE.fullmatch(crc)):
        raise CheckpointCorruptError(f"manifest crc32c of {path!r} is malformed")
    if not sha and not crc:
        raise CheckpointCorruptError(f"manifest gives no checksum for {path!r}")
    return FileEntry(path, size, sha, crc)


def check_state_index(manifest: Manifest, adapters: Mapping[str, str] | None = None) -> None:
    """Check the state index a :class:`~kfp_spot.trainer.CheckpointManager` step carries.

    The index (``metadata["state"]``: key -> ``{"file", "adapter"}``) must name every file of the
    step exactly once, with valid keys. With ``adapters`` (adapter name -> file suffix, the
    decoders the reader allows) every adapter named must be allowed and each file must be
    ``<key><suffix>``. Steps written without an index (raw files) pass unless their metadata says
    an index was written.

    Raises:
        CheckpointCorruptError: naming the step and the problem.
    """
    where = f"step {manifest.step}"
    index = manifest.metadata.get("state")
    if index is None:
        if "state_format" in manifest.metadata:
            raise CheckpointCorruptError(f"{where}: the manifest's state index is missing")
        return
    if not isinstance(index, dict) or not index:
        raise CheckpointCorruptError(f"{where}: the manifest's state index is not a JSON object")
    files = {entry.path for entry in manifest.files}
    named: set[str] = set()
    for key, entry in index.items():
        if not _STATE_KEY_RE.fullmatch(key):
            raise CheckpointCorruptError(f"{where}: invalid state key {key!r} in the manifest")
        if not isinstance(entry, dict):
            raise CheckpointCorruptError(f"{where}: state[{key!r}] entry is not an object")
        name, adapter = entry.get("file"), entry.get("adapter")
        if not isinstance(name, str) or not isinstance(adapter, str):
            raise CheckpointCorruptError(f"{where}: state[{key!r}] has no file or adapter name")
        if name not in files or name in named:
            raise CheckpointCorruptError(
                f"{where}: state[{key!r}] names file {name!r}, which the manifest does not list "
                "(or another key names too)"
            )
        named.add(name)
        if adapters is None:
            # A reader that decodes nothing: built-in adapters must still match their files;
            # names it cannot know (adapters registered by the training code) are left to the
            # reader that decodes.
            suffix = _builtin_suffixes().get(adapter)
            if suffix is not None and name != key + suffix:
                raise CheckpointCorruptError(
                    f"{where}: state[{key!r}] file {name!r} does not match its key and adapter "
                    f"{adapter!r} (expected {key + suffix!r})"
                )
        else:
            if adapter not in adapters:
                raise CheckpointCorruptError(
                    f"{where}: state[{key!r}] needs adapter {adapter!r}, which this reader does "
                    f"not allow (allowed: {', '.join(sorted(adapters))}); pickle-based adapters "
                    "need allow_pickle=True, others must be registered before restoring"
                )
            if name != key + adapters[adapter]:
                raise CheckpointCorruptError(
                    f"{where}: state[{key!r}] file {name!r} does not match its key and adapter "
                    f"{adapter!r} (expected {key + adapters[adapter]!r})"
                )
    if named != files:
        raise CheckpointCorruptError(
            f"{where}: the manifest lists files no state key names: {sorted(files - named)}"
        )


def _builtin_suffixes() -> dict[str, str]:
    from kfp_spot.trainer import adapters

    return {a.name: a.suffix for a in adapters.BUILTIN_ADAPTERS}


# -- paths and listings ------------------------------------------------------------------------
def step_dir(root: str, step: int) -> str:
    """The directory (path or URI) of checkpoint ``step`` under ``root``."""
    if step < 0:
        raise ValueError(f"checkpoint step must be >= 0, got {step}")
    return fs.join(root, f"step-{step}")


def _names(uri: str) -> list[str]:
    """Entry names directly under ``uri`` ([] when it does not exist)."""
    local = fs.to_local_path(uri)
    if local is not None:
        try:
            return os.listdir(local)
        except (FileNotFoundError, NotADirectoryError):
            return []
    filesystem, path = fs.filesystem(uri)
    filesystem.invalidate_cache(path)  # another process (the previous attempt) wrote here
    try:
        entries = filesystem.ls(path, detail=False)
    except FileNotFoundError:
        return []
    return [entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries]


def list_steps(root: str) -> list[int]:
    """Every step directory under ``root``, committed or not, in ascending order."""
    steps = []
    for name in _names(root):
        match = _STEP_RE.fullmatch(name)
        if match:
            steps.append(int(match.group(1)))
    return sorted(steps)


def parse_step_dir(path: str) -> tuple[str, int]:
    """Split a ``.../step-<n>`` directory into its checkpoint root and step.

    Raises:
        ValueError: ``path`` does not end in ``step-<n>``.
    """
    stripped = path.rstrip("/") if fs.is_remote(path) else os.path.abspath(path)
    root, _, name = stripped.rpartition("/")
    match = _STEP_RE.fullmatch(name)
    if not match or not root:
        raise ValueError(f"{path!r} is not a checkpoint step directory (<root>/step-<n>)")
    return root, int(match.group(1))


def _open_local(path: str, what: str, missing: str | None = None) -> int:
    """Open a regular file for reading; CheckpointCorruptError when absent or not a file."""
    try:
        # O_NONBLOCK: a FIFO planted where a file should be must not block the reader.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise CheckpointCorruptError(missing or f"{what} is missing") from exc
    except OSError as exc:
        raise CheckpointCorruptError(f"{what} cannot be opened: {exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointCorruptError(f"{what} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_manifest(root: str, step: int) -> Manifest:
    """Read and check the manifest of ``step`` (seal, fields, ranges, the step it names).

    Raises:
        CheckpointCorruptError: missing, unreadable or not the manifest of ``step``.
    """
    uri = fs.join(step_dir(root, step), MANIFEST_NAME)
    what = f"step {step} under {root}: {MANIFEST_NAME}"
    missing = f"step {step} under {root} has no {MANIFEST_NAME} (torn or still being written)"
    local = fs.to_local_path(uri)
    if local is not None:
        fd = _open_local(local, what, missing)
        try:
            size = os.fstat(fd).st_size
            if size > MAX_MANIFEST_BYTES:
                raise CheckpointCorruptError(f"{what} is {size} bytes, over the limit")
            with open(fd, "rb", closefd=False) as handle:
                data = handle.read(MAX_MANIFEST_BYTES + 1)
        except OSError as exc:
            raise CheckpointCorruptError(f"{what} cannot be read: {exc}") from exc
        finally:
            os.close(fd)
    else:
        filesystem, path = fs.filesystem(uri)
        try:
            with filesystem.open(path, "rb") as handle:
                data = handle.read(MAX_MANIFEST_BYTES + 1)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise CheckpointCorruptError(missing) from exc
    try:
        manifest = Manifest.from_bytes(data)
    except CheckpointCorruptError as exc:
        raise CheckpointCorruptError(f"step {step} under {root}: {exc}") from None
    if manifest.step != step:
        raise CheckpointCorruptError(
            f"step {step} under {root}: its manifest says step {manifest.step}"
        )
    return manifest


# -- verification: the one function every reader goes through ---------------------------------
def _mismatch(step: int, entry: FileEntry, size: int | None, crc: int | None, sha: Any) -> None:
    if size is not None and size != entry.size:
        raise CheckpointCorruptError(
            f"step {step}: file {entry.path} has {size} bytes, manifest says {entry.size}"
        )
    if entry.crc32c and crc is not None and crc32c_b64(crc) != entry.crc32c:
        raise CheckpointCorruptError(f"step {step}: file {entry.path} fails its crc32c check")
    if not entry.crc32c and sha is not None and sha.hexdigest() != entry.sha256:
        raise CheckpointCorruptError(f"step {step}: file {entry.path} fails its sha256 check")


def new_buffer(size: int) -> Any:
    """A writable buffer of ``size`` bytes (large ones: NumPy ``uint8``, never zero-filled)."""
    # bytearray(n) zero-fills: for a large checkpoint that is a whole extra pass over memory.
    # numpy.empty does not, and readinto then touches each page once.
    if size >= _CHUNK:
        try:
            import numpy as np
        except ImportError:  # numpy is a dependency, but the layout does not need it
            return bytearray(size)
        return np.empty(size, dtype=np.uint8)
    return bytearray(size)


def _read_checked(step: int, entry: FileEntry, handle: Any, keep: bool) -> Any:
    """Read a file whose size was already checked, hashing each chunk as it lands.

    Returns the content (a writable buffer) when ``keep``, else None (streamed, nothing kept).
    """
    use_crc = bool(entry.crc32c)
    crc = 0
    sha = None if use_crc else hashlib.sha256()
    buf = new_buffer(entry.size) if keep else bytearray(min(entry.size, _CHUNK) or 1)
    view = memoryview(buf).cast("B")
    pos = 0
    while pos < entry.size:
        window = view[pos : pos + _CHUNK] if keep else view[: min(_CHUNK, entry.size - pos)]
        n = handle.readinto(window)
        if not n:
            break
        chunk = window[:n]
        if use_crc:
            crc = crc32c(chunk, crc)
        else:
            sha.update(chunk)
        pos += n
    extra = len(handle.read(1)) if pos == entry.size else 0  # longer than it was a moment ago
    _mismatch(step, entry, pos + extra, crc if use_crc else None, sha)
    return buf if keep else None


def _stat_remote(base: str) -> dict[str, dict[str, Any]]:
    """Object name (relative to ``base``) -> metadata, in one listing request."""
    filesystem, path = fs.filesystem(base)
    filesystem.invalidate_cache(path)
    try:
        found = filesystem.find(path, detail=True)
    except FileNotFoundError:
        return {}
    prefix = path.rstrip("/") + "/"
    return {name[len(prefix) :]: info for name, info in found.items() if name.startswith(prefix)}


def _check_step(
    root: str,
    step: int,
    *,
    check_hashes: bool,
    keep: bool,
    adapters: Mapping[str, str] | None,
) -> tuple[Manifest, dict[str, Any]]:
    manifest = read_manifest(root, step)
    check_state_index(manifest, adapters)
    base = step_dir(root, step)
    out: dict[str, Any] = {}
    remote = None if fs.to_local_path(base) is not None else _stat_remote(base)
    for entry in manifest.files:
        what = f"step {step}: file {entry.path}"
        if remote is None:
            fd = _open_local(fs.to_local_path(fs.join(base, entry.path)), what)
            try:
                _mismatch(step, entry, os.fstat(fd).st_size, None, None)  # before allocating
                if keep or check_hashes:
                    with open(fd, "rb", buffering=0, closefd=False) as handle:
                        out[entry.path] = _read_checked(step, entry, handle, keep)
            except OSError as exc:
                raise CheckpointCorruptError(f"{what} cannot be read: {exc}") from exc
            finally:
                os.close(fd)
            continue
        info = remote.get(entry.path)
        if info is None or info.get("type", "file") != "file":
            raise CheckpointCorruptError(f"{what} is missing")
        _mismatch(step, entry, int(info.get("size", -1)), None, None)
        listed_crc = info.get("crc32c")
        if not keep and check_hashes and entry.crc32c and listed_crc:
            # Cloud Storage computed this over the stored object: no need to read it back.
            if listed_crc != entry.crc32c:
                raise CheckpointCorruptError(
                    f"step {step}: file {entry.path} fails its crc32c check"
                )
            continue
        if keep or check_hashes:
            filesystem, path = fs.filesystem(fs.join(base, entry.path))
            try:
                with filesystem.open(path, "rb") as handle:
                    out[entry.path] = _read_checked(step, entry, handle, keep)
            except (FileNotFoundError, IsADirectoryError) as exc:
                raise CheckpointCorruptError(f"{what} is missing") from exc
    return manifest, out


def verify(
    root: str,
    step: int,
    *,
    check_hashes: bool = True,
    adapters: Mapping[str, str] | None = None,
) -> Manifest:
    """Check that ``step`` is committed and every file matches its manifest.

    The same checks as :func:`read_verified` (which restore uses), without keeping the data.

    Args:
        root: the checkpoint root.
        step: the step to check.
        check_hashes: also check every file's checksum (sizes are always checked). On ``gs://``
            the CRC32C Cloud Storage keeps for each object is compared; nothing is downloaded.
        adapters: the decoders the reader allows (adapter name -> file suffix); a step whose
            state index names another is invalid. None: adapters are not checked (a reader that
            decodes nothing).

    Returns:
        The verified manifest.

    Raises:
        CheckpointCorruptError: naming the step and the first problem found.
    """
    return _check_step(root, step, check_hashes=check_hashes, keep=False, adapters=adapters)[0]


def read_verified(
    root: str, step: int, *, adapters: Mapping[str, str] | None = None
) -> tuple[Manifest, dict[str, Any]]:
    """Read every file of ``step`` once, checking it against its verified manifest.

    Each file's size is checked before its buffer is allocated, and its checksum as it is read.

    Args:
        root: the checkpoint root.
        step: the step to read.
        adapters: as for :func:`verify`.

    Returns:
        The manifest and file name -> content: a writable bytes-like object (``bytearray`` or a
        NumPy ``uint8`` array that was never zero-filled) that decoders may keep and use in place.
        ``bytes(content)`` gives plain bytes.

    Raises:
        CheckpointCorruptError: the step is torn, damaged or names a decoder not allowed.
    """
    return _check_step(root, step, check_hashes=True, keep=True, adapters=adapters)


def committed_steps(root: str, *, check_hashes: bool = False) -> list[Manifest]:
    """Manifests of every committed step that verifies, oldest first."""
    out = []
    for step in list_steps(root):
        try:
            out.append(verify(root, step, check_hashes=check_hashes))
        except CheckpointCorruptError as exc:
            log.info("skipping checkpoint: %s", exc)
    return out


def latest(root: str, *, check_hashes: bool = True) -> Manifest | None:
    """The newest step under ``root`` whose manifest verifies, or None when there is none.

    Torn or corrupted steps are skipped, and the reason is logged at WARNING.
    """
    for step in reversed(list_steps(root)):
        try:
            return verify(root, step, check_hashes=check_hashes)
        except CheckpointCorruptError as exc:
            log.warning("skipping checkpoint: %s", exc)
    return None


# -- writing -----------------------------------------------------------------------------------
Payload = Any
"""A file's content for :func:`write_step`: a bytes-like object or a sequence of them."""


def _chunks(payload: Payload) -> list[memoryview]:
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
        for start in range(0, view.nbytes, _CHUNK):
            crc = crc32c(view[start : start + _CHUNK], crc)
    return crc


def _write_hashed(target: str, payload: Payload) -> FileEntry:
    """Write ``payload`` to ``target`` from its own memory and compute its CRC32C.

    Locally the CRC32C runs in a helper thread while the disk flushes (``fsync`` waits for the
    disk far longer than CRC32C takes over the same bytes), so a save costs what the write
    costs. Remotely each chunk is hashed just before it is handed to the upload.
    """
    views = _chunks(payload)
    size = sum(view.nbytes for view in views)
    local = fs.to_local_path(target)
    if local is not None:
        os.makedirs(os.path.dirname(local), exist_ok=True)
        with open(local, "wb", buffering=0) as handle:
            for view in views:
                for start in range(0, view.nbytes, _CHUNK):
                    piece = view[start : start + _CHUNK]
                    while piece.nbytes:
                        piece = piece[handle.write(piece) :]
            if size < _CHUNK:
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
                for start in range(0, view.nbytes, _CHUNK):
                    piece = view[start : start + _CHUNK]
                    crc = crc32c(piece, crc)
                    handle.write(piece)
    return FileEntry(target, size, crc32c=crc32c_b64(crc))


def _check_uploaded(root: str, step: int, entries: Sequence[FileEntry]) -> None:
    """Before committing on an object store: the stored objects are exactly what was hashed."""
    listed = _stat_remote(step_dir(root, step))
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
        files: relative file name -> content (a bytes-like object, or a list/tuple of them that
            are written one after the other).
        metadata: small JSON-serialisable facts kept in the manifest (loss, epoch, ...).
        after_file: called with each file name once it is written (before the manifest); the
            trainer's fault injection uses it to die in the middle of a save.

    Returns:
        The committed manifest.

    Raises:
        ValueError: a file name is empty, absolute, climbs out with ``..`` or is the manifest's.
        OSError: the storage failed; the step is not committed.
    """
    for name in files:
        problem = _check_name(name)
        if problem:
            raise ValueError(
                f"invalid checkpoint file name {name!r}: {problem}; use a relative path inside "
                f"the step directory, other than {MANIFEST_NAME!r}"
            )
    base = step_dir(root, step)
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
    """
    base = step_dir(root, step)
    local = fs.to_local_path(base)
    listed = None if local is not None else _stat_remote(base)
    if names is None:
        if local is not None:
            names = [
                os.path.relpath(os.path.join(d, f), local)
                for d, _, fnames in os.walk(local)
                for f in fnames
            ]
        else:
            names = list(listed)
        names = [
            n for n in names if n != MANIFEST_NAME and not n.rsplit("/", 1)[-1].startswith(".")
        ]
    names = sorted(names)
    if not names:
        raise ValueError(f"no files to commit under {base}")
    entries = []
    for name in names:
        problem = _check_name(name)
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
        buf = bytearray(_CHUNK)
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


# -- attempt records ---------------------------------------------------------------------------
def read_attempt_records(root: str) -> list[dict[str, Any]]:
    """Every attempt record under ``<root>/_attempts`` (ordered by start time)."""
    directory = fs.join(root, ATTEMPTS_DIR)
    records = []
    for name in _names(directory):
        if not name.endswith(".json") or name.startswith("."):
            continue
        uri = fs.join(directory, name)
        try:
            local = fs.to_local_path(uri)
            if local is not None:
                with open(local, "rb") as handle:
                    data = handle.read(MAX_MANIFEST_BYTES)
            else:
                filesystem, path = fs.filesystem(uri)
                with filesystem.open(path, "rb") as handle:
                    data = handle.read(MAX_MANIFEST_BYTES)
            record = json.loads(data)
        except (OSError, ValueError, RecursionError) as exc:
            log.warning("skipping unreadable attempt record %s: %s", name, exc)
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            log.warning("skipping attempt record %s: not a JSON object", name)
    return sorted(records, key=_attempt_order)


def _attempt_order(record: Mapping[str, Any]) -> tuple[int, float, str]:
    # Numeric start times first, in order; a record with a missing or non-numeric one (written by
    # another version, or hand-edited) must not make the whole listing fail to sort.
    start = record.get("start_time")
    if isinstance(start, (int, float)) and not isinstance(start, bool):
        return (0, float(start), "")
    return (1, 0.0, str(start))


def write_attempt_record(root: str, attempt_id: str, record: Mapping[str, Any]) -> None:
    """Write (or overwrite) the attempt record ``attempt_id`` under ``<root>/_attempts``.

    Readers see the old record or the new one, never a mix: a local file is replaced by rename,
    an object by a single PUT.
    """
    if not attempt_id or "/" in attempt_id:
        raise ValueError(f"invalid attempt id {attempt_id!r}: a non-empty name without '/'")
    data = json.dumps(dict(record), sort_keys=True).encode()
    fs.atomic_write(fs.join(root, ATTEMPTS_DIR, f"{attempt_id}.json"), data)


def files_of(manifest: Manifest) -> Iterable[str]:
    """The relative file names a manifest lists."""
    return (entry.path for entry in manifest.files)


def commit_times(root: str) -> list[float]:
    """Wall times at which checkpoints under ``root`` were committed, ascending.

    The committed manifests give theirs; attempt records add each attempt's ``last_commit_time``,
    which survives retention deleting that step. Used to tell kept work from lost work.
    """
    times = {m.wall_time for m in committed_steps(root)}
    for record in read_attempt_records(root):
        value = record.get("last_commit_time")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            times.add(float(value))
    return sorted(times)
