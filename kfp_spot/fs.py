"""One way to reach files on local paths, ``file://`` and ``gs://`` (through fsspec/gcsfs).

Every module that touches checkpoints, packages or reports goes through here, so local runs and
Vertex runs share one code path.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import fsspec

# gcsfs probes a gRPC endpoint for hierarchical-namespace buckets on first use; against a GCS
# emulator that probe waits ~60 s per call. Set before gcsfs is imported (lazily, by fsspec),
# and only when the user has not chosen otherwise. Done on first use, not at import time.
_GCSFS_DEFAULTS = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}


def _prepare_gcs_env() -> None:
    for key, value in _GCSFS_DEFAULTS.items():
        os.environ.setdefault(key, value)


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


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of a local file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
