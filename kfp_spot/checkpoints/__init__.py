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
file, no seal) still verify; one of a newer format than this version reads raises
:class:`CheckpointFormatError` (no damage: no reader falls back past it, no retention deletes it).

The modules, each imported here (``from kfp_spot.checkpoints import X`` works for every name):

- :mod:`~kfp_spot.checkpoints.manifest`: the manifest format, its seal and its checks;
- :mod:`~kfp_spot.checkpoints.state`: the state index (which file holds which value, decoded by
  which adapter) and the built-in adapters' file suffixes, as data;
- :mod:`~kfp_spot.checkpoints.checksum`: CRC32C at memory speed;
- :mod:`~kfp_spot.checkpoints.buffers`: page-aligned memory for the bytes read and written;
- :mod:`~kfp_spot.checkpoints.paths`: step directories and listings;
- :mod:`~kfp_spot.checkpoints.verify`: reading a step back, verified;
- :mod:`~kfp_spot.checkpoints.write`: writing and committing a step, deleting one;
- :mod:`~kfp_spot.checkpoints.ranking`: which way a recorded metric ranks steps (``rmse``:
  smaller is better), for ``keep_best`` and ``best:<metric>`` alike;
- :mod:`~kfp_spot.checkpoints.numeric`: what counts as a number a trainer gives (a step, a
  count, seconds): NumPy's scalars too, never a bool;
- :mod:`~kfp_spot.checkpoints.attempts`: attempt records (:class:`AttemptRecord`, the one
  definition the trainer writes and the launcher, reports and accounting read).

This package has no dependency on kfp or google-cloud-aiplatform: it runs inside training
containers (through :mod:`kfp_spot.trainer`) as well as in the launcher and the evaluator. It owns
every file of a checkpoint root and sits on the floor below the trainer: it never imports
:mod:`kfp_spot.trainer` (tests/test_layering.py), whose adapters register against its suffix
table and whose attempt recorder writes its :class:`AttemptRecord`. Local
paths never import fsspec.
"""

from kfp_spot.checkpoints.attempts import (
    ATTEMPT_FORMAT,
    ATTEMPTS_DIR,
    AttemptRecord,
    AttemptRecordError,
    ExitReason,
    commit_times,
    parse_attempt_records,
    read_attempt_records,
    write_attempt_record,
)
from kfp_spot.checkpoints.buffers import aligned_buffer, new_buffer
from kfp_spot.checkpoints.checksum import Hashed, crc32c, crc32c_b64
from kfp_spot.checkpoints.manifest import (
    LEGACY_MANIFEST_FORMAT,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    MAX_FILE_BYTES,
    MAX_MANIFEST_BYTES,
    READ_FORMATS,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointFormatError,
    FileEntry,
    Manifest,
    files_of,
    seal,
)
from kfp_spot.checkpoints.numeric import real_number, whole_number
from kfp_spot.checkpoints.paths import (
    explained_storage_error,
    list_steps,
    parse_step_dir,
    step_dir,
    storage_errors,
)
from kfp_spot.checkpoints.ranking import default_mode, smaller_is_better
from kfp_spot.checkpoints.state import (
    BUILTIN_SUFFIXES,
    STATE_FORMAT,
    STATE_FORMAT_KEY,
    STATE_KEY_RULE,
    check_state_index,
    is_state_key,
)
from kfp_spot.checkpoints.verify import (
    committed_steps,
    latest,
    newest_of,
    read_manifest,
    read_verified,
    verify,
)
from kfp_spot.checkpoints.write import (
    DIRECT_MIN_BYTES,
    Payload,
    commit_files,
    commit_manifest,
    delete_step,
    write_step,
)

__all__ = [
    "ATTEMPTS_DIR",
    "ATTEMPT_FORMAT",
    "BUILTIN_SUFFIXES",
    "DIRECT_MIN_BYTES",
    "LEGACY_MANIFEST_FORMAT",
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "MAX_FILE_BYTES",
    "MAX_MANIFEST_BYTES",
    "READ_FORMATS",
    "STATE_FORMAT",
    "STATE_FORMAT_KEY",
    "STATE_KEY_RULE",
    "AttemptRecord",
    "AttemptRecordError",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointFormatError",
    "ExitReason",
    "FileEntry",
    "Hashed",
    "Manifest",
    "Payload",
    "aligned_buffer",
    "check_state_index",
    "commit_files",
    "commit_manifest",
    "commit_times",
    "committed_steps",
    "crc32c",
    "crc32c_b64",
    "default_mode",
    "delete_step",
    "explained_storage_error",
    "files_of",
    "is_state_key",
    "latest",
    "list_steps",
    "new_buffer",
    "newest_of",
    "parse_attempt_records",
    "parse_step_dir",
    "read_attempt_records",
    "read_manifest",
    "read_verified",
    "real_number",
    "seal",
    "smaller_is_better",
    "step_dir",
    "storage_errors",
    "verify",
    "whole_number",
    "write_attempt_record",
    "write_step",
]
