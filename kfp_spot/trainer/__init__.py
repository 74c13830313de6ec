"""What training code imports to survive Spot preemption.

- :class:`CheckpointManager`: atomic checkpoints (files, then a manifest), exact restore that
  skips torn steps, retention, async saves, a save on the preemption notice, attempt records.
- :class:`PreemptionNotice`: SIGTERM becomes a flag the loop polls (chained to earlier handlers).
- :class:`SaveInterval`: every N steps, every T seconds, or ``auto`` (Young-Daly).
- :mod:`kfp_spot.trainer.adapters`: how state values become files (bytes, NumPy, RNGs, torch,
  scikit-learn, JSON), with lazy imports.

This package imports neither kfp nor google-cloud-aiplatform: it runs inside training containers.
"""

from kfp_spot.checkpoints import CheckpointCorruptError, CheckpointError, Manifest
from kfp_spot.trainer.adapters import Adapter, StateEncodingError
from kfp_spot.trainer.attempts import AttemptRecorder
from kfp_spot.trainer.interval import SaveInterval, estimate_mtbp, young_daly
from kfp_spot.trainer.manager import (
    PREEMPTED_EXIT_CODE,
    CheckpointManager,
    Restored,
    is_chief,
    load_checkpoint,
)
from kfp_spot.trainer.preemption import DEFAULT_GRACE_PERIOD, PreemptionNotice

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "PREEMPTED_EXIT_CODE",
    "Adapter",
    "AttemptRecorder",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointManager",
    "Manifest",
    "PreemptionNotice",
    "Restored",
    "SaveInterval",
    "StateEncodingError",
    "estimate_mtbp",
    "is_chief",
    "load_checkpoint",
    "young_daly",
]
