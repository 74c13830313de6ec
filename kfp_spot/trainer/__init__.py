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
Importing it imports nothing else: each public name loads its module the first time it is used
(``from kfp_spot.trainer import CheckpointManager`` loads the manager and what it needs), so a
process that only imports the package, or only one of its light names, pays for no more.
"""

# Not typing.TYPE_CHECKING: importing typing alone costs more than this whole module. Type
# checkers (and the light wheel's import closure) read a name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from kfp_spot.checkpoints import (
        CheckpointCorruptError,
        CheckpointError,
        CheckpointFormatError,
        Manifest,
    )
    from kfp_spot.trainer.adapters import Adapter, StateEncodingError
    from kfp_spot.trainer.attempts import AttemptRecorder
    from kfp_spot.trainer.interval import (
        SaveInterval,
        estimate_mtbp,
        interval_argument,
        young_daly,
    )
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

# Each public name -> the module that defines it (the imports above, as data).
_HOMES = {
    "CheckpointCorruptError": "kfp_spot.checkpoints",
    "CheckpointError": "kfp_spot.checkpoints",
    "CheckpointFormatError": "kfp_spot.checkpoints",
    "Manifest": "kfp_spot.checkpoints",
    "Adapter": "kfp_spot.trainer.adapters",
    "StateEncodingError": "kfp_spot.trainer.adapters",
    "AttemptRecorder": "kfp_spot.trainer.attempts",
    "SaveInterval": "kfp_spot.trainer.interval",
    "estimate_mtbp": "kfp_spot.trainer.interval",
    "interval_argument": "kfp_spot.trainer.interval",
    "young_daly": "kfp_spot.trainer.interval",
    "PREEMPTED_EXIT_CODE": "kfp_spot.trainer.manager",
    "CheckpointManager": "kfp_spot.trainer.manager",
    "OutputDirs": "kfp_spot.trainer.outputs",
    "add_output_dir_arguments": "kfp_spot.trainer.outputs",
    "output_dirs": "kfp_spot.trainer.outputs",
    "resolve_output_dirs": "kfp_spot.trainer.outputs",
    "DEFAULT_GRACE_PERIOD": "kfp_spot.trainer.preemption",
    "PreemptionNotice": "kfp_spot.trainer.preemption",
    "Restored": "kfp_spot.trainer.restore",
    "load_checkpoint": "kfp_spot.trainer.restore",
    "is_chief": "kfp_spot.trainer.writer",
}

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "PREEMPTED_EXIT_CODE",
    "Adapter",
    "AttemptRecorder",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointFormatError",
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


def __getattr__(name: str) -> object:
    """Load a public name from its module on first use (PEP 562); later uses find it here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the public ones not loaded yet included."""
    return sorted({*globals(), *__all__})
