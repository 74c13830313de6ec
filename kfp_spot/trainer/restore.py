"""Reading checkpoints back: verify a step, decode its state, fall back past torn steps."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kfp_spot import checkpoints, fs
from kfp_spot.checkpoints import CheckpointCorruptError, Manifest
from kfp_spot.trainer import adapters
from kfp_spot.trainer.adapters import StateEncodingError
from kfp_spot.trainer.outputs import expand_home

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Restored:
    """A checkpoint brought back.

    Attributes:
        step: the step it captured.
        state: name -> value, decoded by the adapters that wrote them.
        manifest: its verified manifest (``manifest.metadata["metrics"]`` holds saved metrics).
        path: its step directory.
    """

    step: int
    state: dict[str, Any]
    manifest: Manifest
    path: str

    @property
    def metrics(self) -> dict[str, Any]:
        """The metrics saved with the checkpoint."""
        return dict(self.manifest.metadata.get("metrics") or {})

    def __getitem__(self, key: object) -> Any:
        """Not the state: Python said only "'Restored' object is not subscriptable".

        ``load_checkpoint(path)["w"]`` or ``(manager.restore() or initial)["step"]`` reads as if
        it were, and failed so first in a resumed attempt; the error says where the values are.

        Raises:
            TypeError: always, naming ``.state[key]`` and ``.step``.
        """
        names = sorted(map(repr, self.state))
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        raise TypeError(
            f"a Restored checkpoint is not its state: read restored.state[{key!r}] (the values "
            f"saved at step {self.step}: {shown or 'none'}) and restored.step"
        )


def decode_step(root: str, step: int, *, allow_pickle: bool) -> Restored:
    """Verify and decode one step; any problem with it is a CheckpointCorruptError."""
    # The reader, not the checkpoint, decides which decoders may run.
    allowed = adapters.allowed(allow_pickle=allow_pickle)
    manifest, files = checkpoints.read_verified(root, step, adapters=allowed)
    index = manifest.metadata.get("state")
    if isinstance(index, Mapping):
        try:
            state = adapters.decode_state(files.__getitem__, index)
        except StateEncodingError as exc:
            raise CheckpointCorruptError(f"step {step} under {root}: {exc}") from exc
        if set(state) != set(index):  # decode_state returns one value per key; never less
            raise CheckpointCorruptError(f"step {step} under {root}: state keys differ")
    else:  # written with checkpoints.write_step directly: hand back the raw files
        state = dict(files)
    return Restored(step, state, manifest, checkpoints.step_dir(root, step))


def newest_verified(root: str, *, allow_pickle: bool) -> Restored | None:
    """The newest step under ``root`` that verifies and decodes, or None when none does.

    A step with any problem is skipped and the next older one is tried: a step that was never
    committed (no manifest: an earlier attempt stopped while writing it) with an INFO line, a
    damaged one with a warning that says why. A file that cannot be read raises its ``OSError``,
    a step in a newer format a :class:`~kfp_spot.checkpoints.CheckpointFormatError`: no older
    step is restored in their place.
    """
    return checkpoints.newest_of(
        root,
        lambda step: decode_step(root, step, allow_pickle=allow_pickle),
        skipping="not restoring checkpoint",
        logger=log,
        uncommitted=logging.INFO,
    )


def load_checkpoint(path: str, *, allow_pickle: bool = False) -> Restored:
    """Load and verify one checkpoint step directory (``<root>/step-<n>``).

    Args:
        path: the step directory, local (a leading ``~`` is the home directory) or ``gs://``
            (through the Cloud Storage FUSE mount where its bucket is mounted).
        allow_pickle: allow pickle-based adapters (scikit-learn); unpickling runs code named by
            the checkpoint, so only for checkpoints nobody else can write.

    Raises:
        ValueError: ``path`` is not a step directory.
        CheckpointCorruptError: it is torn, damaged or needs a decoder that is not allowed.
        CheckpointFormatError: it is in a newer format than this kfp-spot-trainer reads.
        OSError: a file of it is there but cannot be read (permission denied, an I/O error).
    """
    # gs:// through the /gcs mount where it exists, as every root: the VM's wheel has no gcsfs
    root, step = checkpoints.parse_step_dir(fs.mounted_path(expand_home(os.fspath(path), "path")))
    return decode_step(root, step, allow_pickle=allow_pickle)
