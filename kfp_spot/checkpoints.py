"""The checkpoint layout every part of kfp-spot agrees on.

``<root>/step-<n>/<files...>`` plus ``<root>/step-<n>/manifest.json``, written last. The manifest
lists every file with its size and sha256; a step without a manifest that verifies does not exist.
Object stores have no atomic rename, so "manifest last" is the commit on local disks and ``gs://``
alike. Attempt records (one JSON file per training attempt) live in ``<root>/_attempts/``.

This module has no dependency on kfp or google-cloud-aiplatform: it runs inside training
containers (through :mod:`kfp_spot.trainer`) as well as in the launcher and the evaluator.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kfp_spot import fs

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "kfp-spot-checkpoint/1"
ATTEMPTS_DIR = "_attempts"
_STEP_RE = re.compile(r"^step-(\d+)$")
_CHUNK = 4 << 20


class CheckpointError(Exception):
    """A checkpoint cannot be used; the message says which one and why."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint step exists but its manifest is missing, unreadable or does not verify."""


@dataclass(frozen=True)
class FileEntry:
    """One file of a checkpoint step, as its manifest records it."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """The commit record of one checkpoint step."""

    step: int
    files: tuple[FileEntry, ...]
    wall_time: float
    metadata: Mapping[str, Any] = field(default_factory=dict)
    digest: str = ""  # sha256 of the manifest file's bytes, set when read

    def to_json(self) -> dict[str, Any]:
        """The manifest as written to ``manifest.json``."""
        return {
            "format": MANIFEST_FORMAT,
            "step": self.step,
            "wall_time": self.wall_time,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.wall_time)),
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse a manifest; raises CheckpointCorruptError when it is not one."""
        try:
            doc = json.loads(data)
            if doc.get("format") != MANIFEST_FORMAT:
                raise CheckpointCorruptError(
                    f"unknown manifest format {doc.get('format')!r} (expected {MANIFEST_FORMAT!r})"
                )
            files = tuple(
                FileEntry(str(f["path"]), int(f["size"]), str(f["sha256"])) for f in doc["files"]
            )
            return cls(
                step=int(doc["step"]),
                files=files,
                wall_time=float(doc["wall_time"]),
                metadata=doc.get("metadata") or {},
                digest=hashlib.sha256(data).hexdigest(),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointCorruptError(f"unreadable manifest: {exc}") from exc


def step_dir(root: str, step: int) -> str:
    """The directory (path or URI) of checkpoint ``step`` under ``root``."""
    if step < 0:
        raise ValueError(f"checkpoint step must be >= 0, got {step}")
    return fs.join(root, f"step-{step}")


def list_steps(root: str) -> list[int]:
    """Every step directory under ``root``, committed or not, in ascending order."""
    filesystem, path = fs.filesystem(root)
    filesystem.invalidate_cache(path)  # another process (the previous attempt) wrote here
    try:
        entries = filesystem.ls(path, detail=False)
    except FileNotFoundError:
        return []
    steps = []
    for entry in entries:
        match = _STEP_RE.fullmatch(entry.rstrip("/").rsplit("/", 1)[-1])
        if match:
            steps.append(int(match.group(1)))
    return sorted(steps)


def _sha256_of(filesystem: Any, path: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with filesystem.open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _check_entry(step: int, entry: FileEntry, size: int, digest: str) -> None:
    """Raise CheckpointCorruptError when a file's size or sha256 differs from its manifest."""
    if size != entry.size:
        raise CheckpointCorruptError(
            f"step {step}: file {entry.path} has {size} bytes, manifest says {entry.size}"
        )
    if digest != entry.sha256:
        raise CheckpointCorruptError(f"step {step}: file {entry.path} fails its sha256 check")


def read_manifest(root: str, step: int) -> Manifest:
    """Read the manifest of ``step``; raises CheckpointCorruptError when missing or unreadable."""
    filesystem, path = fs.filesystem(fs.join(step_dir(root, step), MANIFEST_NAME))
    try:
        with filesystem.open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError as exc:
        raise CheckpointCorruptError(
            f"step {step} under {root} has no {MANIFEST_NAME} (torn or still being written)"
        ) from exc
    manifest = Manifest.from_bytes(data)
    if manifest.step != step:
        raise CheckpointCorruptError(
            f"manifest of step-{step} under {root} says step {manifest.step}"
        )
    return manifest


def verify(root: str, step: int, *, check_hashes: bool = True) -> Manifest:
    """Check that ``step`` is committed and every file matches its manifest.

    Args:
        root: the checkpoint root.
        step: the step to check.
        check_hashes: also recompute sha256 of every file (sizes are always checked).

    Returns:
        The verified manifest.

    Raises:
        CheckpointCorruptError: naming the step and the first problem found.
    """
    manifest = read_manifest(root, step)
    base = step_dir(root, step)
    for entry in manifest.files:
        filesystem, path = fs.filesystem(fs.join(base, entry.path))
        try:
            if not check_hashes:
                size = filesystem.size(path)
                digest = entry.sha256
            else:
                digest, size = _sha256_of(filesystem, path)
        except FileNotFoundError as exc:
            raise CheckpointCorruptError(f"step {step}: file {entry.path} is missing") from exc
        _check_entry(step, entry, size, digest)
    return manifest


def read_verified(root: str, step: int) -> tuple[Manifest, dict[str, bytearray | memoryview]]:
    """Read every file of ``step`` once, checking sizes and sha256 against its manifest.

    Hashing runs in a helper thread, one chunk behind the reads, so a large checkpoint costs
    about the longer of reading and hashing rather than their sum.

    Returns:
        The manifest and file name -> content: a writable bytes-like object (``bytearray``, or
        for large files a ``memoryview`` of memory that was never zero-filled) that decoders may
        keep and use in place. ``bytes(content)`` gives plain bytes.

    Raises:
        CheckpointCorruptError: the step is torn or a file does not match.
    """
    manifest = read_manifest(root, step)
    base = step_dir(root, step)
    out: dict[str, bytearray | memoryview] = {}
    with ThreadPoolExecutor(1, thread_name_prefix="kfp-spot-sha256") as pool:
        for entry in manifest.files:
            filesystem, path = fs.filesystem(fs.join(base, entry.path))
            try:
                with filesystem.open(path, "rb") as handle:
                    data, digest, size = _read_hashed(handle, entry.size, pool)
            except FileNotFoundError as exc:
                raise CheckpointCorruptError(f"step {step}: file {entry.path} is missing") from exc
            _check_entry(step, entry, size, digest)
            out[entry.path] = data
    return manifest, out


def _read_hashed(
    handle: Any, expected: int, pool: ThreadPoolExecutor
) -> tuple[bytearray | memoryview, str, int]:
    """Read up to ``expected`` bytes, hashing as it goes; returns data, sha256, the file's size."""
    buf = _buffer(expected)
    view = memoryview(buf)
    digest = hashlib.sha256()
    pending = None
    pos = 0
    while pos < expected:
        n = handle.readinto(view[pos : pos + _CHUNK])
        if not n:
            break
        if pending is not None:
            pending.result()
        pending = pool.submit(digest.update, view[pos : pos + n])
        pos += n
    if pending is not None:
        pending.result()
    if pos == expected and (extra := len(handle.read())):  # longer than the manifest says
        return view, "", pos + extra
    if isinstance(buf, bytearray) and pos == expected:
        view.release()
        return buf, digest.hexdigest(), pos
    return view[:pos], digest.hexdigest(), pos


def _buffer(size: int) -> bytearray | Any:
    # bytearray(n) zero-fills: for a large checkpoint that is a whole extra pass over memory.
    # numpy.empty does not, and readinto then touches each page once.
    if size >= _CHUNK:
        try:
            import numpy as np
        except ImportError:  # numpy is a dependency, but the layout does not need it
            return bytearray(size)
        return np.empty(size, dtype=np.uint8)
    return bytearray(size)


def _sha256_while(data: bytes | bytearray | memoryview, work: Callable[[], None]) -> str:
    """sha256 of ``data``, computed in a helper thread while ``work()`` runs (e.g. writes it)."""
    if len(data) < _CHUNK:
        work()
        return hashlib.sha256(data).hexdigest()
    with ThreadPoolExecutor(1, thread_name_prefix="kfp-spot-sha256") as pool:
        future = pool.submit(lambda: hashlib.sha256(data).hexdigest())
        work()
        return future.result()


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


def write_step(
    root: str,
    step: int,
    files: Mapping[str, bytes | bytearray | memoryview],
    *,
    metadata: Mapping[str, Any] | None = None,
    after_file: Callable[[str], None] | None = None,
) -> Manifest:
    """Write the files of ``step``, then its manifest (the commit).

    Leftovers of an earlier, torn write of the same step are removed first, so a committed step
    holds exactly the files its manifest lists. On local disks every file is fsync'ed before the
    manifest is written, so the commit never reaches the disk ahead of the data it names.

    Args:
        root: the checkpoint root (path or URI).
        step: the training step this checkpoint captures.
        files: relative file name -> content.
        metadata: small JSON-serialisable facts kept in the manifest (loss, epoch, ...).
        after_file: called with each file name once it is written (before the manifest); the
            trainer's fault injection uses it to die in the middle of a save.

    Returns:
        The committed manifest.

    Raises:
        ValueError: a file name is empty, absolute, climbs out with ``..`` or is the manifest's.
    """
    for name in files:
        if not name or name.startswith("/") or ".." in name.split("/") or name == MANIFEST_NAME:
            raise ValueError(
                f"invalid checkpoint file name {name!r}: use a relative path inside the step "
                f"directory, other than {MANIFEST_NAME!r}"
            )
    base = step_dir(root, step)
    delete_step(root, step)
    entries = []
    for name in sorted(files):
        data = files[name]
        target = fs.join(base, name)

        def write(data: bytes | bytearray | memoryview = data, target: str = target) -> None:
            local = fs.to_local_path(target)
            if local is not None:
                _write_local(local, data)
                return
            filesystem, path = fs.filesystem(target)
            with filesystem.open(path, "wb") as handle:
                handle.write(data)

        digest = _sha256_while(data, write)
        entries.append(FileEntry(name, len(data), digest))
        if after_file is not None:
            after_file(name)
    manifest = Manifest(step, tuple(entries), time.time(), dict(metadata or {}))
    commit_manifest(root, manifest)
    return verify(root, step, check_hashes=False)


def _write_local(path: str, data: bytes | bytearray | memoryview) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def commit_manifest(root: str, manifest: Manifest) -> None:
    """Write ``manifest`` for files that are already in place. Call only after they are."""
    data = json.dumps(manifest.to_json(), indent=1, sort_keys=True).encode()
    # The manifest is either absent or whole: a local rename, or one object PUT on gs://.
    fs.atomic_write(fs.join(step_dir(root, manifest.step), MANIFEST_NAME), data)


def delete_step(root: str, step: int) -> bool:
    """Remove checkpoint ``step``: its manifest first (un-committing it), then its files.

    A crash half-way leaves a step without a manifest, which every reader already ignores.

    Returns:
        Whether there was anything to remove.
    """
    base = step_dir(root, step)
    filesystem, path = fs.filesystem(base)
    manifest_path = fs.filesystem(fs.join(base, MANIFEST_NAME))[1]
    with contextlib.suppress(FileNotFoundError):
        filesystem.rm_file(manifest_path)
    try:
        if not filesystem.exists(path):
            return False
        filesystem.rm(path, recursive=True)
    except FileNotFoundError:
        return False
    return True


def read_attempt_records(root: str) -> list[dict[str, Any]]:
    """Every attempt record under ``<root>/_attempts`` (ordered by start time)."""
    filesystem, path = fs.filesystem(fs.join(root, ATTEMPTS_DIR))
    filesystem.invalidate_cache(path)
    try:
        names = filesystem.ls(path, detail=False)
    except FileNotFoundError:
        return []
    records = []
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with filesystem.open(name, "rb") as handle:
                record = json.loads(handle.read())
        except (OSError, ValueError) as exc:
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
