"""Reading a step back: the one verification every reader goes through.

:func:`verify` and :func:`read_verified` are its two faces: the seal, the manifest's fields and
ranges, the state index against the file list and, when the reader says which decoders it allows,
the adapters it names; then every file's type and size (before anything is allocated) and
checksum. A step whose sealed manifest is missing or does not verify does not exist.

Damage (torn, a file missing, cut short, failing its checksum, not a file) is a
:class:`CheckpointCorruptError`: readers of the newest step skip it. A storage error reading a
file that is there (permission denied, an I/O error: Cloud Storage FUSE's answer to a failed
request) is raised as its ``OSError``, naming the file: no reader then takes an older step for
the newest, and no retention deletes the steps after it. A step whose manifest is in a newer
format than this version reads (written by a newer kfp-spot) is no damage either: it raises
:class:`CheckpointFormatError`, naming the step, its manifest and the format, and no reader falls
back past it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kfp_spot import fs
from kfp_spot.checkpoints.buffers import new_buffer
from kfp_spot.checkpoints.checksum import CHUNK, crc32c, crc32c_b64
from kfp_spot.checkpoints.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    CheckpointCorruptError,
    CheckpointFormatError,
    FileEntry,
    Manifest,
)
from kfp_spot.checkpoints.paths import list_steps, not_there, stat_remote, step_dir, unreadable
from kfp_spot.checkpoints.state import check_state_index

log = logging.getLogger("kfp_spot.checkpoints")
T = TypeVar("T")


class StepNotCommittedError(CheckpointCorruptError):
    """A step directory without its manifest: being written, or left by a writer that stopped.

    Not damage: a writer commits a step by writing its manifest last, so any lister may see a
    step in this state while it is written. Readers skip it quietly; a manifest that exists but
    does not verify, or a file that fails its check, is damage and is warned about.
    """


def _open_local(path: str, what: str, missing: str | None = None) -> int:
    """Open a regular file for reading; CheckpointCorruptError when absent or not a file.

    Raises:
        CheckpointCorruptError: absent, or not a regular file (damage).
        OSError: the storage refused to open a file that is there (see the module docstring).
    """
    try:
        # O_NONBLOCK: a FIFO planted where a file should be must not block the reader.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        if missing is not None:
            raise StepNotCommittedError(missing) from exc
        raise CheckpointCorruptError(f"{what} is missing") from exc
    except NotADirectoryError as exc:  # the step (or a directory above the file) is a file
        raise CheckpointCorruptError(missing or f"{what} is missing") from exc
    except OSError as exc:
        if not_there(exc, path):  # a socket (ENXIO), a symlink loop
            raise CheckpointCorruptError(f"{what} cannot be opened: {exc}") from exc
        raise unreadable(exc, f"{what} cannot be opened", path) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointCorruptError(f"{what} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _no_such_step(root: str, step: int) -> str:
    """That ``root`` has no directory for ``step``, with the steps it has (an error path only)."""
    try:
        steps = list_steps(root)
    except OSError:
        steps = []
    shown = ", ".join(map(str, steps[-10:])) if steps else ""
    has = f"its steps: {'..., ' if len(steps) > 10 else ''}{shown}" if steps else "no step there"
    return f"step {step} does not exist under {root} ({has})"


def read_manifest(root: str, step: int) -> Manifest:
    """Read and check the manifest of ``step`` (seal, fields, ranges, the step it names).

    Raises:
        CheckpointCorruptError: missing, unreadable or not the manifest of ``step``.
        CheckpointFormatError: the manifest is in a newer format than this version reads.
        OSError: the storage failed to read a manifest that is there (no damage).
    """
    uri = fs.join(step_dir(root, step), MANIFEST_NAME)
    what = f"step {step} under {root}: {MANIFEST_NAME}"
    missing = f"step {step} under {root} has no {MANIFEST_NAME} (torn or still being written)"
    local = fs.to_local_path(uri)
    if local is not None:
        try:
            fd = _open_local(local, what, missing)
        except StepNotCommittedError:
            if not os.path.isdir(os.path.dirname(local)):
                raise StepNotCommittedError(_no_such_step(root, step)) from None
            raise
        try:
            size = os.fstat(fd).st_size
            if size > MAX_MANIFEST_BYTES:
                raise CheckpointCorruptError(f"{what} is {size} bytes, over the limit")
            with open(fd, "rb", closefd=False) as handle:  # read(n) allocates n bytes first
                data = handle.read(size + 1)
        except OSError as exc:
            raise unreadable(exc, f"{what} cannot be read", local) from exc
        finally:
            os.close(fd)
    else:
        filesystem, path = fs.filesystem(uri)
        try:
            with filesystem.open(path, "rb") as handle:
                data = handle.read(MAX_MANIFEST_BYTES + 1)
        except FileNotFoundError as exc:
            folder = path.rsplit("/", 1)[0]
            if not (filesystem.exists(folder) or filesystem.isdir(folder)):
                raise StepNotCommittedError(_no_such_step(root, step)) from exc
            raise StepNotCommittedError(missing) from exc
        except (IsADirectoryError, NotADirectoryError) as exc:
            raise CheckpointCorruptError(missing) from exc
        except OSError as exc:  # a 403, an outage past gcsfs's retries: no damage
            raise unreadable(exc, f"{what} cannot be read", uri) from exc
    try:
        manifest = Manifest.from_bytes(data)
    except CheckpointFormatError as exc:
        raise exc.at(f"step {step} ({uri})", step) from None
    except CheckpointCorruptError as exc:
        raise CheckpointCorruptError(f"step {step} under {root}: {exc}") from None
    if manifest.step != step:
        raise CheckpointCorruptError(
            f"step {step} under {root}: its manifest says step {manifest.step}"
        )
    return manifest


def _mismatch(step: int, entry: FileEntry, size: int | None, crc: int | None, sha: Any) -> None:
    if size is not None and size != entry.size:
        raise CheckpointCorruptError(
            f"step {step}: file {entry.path} has {size} bytes, manifest says {entry.size}"
        )
    if entry.crc32c and crc is not None and crc32c_b64(crc) != entry.crc32c:
        raise CheckpointCorruptError(f"step {step}: file {entry.path} fails its crc32c check")
    if not entry.crc32c and sha is not None and sha.hexdigest() != entry.sha256:
        raise CheckpointCorruptError(f"step {step}: file {entry.path} fails its sha256 check")


def _read_checked(step: int, entry: FileEntry, handle: Any, keep: bool) -> Any:
    """Read a file whose size was already checked, hashing each chunk as it lands.

    Returns the content (a writable buffer) when ``keep``, else None (streamed, nothing kept).
    """
    use_crc = bool(entry.crc32c)
    crc = 0
    sha = None if use_crc else hashlib.sha256()  # None: the manifest gives a CRC32C
    buf = new_buffer(entry.size) if keep else bytearray(min(entry.size, CHUNK) or 1)
    view = memoryview(buf).cast("B")
    pos = 0
    while pos < entry.size:
        window = view[pos : pos + CHUNK] if keep else view[: min(CHUNK, entry.size - pos)]
        n = handle.readinto(window)
        if not n:
            break
        chunk = window[:n]
        if sha is None:
            crc = crc32c(chunk, crc)
        else:
            sha.update(chunk)
        pos += n
    extra = len(handle.read(1)) if pos == entry.size else 0  # longer than it was a moment ago
    _mismatch(step, entry, pos + extra, crc if use_crc else None, sha)
    return buf if keep else None


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
    local = fs.to_local_path(base)
    remote = stat_remote(base) if local is None else {}
    for entry in manifest.files:
        what = f"step {step}: file {entry.path}"
        if local is not None:
            path = fs.join(local, entry.path)
            fd = _open_local(path, what)
            try:
                _mismatch(step, entry, os.fstat(fd).st_size, None, None)  # before allocating
                if keep or check_hashes:
                    with open(fd, "rb", buffering=0, closefd=False) as handle:
                        out[entry.path] = _read_checked(step, entry, handle, keep)
            except OSError as exc:  # the file is open: an error of the storage, no damage
                raise unreadable(exc, f"{what} cannot be read", path) from exc
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
            except OSError as exc:  # a 403, an outage past gcsfs's retries: no damage
                raise unreadable(exc, f"{what} cannot be read", fs.join(base, entry.path)) from exc
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
        CheckpointFormatError: the step is in a newer format than this version reads.
        OSError: the storage failed to read a file that is there (permission denied, an I/O
            error): no damage, the error names the file.
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
        CheckpointFormatError: as for :func:`verify`.
        OSError: as for :func:`verify`.
    """
    return _check_step(root, step, check_hashes=True, keep=True, adapters=adapters)


def committed_steps(
    root: str, *, check_hashes: bool = False, newer: list[int] | None = None
) -> list[Manifest]:
    """Manifests of every committed step that verifies, oldest first.

    A step in a newer format is appended to ``newer`` where it is given (a listing, which shows
    it as such; never a reader that deletes), else raises.

    Raises:
        OSError: a file that is there cannot be read: which steps are committed is not known
            (retention then deletes nothing).
        CheckpointFormatError: a step is in a newer format than this version reads (and no
            ``newer`` list is given): which steps are committed is not known to it either.
    """
    out = []
    for step in list_steps(root):
        try:
            out.append(verify(root, step, check_hashes=check_hashes))
        except CheckpointCorruptError as exc:
            log.info("skipping checkpoint: %s", exc)
        except CheckpointFormatError:
            if newer is None:
                raise
            newer.append(step)
    return out


def latest(root: str, *, check_hashes: bool = True) -> Manifest | None:
    """The newest step under ``root`` whose manifest verifies, or None when there is none.

    Steps newer than it are skipped: one without its manifest yet (being written, here or by
    another process, or left by a writer that stopped) is logged at DEBUG; a damaged one (its
    manifest or a file fails its check) at WARNING, with the reason. A file that is there but
    cannot be read raises its ``OSError``: it is not known to be damaged. A step in a newer
    format raises :class:`CheckpointFormatError`: only a newer kfp-spot can tell.
    """
    return newest_of(root, lambda step: verify(root, step, check_hashes=check_hashes))


def newest_of(
    root: str,
    read: Callable[[int], T],
    *,
    skipping: str = "skipping checkpoint",
    logger: logging.Logger = log,
    uncommitted: int = logging.DEBUG,
) -> T | None:
    """``read(step)`` of the newest step under ``root`` it succeeds for, or None.

    ``read`` raises :class:`CheckpointCorruptError` for a step it cannot use: one without its
    manifest (:class:`StepNotCommittedError`) is logged at level ``uncommitted``, a damaged one
    at WARNING, each as ``<skipping>: <why>``. Against a writer whose ``keep_last`` deletes a step
    (its manifest first) right after committing a newer one, a reader can see the newer step
    before its commit and the older one after its removal: when every step fails and one of
    them was uncommitted or removed, the steps are listed again (at most :data:`_RELISTS`
    times). A file missing from a step whose manifest is gone by then is such a removal, not
    damage. An ``OSError`` of ``read`` (a file there that the storage cannot read) is raised:
    the step is not known to be damaged, and an older one is no substitute for it; so is a
    :class:`CheckpointFormatError` (a step written by a newer kfp-spot).
    """
    steps = list_steps(root)
    damaged: set[int] = set()
    told: set[int] = set()  # uncommitted steps logged once, however often they are listed
    for _ in range(_RELISTS + 1):
        gone = False
        for step in reversed(steps):
            if step in damaged:
                continue
            try:
                return read(step)
            except StepNotCommittedError as exc:
                logger.log(
                    uncommitted if step not in told else logging.DEBUG, "%s: %s", skipping, exc
                )
                told.add(step)
                gone = True
            except CheckpointCorruptError as exc:
                if _removed(root, step):
                    logger.debug("%s: removed while read: %s", skipping, exc)
                    gone = True
                else:
                    logger.warning("%s: %s", skipping, exc)
                    damaged.add(step)
        if not gone:
            return None
        steps = list_steps(root)
    return None


def _removed(root: str, step: int) -> bool:
    """Whether ``step`` has no manifest now (read after one of its files failed its check)."""
    try:
        read_manifest(root, step)
    except StepNotCommittedError:
        return True
    except CheckpointCorruptError:
        return False
    return False


_RELISTS = 3
"""How many times :func:`newest_of` lists again when a step it listed was uncommitted or removed."""
