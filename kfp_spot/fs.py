"""One way to reach files on local paths, ``file://`` and ``gs://`` (through fsspec/gcsfs).

Every module that touches checkpoints, packages or reports goes through here, so local runs and
Vertex runs share one code path.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # fsspec costs ~100 ms to import; local-path callers (the trainer) never need it
    import fsspec

# gcsfs probes a gRPC endpoint for hierarchical-namespace buckets on first use; against a GCS
# emulator that probe waits ~60 s per call. Set before gcsfs is imported (lazily, by fsspec),
# and only when the user has not chosen otherwise. Done on first use, not at import time.
_GCSFS_DEFAULTS = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}


def _prepare_gcs_env() -> None:
    for key, value in _GCSFS_DEFAULTS.items():
        os.environ.setdefault(key, value)


# A URI scheme written without its "//" (gs:/BUCKET/PATH, gs:BUCKET, "gs://" stripped of its
# slashes): as a local path it is a relative one whose first directory is named "gs:". A scheme
# has two characters or more here: one letter and a colon is a Windows drive (C:/Users/me/ckpt).
_SCHEME_WITHOUT_SLASHES = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):(?!//)")


def scheme_without_slashes(uri: str) -> str | None:
    """The scheme of ``uri`` when it is written without its ``//`` (``gs`` for ``gs:/b/x``).

    None for a Windows drive (``C:/data``, ``D:data``): a local path.
    """
    match = _SCHEME_WITHOUT_SLASHES.match(uri)
    return match.group(1) if match else None


def scheme_typo(uri: str) -> str | None:
    """Why ``uri`` is neither a URI nor a path (``gs:/b/x``), for an error message; else None.

    Read as a local path it would become a folder named ``gs:`` in the working directory.
    """
    scheme = scheme_without_slashes(uri)
    if scheme is None:
        return None
    return f"is not a URI ({scheme}: without '//') nor a local path one would write"


def is_remote(uri: str) -> bool:
    """Whether ``uri`` names an object store (``gs://``) rather than a local path."""
    return "://" in uri and not uri.startswith("file://")


def filesystem(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """Return the filesystem for ``uri`` and the path inside it.

    Args:
        uri: a local path, ``file://`` URL or ``gs://`` URI.

    Returns:
        ``(fs, path)`` where ``path`` is what ``fs`` methods take.
    """
    import fsspec

    if uri.startswith("gs://"):
        _prepare_gcs_env()
        kwargs: dict[str, Any] = {}
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            # gcsfs reads the emulator host itself; anonymous access needs no credentials.
            kwargs["token"] = "anon"
        fs = fsspec.filesystem("gs", **kwargs)
        return fs, uri[len("gs://") :]
    if uri.startswith("file://"):
        return fsspec.filesystem("file"), uri[len("file://") :]
    return fsspec.filesystem("file"), os.path.abspath(uri)


def list_names(uri: str, timeout: float | None = None) -> list[str]:
    """The names of the entries of the directory ``uri``.

    Args:
        uri: a local path, ``file://`` URL or ``gs://`` URI.
        timeout: give up a remote listing after this many seconds, retries included (gcsfs
            retries a refused connection for ~30 s); None waits as long as gcsfs does.

    Raises:
        FileNotFoundError, NotADirectoryError: no such directory.
        OSError: the storage could not be reached.
        asyncio.TimeoutError: (``fsspec.FSTimeoutError``) no answer within ``timeout``.
    """
    from fsspec.asyn import AsyncFileSystem, sync

    fs, path = filesystem(uri)
    if isinstance(fs, AsyncFileSystem):
        entries = sync(fs.loop, fs._ls, path, detail=False, timeout=timeout)
    else:
        entries = fs.ls(path, detail=False)
    if [str(p).rstrip("/") for p in entries] == [path.rstrip("/")]:
        # fsspec lists a file as itself: a model "directory" that is its model.joblib passed
        # as holding one file named like it.
        raise NotADirectoryError(f"{uri} is a file, not a directory")
    return [str(p).rstrip("/").rsplit("/", 1)[-1] for p in entries]


def join(base: str, *parts: str) -> str:
    """Join path segments onto a local path or URI with ``/``."""
    out = base.rstrip("/")
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out


def to_local_path(uri: str) -> str | None:
    """The local path behind ``uri``, or None when it is remote.

    ``/gcs/bucket/...`` (Vertex's GCS FUSE mount) counts as local; so does ``file://``.
    """
    if uri.startswith("file://"):
        return uri[len("file://") :]
    if is_remote(uri):
        return None
    return os.path.abspath(uri)


GCS_MOUNT_ROOT = "/gcs"
"""Where Vertex AI mounts Cloud Storage on training VMs (read when :func:`mounted_path` runs)."""


def mounted_path(uri: str, mount_root: str | None = None) -> str:
    """The Cloud Storage FUSE path of a ``gs://`` URI where its bucket is mounted, else ``uri``.

    Vertex AI training VMs mount Cloud Storage at ``/gcs`` (``gs://BUCKET/p`` is
    ``/gcs/BUCKET/p``), so training code reaches its checkpoints and model directory with plain
    file operations and needs no Cloud Storage client library (gcsfs) on the VM. Where no mount
    exists (a laptop, the emulator, a component) the URI comes back unchanged and fsspec/gcsfs
    serve it as before.

    Args:
        uri: a ``gs://`` URI; anything else is returned as is.
        mount_root: where buckets are mounted (default :data:`GCS_MOUNT_ROOT`, ``/gcs``).

    Returns:
        ``<mount_root>/<bucket>/<path>`` when ``<mount_root>/<bucket>`` is a directory, else
        ``uri``.
    """
    if not uri.startswith("gs://"):
        return uri
    bucket, _, rest = uri[len("gs://") :].partition("/")
    if not bucket or ".." in (bucket, *rest.split("/")) or bucket == ".":
        return uri  # a name FUSE would resolve elsewhere: leave it to the client library
    mounted = os.path.join(GCS_MOUNT_ROOT if mount_root is None else mount_root, bucket)
    if not os.path.isdir(mounted):
        return uri
    return os.path.join(mounted, rest) if rest else mounted


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of a local file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def keep_copies(
    parent: str | os.PathLike[str], key: str, files: Sequence[str | os.PathLike[str]]
) -> None:
    """Copy local ``files`` into the directory ``parent/key``, which appears whole or not at all.

    The copies go into a temp directory beside it, renamed into place; an entry that exists
    already (another process stored the same key first) is left as it is. A cache's entries.

    Raises:
        OSError: the storage failed; no entry was made.
    """
    import shutil
    import tempfile

    entry = os.path.join(parent, key)
    if os.path.exists(entry):
        return
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=parent)
    try:
        for path in files:
            shutil.copyfile(path, os.path.join(tmp, os.path.basename(path)))
        with contextlib.suppress(OSError):  # fails when another process stored it first: fine
            os.replace(tmp, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # a directory that cannot be opened (some platforms): nothing to sync
        return
    try:
        with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory
            os.fsync(fd)
    finally:
        os.close(fd)


_TEMP_PREFIX, _TEMP_SUFFIX = ".", ".tmp"  # atomic_write's temp file: .<name>.<unique>.tmp


def is_atomic_temp(name: str, target: str) -> bool:
    """Whether the file ``name`` is a temp file :func:`atomic_write` makes for file ``target``."""
    return name.startswith(f"{_TEMP_PREFIX}{target}.") and name.endswith(_TEMP_SUFFIX)


def atomic_write(
    uri: str, data: bytes | bytearray | memoryview | str, *, sync: bool = True
) -> None:
    """Write ``data`` to ``uri`` so that readers see the old content or the new, never a mix.

    Local paths (and ``file://``): a temp file with a name unique to this process and thread in the
    same directory, flushed and fsync'ed, renamed over the target, then the directory fsync'ed (so
    the rename survives a power cut). Two writers never share a temp file. ``gs://``: one object
    upload, which Cloud Storage makes visible whole or not at all.

    Args:
        uri: a local path, ``file://`` URL or ``gs://`` URI; parent directories are created.
        data: bytes, or text (written as UTF-8).
        sync: fsync the file and its directory (local paths only); False for scratch files where
            speed matters more than surviving a power cut.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    local = to_local_path(uri)
    if local is None:
        filesystem_, path = filesystem(uri)
        with filesystem_.open(path, "wb") as handle:
            handle.write(payload)
        return
    directory = os.path.dirname(local) or "."
    os.makedirs(directory, exist_ok=True)
    name = os.path.basename(local)
    tmp = os.path.join(
        directory,
        f"{_TEMP_PREFIX}{name}.{os.getpid()}.{threading.get_ident()}.{os.urandom(4).hex()}"
        f"{_TEMP_SUFFIX}",
    )
    try:
        with open(tmp, "wb") as handle:
            handle.write(payload)
            if sync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, local)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync:
        _fsync_dir(directory)
