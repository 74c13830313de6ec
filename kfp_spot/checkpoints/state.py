"""The state index: which file of a step holds each value of a training state, and its encoding.

A step written by :class:`~kfp_spot.trainer.CheckpointManager` carries, in its manifest's
metadata, ``"state"``: key -> ``{"file": <key><suffix>, "adapter": <name>}`` and
``"state_format"``: :data:`STATE_FORMAT`. The adapter names the decoder of the file; the suffix
is the adapter's. The built-in adapters' suffixes are data here (:data:`BUILTIN_SUFFIXES`): the
trainer's adapters take theirs from this table, and a reader that decodes nothing (the launcher,
the evaluator) checks a step against it without importing the trainer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from kfp_spot.checkpoints.manifest import CheckpointCorruptError, Manifest

STATE_FORMAT = 1
"""The version of the state index, written as the metadata's ``state_format``."""

STATE_FORMAT_KEY = "state_format"
"""The metadata key of :data:`STATE_FORMAT` (a number, never a metric)."""

BUILTIN_SUFFIXES: Mapping[str, str] = MappingProxyType(
    {
        "bytes": ".bin",
        "numpy": ".npy",
        "numpy-scalar": ".npy",
        "numpy-dict": ".npz",
        "numpy-generator": ".json",
        "numpy-random-state": ".json",
        "python-random": ".json",
        "safetensors": ".safetensors",
        "torch": ".pt",
        "sklearn": ".pkl",
        "json": ".json",
    }
)
"""Built-in adapter name -> the suffix of the files it writes."""

STATE_KEY_RULE = "a non-empty str without '/' that does not start with '.' or '_'"
_STATE_KEY_RE = re.compile(r"[^/._][^/]*")


def is_state_key(key: object) -> bool:
    """Whether ``key`` can name a value of a training state (and so, with a suffix, a file)."""
    return isinstance(key, str) and _STATE_KEY_RE.fullmatch(key) is not None


def check_state_index(manifest: Manifest, adapters: Mapping[str, str] | None = None) -> None:
    """Check the state index a :class:`~kfp_spot.trainer.CheckpointManager` step carries.

    The index must name every file of the step exactly once, with valid keys. With ``adapters``
    (adapter name -> file suffix, the decoders the reader allows) every adapter named must be
    allowed and each file must be ``<key><suffix>``. Without, the built-in adapters must still
    match their files (:data:`BUILTIN_SUFFIXES`); names it cannot know (adapters registered by
    the training code) are left to the reader that decodes. Steps written without an index (raw
    files) pass unless their metadata says an index was written.

    Raises:
        CheckpointCorruptError: naming the step and the problem.
    """
    where = f"step {manifest.step}"
    index = manifest.metadata.get("state")
    if index is None:
        if STATE_FORMAT_KEY in manifest.metadata:
            raise CheckpointCorruptError(f"{where}: the manifest's state index is missing")
        return
    if not isinstance(index, dict) or not index:
        raise CheckpointCorruptError(f"{where}: the manifest's state index is not a JSON object")
    files = {entry.path for entry in manifest.files}
    named: set[str] = set()
    for key, entry in index.items():
        if not is_state_key(key):
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
            suffix = BUILTIN_SUFFIXES.get(adapter)
        elif adapter in adapters:
            suffix = adapters[adapter]
        else:
            raise CheckpointCorruptError(
                f"{where}: state[{key!r}] needs adapter {adapter!r}, which this reader does "
                f"not allow (allowed: {', '.join(sorted(adapters))}); pickle-based adapters "
                "need allow_pickle=True, others must be registered before restoring"
            )
        if suffix is not None and name != key + suffix:
            raise CheckpointCorruptError(
                f"{where}: state[{key!r}] file {name!r} does not match its key and adapter "
                f"{adapter!r} (expected {key + suffix!r})"
            )
    if named != files:
        raise CheckpointCorruptError(
            f"{where}: the manifest lists files no state key names: {sorted(files - named)}"
        )
