"""Keras 3: a callback that makes ``model.fit`` survive Spot preemption.

::

    from kfp_spot.trainer.integrations.keras import SpotCheckpoint

    model.fit(x, y, epochs=20, callbacks=[SpotCheckpoint(interval="50")])  # $AIP_CHECKPOINT_DIR

What it does that ``keras.callbacks.BackupAndRestore`` does not:

- **saves on the preemption notice**, in the middle of an epoch: SIGTERM becomes a save after the
  batch that is running, then ``fit`` stops (and, by default, the process exits with status 143 so
  Vertex AI restarts it);
- **resumes in the middle of an epoch**, exactly: the epoch's data order (the NumPy generator that
  ``fit`` shuffles with), the optimizer, the dropout seed generators and the metrics are restored,
  and the batches of the epoch already trained are replayed without keeping their updates (Keras'
  ``fit`` cannot start an epoch part-way), so a resumed run ends with the same weights as one that
  was never interrupted;
- **keeps the last K** committed steps (BackupAndRestore keeps one, overwritten in place: a crash in
  the middle of that write loses it), each committed atomically under a manifest;
- **verifies** a step (sizes and sha256) before loading it, skipping a torn one;
- writes attempt records and runs ``on_preemption`` cleanup hooks after the save.

Each step holds ``model.weights.h5`` (Keras' own weights format: layers and optimizer; load it with
``model.load_weights``), ``keras_state.npz`` (what that file leaves out: seed generators and
metrics), ``position.json`` (epoch, batch, step) and ``epoch_rng.json`` (NumPy's global generator
at the start of the epoch).

Exact mid-epoch resume needs an epoch's data order to be reproducible: NumPy arrays with
``shuffle=True`` (the default) are, through the saved generator; a ``keras.utils.PyDataset`` or a
``tf.data`` pipeline must derive its order from the epoch number (or not shuffle). Anything else
resumes from the right weights with a different data order.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from kfp_spot.trainer import adapters
from kfp_spot.trainer.integrations._common import Hooks, SpotCallback, missing_framework
from kfp_spot.trainer.interval import SaveInterval
from kfp_spot.trainer.manager import CheckpointManager

_BACKENDS = ("jax", "torch", "tensorflow")
"""The Keras 3 backends that train (KERAS_BACKEND values)."""


def _unavailable(exc: ImportError) -> ImportError:
    """Why ``import keras`` failed, in one line: no Keras, or a backend that is not installed."""
    import importlib.util

    def installed(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a module blocked or half-imported: not usable
            return False

    if not installed("keras"):
        return missing_framework("keras", "Keras 3", exc)
    backends = [name for name in _BACKENDS if installed(name)]
    choices = ", ".join(backends) or "none is: install jax, torch or tensorflow"
    return ImportError(
        f"Keras cannot load its backend ({exc}). Keras 3 uses TensorFlow unless the "
        "KERAS_BACKEND environment variable (or ~/.keras/keras.json) names another: set "
        f"KERAS_BACKEND to an installed one ({choices}) before keras is first imported, e.g. "
        "in the job's environment variables or at the top of your task module"
    )


try:
    import keras
except ImportError as exc:  # no Keras, or the backend Keras chose is not installed
    raise _unavailable(exc) from None

log = logging.getLogger(__name__)

WEIGHTS_FILE = "model.weights.h5"
"""The Keras weights file of a step (``model.load_weights(step_dir/WEIGHTS_FILE)``)."""


class _Weights:
    """A model whose weights are to be written in Keras' own ``.weights.h5`` format."""

    def __init__(self, model: keras.Model) -> None:
        self.model = model


def _encode_weights(value: _Weights) -> bytes:
    with tempfile.TemporaryDirectory(prefix="kfp-spot-keras-") as tmp:
        path = os.path.join(tmp, WEIGHTS_FILE)
        value.model.save_weights(path)
        with open(path, "rb") as handle:
            return handle.read()


def _register_adapter() -> None:
    try:
        adapters.get("keras-weights")
    except adapters.StateEncodingError:
        adapters.register(
            adapters.Adapter(
                "keras-weights",
                ".weights.h5",
                lambda v: isinstance(v, _Weights),
                _encode_weights,
                bytes,  # restored as the file's bytes; load_weights reads them from a file
            )
        )


_register_adapter()


def _build_optimizer(model: keras.Model) -> None:
    # The weights file holds the optimizer's variables too; an optimizer not built yet has none
    # to load them into (Keras then warns "Skipping variable loading for optimizer").
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)


def load_weights(model: keras.Model, data: bytes) -> None:
    """Load Keras ``.weights.h5`` bytes into ``model`` (building its optimizer first)."""
    _build_optimizer(model)
    with tempfile.TemporaryDirectory(prefix="kfp-spot-keras-") as tmp:
        path = os.path.join(tmp, WEIGHTS_FILE)
        with open(path, "wb") as handle:
            handle.write(data)
        model.load_weights(path)


def load_step(model: keras.Model, step_dir: str) -> None:
    """Load the weights of a committed step (``<root>/step-<n>``) into ``model``, for evaluation.

    ``model`` is built as in training (same layers). Compiled, its optimizer is built first so
    the optimizer's saved variables load without Keras' "Skipping variable loading for
    optimizer" warning; not compiled (inference only), the file's optimizer part is ignored.

    Raises:
        ValueError: ``step_dir`` holds no ``model.weights.h5`` (not a step of this callback).
    """
    path = os.path.join(step_dir, WEIGHTS_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"{step_dir} has no {WEIGHTS_FILE}: not a step of SpotCheckpoint")
    _build_optimizer(model)
    model.load_weights(path)


def _numpy(variable: Any) -> np.ndarray:
    """A copy of a variable's value, on any backend (a torch CPU tensor would share memory)."""
    return np.array(keras.ops.convert_to_numpy(variable))


def _unique(variables: Iterable[Any]) -> list[Any]:
    seen: set[int] = set()
    out = []
    for v in variables:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def _extra_variables(model: keras.Model) -> list[Any]:
    """State the weights file leaves out: seed generators (dropout) and metric accumulators."""
    in_file = {id(v) for v in model.weights}
    return _unique(
        [v for v in model.variables if id(v) not in in_file] + list(model.metrics_variables)
    )


def _all_variables(model: keras.Model) -> list[Any]:
    optimizer = list(model.optimizer.variables) if model.optimizer is not None else []
    return _unique([*model.variables, *optimizer, *model.metrics_variables])


def _metrics(logs: Mapping[str, Any] | None) -> dict[str, float]:
    out = {}
    for name, value in (logs or {}).items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            out[str(name)] = number
    return out


class SpotCheckpoint(SpotCallback, keras.callbacks.Callback):  # type: ignore[misc]  # keras ships no types
    """Preemption-safe checkpoints for ``model.fit``: save on the notice, resume mid-epoch.

    Add it to ``callbacks`` and nothing else changes: a fresh run starts from scratch, a
    restarted one resumes from the newest committed step. The model must be compiled (and is
    built by ``fit`` before training starts).

    A step is one batch (``steps_per_execution`` batches count as that many steps), numbered
    from the start of training, so ``interval="100"`` saves every 100 batches.

    Args:
        root: checkpoint root (local path, ``file://`` or ``gs://``); default
            ``$AIP_CHECKPOINT_DIR``.
        interval: when to save besides the notice: ``"N"`` batches, ``"30s"``, or ``"auto"``
            (Young-Daly from the measured save time and the run's preemption rate).
        keep_last: committed steps to keep.
        grace_period: seconds between the notice and SIGKILL; default: the job's
            (``$KFP_SPOT_GRACE_PERIOD``, which the emulator sets, else 30 s).
        mtbp: prior mean time between preemptions for ``interval="auto"``.
        on_preemption: cleanup callable(s) run after the save on a notice, time-boxed to the
            grace period left (errors logged, never raised); more with ``on_preemption()``.
        exit_on_preemption: after saving on a notice, leave the process with status 143 (what
            Vertex AI expects of a preempted replica) instead of returning from ``fit``.
        manager: a :class:`~kfp_spot.trainer.CheckpointManager` to use instead of building one
            from the arguments above.

    Attributes:
        manager: the checkpoint manager (notice, saves, attempt records).
        preempted: whether training stopped on a preemption notice.
        resumed_step: the step restored at the start of ``fit`` (None on a fresh start).
    """

    def __init__(
        self,
        root: str | None = None,
        *,
        interval: str | int | SaveInterval = "auto",
        keep_last: int | None = 3,
        grace_period: float | None = None,
        mtbp: float | None = None,
        on_preemption: Hooks = None,
        exit_on_preemption: bool = True,
        manager: CheckpointManager | None = None,
    ) -> None:
        super().__init__()
        self._setup_spot(
            manager,
            on_preemption,
            exit_on_preemption,
            root=root,
            interval=interval,
            keep_last=keep_last,
            grace_period=grace_period,
            mtbp=mtbp,
        )
        self.resumed_step: int | None = None
        self._step = 0
        self._epoch = 0
        self._epoch_base = 0
        self._epoch_rng: Any = None
        self._resume_epoch: int | None = None
        self._resume_rng: Any = None
        self._skip = 0
        self._snapshot: list[tuple[Any, np.ndarray]] | None = None

    # -- restore ---------------------------------------------------------------------------
    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:  # noqa: D102
        model = self.model
        restored = self.manager.restore()
        if restored is not None:
            load_weights(model, bytes(restored.state["model"]))
            extras = _extra_variables(model)
            saved = restored.state["keras_state"]
            for i, var in enumerate(extras):
                value = saved.get(f"{i:04d}")
                if value is None or tuple(value.shape) != tuple(var.shape):
                    raise ValueError(
                        f"checkpoint step {restored.step} does not match this model: variable "
                        f"{var.path} {tuple(var.shape)} is not in it as saved; use a new "
                        "checkpoint directory for a changed model"
                    )
                var.assign(value)
            position = restored.state["position"]
            self._resume_epoch = int(position["epoch"])
            self._skip = int(position["batch"])
            self._resume_rng = restored.state["epoch_rng"].get_state()
            self._step = self.resumed_step = int(position["step"])
            self._epoch_base = self._step - self._skip
            # Keras' fit starts at model._initial_epoch (BackupAndRestore uses it too).
            model._initial_epoch = self._resume_epoch
            if self._skip:
                # What the replayed batches change is put back when they are done.
                self._snapshot = [(v, _numpy(v)) for v in _all_variables(model)]
            log.info(
                "resuming fit from step %d: epoch %d, after batch %d",
                self._step,
                self._resume_epoch,
                self._skip,
            )
        self.manager.start()

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:  # noqa: D102
        self._epoch = epoch
        if self._resume_epoch is not None and epoch == self._resume_epoch:
            np.random.set_state(self._resume_rng)  # the epoch's shuffle, as it was drawn
            self._resume_rng = None
        else:
            self._epoch_base = self._step
        self._epoch_rng = np.random.get_state()

    # -- save ------------------------------------------------------------------------------
    def _steps_per_epoch(self) -> int | None:
        steps = (self.params or {}).get("steps")
        return int(steps) if isinstance(steps, int) and steps > 0 else None

    def _state(self, done: int) -> dict[str, Any]:
        model = self.model
        spe = self._steps_per_epoch()
        if spe is not None and done >= spe:  # the epoch is over: resume at the next one
            epoch, batch, rng = self._epoch + 1, 0, np.random.get_state()
        else:
            epoch, batch, rng = self._epoch, done, self._epoch_rng
        generator = np.random.RandomState()
        generator.set_state(rng)
        return {
            "model": _Weights(model),
            "keras_state": {f"{i:04d}": _numpy(v) for i, v in enumerate(_extra_variables(model))},
            "position": {"epoch": epoch, "batch": batch, "step": self._step},
            "epoch_rng": generator,
        }

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:  # noqa: D102
        done = batch + 1  # batches of this epoch trained (``batch`` is the last one's index)
        if self._skip and self._epoch == self._resume_epoch:
            if done < self._skip:
                return
            _ = self.model  # on JAX this syncs the running state into the variables, and makes
            # the next batch read them back: so the assignments below are what it trains on
            for var, value in self._snapshot or ():  # the checkpoint's state, exactly
                var.assign(value)
            self._snapshot = None
            self._skip = 0
            return
        self._step = self._epoch_base + done
        if self._step_end(self._step, lambda: self._state(done), _metrics(logs)):
            self.model.stop_training = True

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:  # noqa: D102
        self.model._initial_epoch = None  # a later fit() starts where its arguments say
        done = self._step - self._epoch_base
        self._end(self._step, lambda: self._state(done))
