"""What training code imports to survive Spot preemption.

- :class:`CheckpointManager`: atomic checkpoints (files, then a manifest), exact restore that
  skips torn steps, retention, async saves, a save on the preemption notice, attempt records.
- :class:`PreemptionNotice`: SIGTERM becomes a flag the loop polls (chained to earlier handlers).
- :class:`SaveInterval`: every N steps, every T seconds, or ``auto`` (Young-Daly);
  :func:`interval_argument` checks a ``--checkpoint-every`` option.
- :func:`output_dirs` / :func:`add_output_dir_arguments` + :func:`resolve_output_dirs`: the
  checkpoint and model directories from ``--checkpoint-dir``/``--model-dir`` or Vertex AI's
  ``$AIP_CHECKPOINT_DIR``/``$AIP_MODEL_DIR``; ``gs://`` through the ``/gcs`` mount where it exists
  (as every root kfp_spot.trainer takes: no gcsfs needed on a Vertex AI VM).
- :mod:`kfp_spot.trainer.adapters`: how state values become files (bytes, NumPy, RNGs, torch,
  scikit-learn, JSON), with lazy imports.

This package imports neither kfp nor google-cloud-aiplatform: it runs inside training containers.
"""

from kfp_spot.checkpoints import CheckpointCorruptError, CheckpointError, Manifest
from kfp_spot.trainer.adapters import Adapter, StateEncodingError
from kfp_spot.trainer.attempts import AttemptRecorder
from kfp_spot.trainer.interval import SaveInterval, estimate_mtbp, interval_argument, young_daly
from kfp_spot.trainer.manager import PREEMPTED_EXIT_CODE, CheckpointManager
from kfp_spot.trainer.outputs import (
    OutputDirs,
    add_output_dir_arguments,
    output_dirs,
    resolve_output_dirs,
)
from kfp_spot.trainer.preemption import DEFAULT_GRACE_PERIOD, PreemptionNotice
from kfp_spot.trainer.restore import Restored, load_checkpoint
from kfp_spot.trainer.writer import is_chief

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "PREEMPTED_EXIT_CODE",
    "Adapter",
    "AttemptRecorder",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointManager",
    "Manifest",
    "OutputDirs",
    "PreemptionNotice",
    "Restored",
    "SaveInterval",
    "StateEncodingError",
    "add_output_dir_arguments",
    "estimate_mtbp",
    "interval_argument",
    "is_chief",
    "load_checkpoint",
    "output_dirs",
    "resolve_output_dirs",
    "young_daly",
]
