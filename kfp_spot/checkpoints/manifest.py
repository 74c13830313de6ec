"""The manifest: the sealed commit record of one checkpoint step, and its checks.

``manifest.json`` lists every file of a step with its size and CRC32C, and is **sealed**: its
last field is the sha256 of the bytes before it, so a manifest that was cut, garbled or edited is
refused before a single field is read. Every field is then checked for type and range. Manifests
of the first format (sha256 per file, no seal) still parse.

A manifest in a newer format (``kfp-spot-checkpoint/N`` for an N this version does not know,
written by a newer kfp-spot) is no damage: it raises :class:`CheckpointFormatError`, which no
reader skips and no retention deletes. Every format keeps the seal as the last field, so a
manifest that fails its seal is damage whatever format it names; one that parses as a whole and
names a newer format was written by a newer version. Any other format (missing, not a string,
not kfp-spot's, or a kfp-spot number this version knows nothing of below its own) is damage.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "kfp-spot-checkpoint/2"
LEGACY_MANIFEST_FORMAT = "kfp-spot-checkpoint/1"  # sha256 per file, no seal: still restores
READ_FORMATS = (LEGACY_MANIFEST_FORMAT, MANIFEST_FORMAT)
"""The manifest formats this version reads, oldest first."""
_FORMAT_RE = re.compile(r"kfp-spot-checkpoint/([1-9][0-9]{0,8})")
_NEWEST = int(MANIFEST_FORMAT.rsplit("/", 1)[1])
MAX_MANIFEST_BYTES = 16 << 20
"""A manifest larger than this is refused unread (they hold names, sizes and small metadata)."""
MAX_FILE_BYTES = 1 << 48
_SEAL_KEY = "manifest_sha256"
_SEAL_RE = re.compile(rb',\n "manifest_sha256": "([0-9a-f]{64})"\n\}\n?\Z')
_CRC_RE = re.compile(r"^[A-Za-z0-9+/]{6}==$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")


class CheckpointError(Exception):
    """A checkpoint cannot be used; the message says which one and why."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint step exists but is torn, damaged or not allowed; the message says why."""


class CheckpointFormatError(CheckpointError):
    """A committed step in a manifest format newer than this version reads: no damage.

    Not a :class:`CheckpointCorruptError`: readers of the newest step do not skip it (an older
    step is no substitute for it) and retention deletes nothing while it is there. The message
    names the step, its manifest file, the format found, the formats this version reads and the
    fix (a kfp-spot that reads it).

    Attributes:
        found: the format the manifest names.
        step: the step, where the reader knows it (else None).
    """

    def __init__(self, found: str, *, where: str = "", step: int | None = None) -> None:
        self.found = found
        self.step = step
        self.where = where
        reads = ", ".join(READ_FORMATS)
        super().__init__(
            f"{where + ': ' if where else ''}written in checkpoint format {found!r}, newer than "
            f"this kfp-spot reads ({reads}): upgrade kfp-spot (and kfp-spot-trainer where the "
            "training runs) to a version that reads it; the step is kept, and no older step is "
            "used in its place"
        )

    def at(self, where: str, step: int) -> CheckpointFormatError:
        """The same error, saying which step and manifest file it is."""
        return CheckpointFormatError(self.found, where=where, step=step)


def newer_format(fmt: object) -> bool:
    """Whether ``fmt`` names a kfp-spot manifest format newer than any this version reads."""
    match = _FORMAT_RE.fullmatch(fmt) if isinstance(fmt, str) else None
    return match is not None and int(match.group(1)) > _NEWEST


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

        A manifest that passes its seal (where it has one), parses, and names a newer kfp-spot
        format raises :class:`CheckpointFormatError` instead; its other fields are not read.
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
        elif newer_format(fmt):
            raise CheckpointFormatError(str(fmt))
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


def check_name(name: object) -> str | None:
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
    problem = check_name(path)
    if problem or not isinstance(path, str):
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


def files_of(manifest: Manifest) -> Iterable[str]:
    """The relative file names a manifest lists."""
    return (entry.path for entry in manifest.files)
