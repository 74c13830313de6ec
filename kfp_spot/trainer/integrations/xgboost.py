"""XGBoost: a ``TrainingCallback`` that makes ``xgboost.train`` survive Spot preemption.

::

    import xgboost as xgb
    from kfp_spot.trainer.integrations.xgboost import SpotCheckpoint

    spot = SpotCheckpoint(num_boost_round=500, interval="25")      # root: $AIP_CHECKPOINT_DIR
    booster = xgb.train(params, dtrain, num_boost_round=spot.remaining_rounds,
                        xgb_model=spot.booster, callbacks=[spot])

``spot.booster`` is the booster of the newest committed step (None on a fresh start) and
``spot.remaining_rounds`` the rounds still to train, so the same lines start and resume. A step is
a boosting round; each step holds ``booster.ubj`` (XGBoost's own binary model format: load it with
``xgb.Booster(model_file=...)``) and ``rounds.json``. On the preemption notice the callback saves
the round that just finished and stops training; by default the process then exits with status
143. When training ends normally the final booster is committed as the last step.

A resumed run ends with the same booster, bit for bit, as an uninterrupted one when the rounds
draw no random numbers (``subsample``, ``colsample_*`` and ``sampling_method`` at their defaults):
XGBoost seeds its generator when a model is loaded, so with row or column sampling the rounds
after a resume sample differently than an uninterrupted run would (a valid model, not the same
one; the callback warns).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

from kfp_spot.checkpoints.numeric import whole_number
from kfp_spot.trainer import adapters
from kfp_spot.trainer.integrations._common import Hooks, SpotCallback, missing_framework

try:
    import xgboost
except ImportError as exc:  # the training package brings its own XGBoost
    raise missing_framework("xgboost", "XGBoost", exc) from None
from kfp_spot.trainer.interval import SaveInterval
from kfp_spot.trainer.manager import CheckpointManager

log = logging.getLogger(__name__)

BOOSTER_FILE = "booster.ubj"
"""The booster file of a step (``xgb.Booster(model_file=step_dir/BOOSTER_FILE)``)."""

_SAMPLING = ("subsample", "colsample_bytree", "colsample_bylevel", "colsample_bynode")


def _sampling(params: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> list[str]:
    """The row/column sampling parameters below 1 in ``params``, as ``xgb.train`` takes them.

    A dict or a list of pairs; a value of None is unset, as XGBoost reads it (the scikit-learn
    API's ``get_xgb_params()`` gives None for every parameter left at its default), and a value
    that is not a number is XGBoost's to refuse.
    """
    pairs = params.items() if isinstance(params, Mapping) else (params or ())
    found = []
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or pair[0] not in _SAMPLING:
            continue
        try:
            below = float(pair[1]) < 1.0
        except (TypeError, ValueError):
            continue
        if below and pair[0] not in found:
            found.append(pair[0])
    return found


def _register_adapter() -> None:
    try:
        adapters.get("xgboost-booster")
    except adapters.StateEncodingError:
        adapters.register(
            adapters.Adapter(
                "xgboost-booster",
                ".ubj",
                lambda v: isinstance(v, xgboost.Booster),
                lambda b: bytes(b.save_raw("ubj")),
                lambda data: xgboost.Booster(model_file=bytearray(data)),
            )
        )


_register_adapter()


def _last_metrics(evals_log: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    out = {}
    for data_name, metrics in (evals_log or {}).items():
        for metric, history in metrics.items():
            value = history[-1] if history else None
            if isinstance(value, tuple):  # (mean, std) in cv
                value = value[0]
            if isinstance(value, (int, float)) and math.isfinite(value):
                out[f"{data_name}-{metric}"] = float(value)
    return out


class SpotCheckpoint(SpotCallback, xgboost.callback.TrainingCallback):
    """Preemption-safe checkpoints for ``xgboost.train``: save on the notice, resume rounds.

    Args:
        num_boost_round: the rounds the whole training has (across attempts).
        root: checkpoint root (local path, ``file://`` or ``gs://``); default
            ``$AIP_CHECKPOINT_DIR``.
        interval: when to save besides the notice: ``"N"`` rounds, ``"30s"`` or ``"auto"``.
        keep_last: committed steps to keep.
        grace_period: seconds between the notice and SIGKILL; default: the job's
            (``$KFP_SPOT_GRACE_PERIOD``, which the emulator sets, else 30 s).
        mtbp: prior mean time between preemptions for ``interval="auto"``.
        on_preemption: cleanup callable(s) run after the save on a notice, time-boxed to the
            grace period left (errors logged, never raised).
        exit_on_preemption: after saving on a notice, leave the process with status 143 instead
            of returning the partial booster from ``xgb.train``.
        params: the training parameters (a dict or a list of pairs, as ``xgb.train`` takes
            them), to warn when row/column sampling makes a resumed run
            differ from an uninterrupted one.
        manager: a :class:`~kfp_spot.trainer.CheckpointManager` to use instead.

    Raises:
        ValueError: ``num_boost_round`` is not a positive int.
    """

    def __init__(
        self,
        num_boost_round: int,
        root: str | None = None,
        *,
        interval: str | int | SaveInterval = "auto",
        keep_last: int | None = 3,
        grace_period: float | None = None,
        mtbp: float | None = None,
        on_preemption: Hooks = None,
        exit_on_preemption: bool = True,
        params: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
        manager: CheckpointManager | None = None,
    ) -> None:
        super().__init__()
        rounds = whole_number(num_boost_round)
        if rounds is None or rounds < 1:
            raise ValueError(f"num_boost_round must be an int >= 1, got {num_boost_round!r}")
        self.num_boost_round = rounds
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
        self._restored = False
        self._booster: xgboost.Booster | None = None
        self._start_round = 0
        self._round = 0
        sampling = _sampling(params)
        if sampling:
            log.warning(
                "%s < 1: XGBoost samples differently after a resume, so a preempted run ends "
                "with a different (valid) booster than an uninterrupted one",
                "/".join(sampling),
            )

    def _restore(self) -> None:
        if self._restored:
            return
        self._restored = True
        restored = self.manager.restore()
        if restored is None:
            return
        rounds = int(restored.state["rounds"]["rounds"])
        if rounds > self.num_boost_round:
            raise ValueError(
                f"the newest checkpoint has {rounds} rounds, more than num_boost_round="
                f"{self.num_boost_round}; raise num_boost_round or use a new checkpoint directory"
            )
        self._booster = restored.state["booster"]
        self._start_round = self._round = rounds
        log.info("resuming xgboost.train after round %d of %d", rounds, self.num_boost_round)

    @property
    def booster(self) -> xgboost.Booster | None:
        """The booster of the newest committed step (pass it as ``xgb_model``), or None."""
        self._restore()
        return self._booster

    @property
    def remaining_rounds(self) -> int:
        """Rounds left to train (pass it as ``num_boost_round``)."""
        self._restore()
        return self.num_boost_round - self._start_round

    def before_training(self, model: xgboost.Booster) -> xgboost.Booster:  # noqa: D102
        self._restore()
        self.manager.start()
        return model

    def _state(self, model: xgboost.Booster) -> dict[str, Any]:
        return {"booster": model, "rounds": {"rounds": self._round}}

    def after_iteration(  # noqa: D102
        self, model: xgboost.Booster, epoch: int, evals_log: Mapping[str, Any]
    ) -> bool:
        self._round = self._start_round + epoch + 1
        return self._step_end(self._round, lambda: self._state(model), _last_metrics(evals_log))

    def after_training(self, model: xgboost.Booster) -> xgboost.Booster:  # noqa: D102
        self._end(self._round, lambda: self._state(model))
        return model
