"""When to save: every N steps, every T seconds, or ``auto`` (Young-Daly).

Young's first-order optimum for the time between checkpoints is ``sqrt(2·C·M)``, where ``C`` is the
cost of one checkpoint (the training time it stalls) and ``M`` the mean time between failures —
here, between preemptions. ``auto`` measures ``C`` on every save and estimates ``M`` from the
run's own attempt records, so the interval adapts as the run learns how often it is preempted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from kfp_spot.checkpoints.attempts import AttemptRecord, ExitReason
from kfp_spot.checkpoints.numeric import real_number, whole_number

DEFAULT_MTBP: float | None = None
"""No prior: before any preemption is seen, ``auto`` takes the run's own exposure so far."""
MIN_MTBP = 1.0
"""The smallest mean time between preemptions ``auto`` assumes (s)."""

_MTBP_RULE = "mtbp must be a number of seconds > 0 (e.g. 3600) or None, got {!r}"


def _is_seconds(value: object) -> bool:
    """Whether ``value`` is a finite number of seconds > 0 (not a bool, not a string)."""
    number = real_number(value)
    return number is not None and math.isfinite(number) and number > 0


_SECONDS_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)\s*$")
_UNIT = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def young_daly(cost: float, mtbp: float) -> float:
    """Young-Daly checkpoint interval ``sqrt(2·cost·mtbp)`` in seconds.

    Args:
        cost: seconds one checkpoint costs the training loop (> 0).
        mtbp: mean seconds between preemptions (> 0).

    Raises:
        ValueError: a value is not positive.
    """
    if not cost > 0 or not mtbp > 0:
        raise ValueError(f"cost and mtbp must be > 0 seconds, got cost={cost!r}, mtbp={mtbp!r}")
    return math.sqrt(2.0 * cost * mtbp)


def estimate_mtbp(
    records: Iterable[AttemptRecord],
    *,
    prior: float | None = DEFAULT_MTBP,
    current_exposure: float = 0.0,
) -> float:
    """Estimate the mean time between preemptions from attempt records.

    Each attempt contributes its running time (exposure): from its start to its end, or for an
    attempt killed without notice (no end written) to its last heartbeat (``updated_time``). An
    attempt that ended ``preempted``, or never wrote an end, counts as one preemption. With
    preemptions seen, the estimate is the exponential model's maximum-likelihood one, exposure
    divided by preemptions (the running attempt counts as exposure, not as a preemption).

    With none seen yet, the maximum-likelihood estimate is unbounded, and any fixed prior is
    wrong by orders of magnitude for some run (an hour leaves a run preempted every few seconds
    unprotected). Without a hint the estimate is then twice the exposure so far, ``M = 2t``: the
    interval grows as ``sqrt(2·C·M) = 2·sqrt(C·t)``, so a run preempted early has saved often and
    one that is not spaces its saves out. Two is the factor that minimises the waste before the
    first preemption whatever ``C`` and the true rate: with ``M = k·t``, saving costs
    ``C·sqrt(2t/(k·C))`` up to time ``t`` and a preemption then loses half an interval,
    ``sqrt(2·k·C·t)/2``; the sum ``sqrt(2·C·t)·(1/sqrt(k) + sqrt(k)/2)`` is smallest at ``k = 2``.
    It is also the posterior mean under Jeffreys' prior for the rate. The first preemption seen
    replaces it with the estimate above. A hint (``prior``) is used instead until the exposure
    exceeds it.

    Args:
        records: this run's attempt records (:func:`kfp_spot.checkpoints.read_attempt_records`).
        prior: a hint for the mean time between preemptions (s, > 0), or None.
        current_exposure: seconds the current attempt has run (not in ``records``).
    """
    if prior is not None and not prior > 0:
        raise ValueError(f"prior must be > 0 seconds, got {prior!r}")
    exposure = max(0.0, current_exposure)
    preemptions = 0
    for record in records:
        end = record.end_time if record.end_time is not None else record.updated_time
        if end is not None and end > record.start_time:
            exposure += end - record.start_time
        reason = record.exit_reason
        if reason is ExitReason.PREEMPTED or (reason is None and record.end_time is None):
            preemptions += 1
    if preemptions == 0:
        return max(prior, exposure) if prior else max(2.0 * exposure, MIN_MTBP)
    return max(exposure / preemptions, MIN_MTBP)


@dataclass
class SaveInterval:
    """A checkpoint schedule.

    Use :meth:`parse` for user input: ``"100"`` (every 100 steps), ``"30s"``/``"5m"`` (every T
    seconds) or ``"auto"``.

    Attributes:
        steps: save when the step number is a multiple of this (aligned to absolute steps, so a
            resumed run saves at the same steps as an uninterrupted one).
        seconds: save when this many seconds have passed since the last save.
        auto: Young-Daly from the measured save cost and the estimated mean time between
            preemptions.
        mtbp: a hint for the mean time between preemptions for ``auto`` (None: learn it).
        min_seconds: ``auto`` never saves more often than this.
    """

    steps: int | None = None
    seconds: float | None = None
    auto: bool = False
    mtbp: float | None = DEFAULT_MTBP
    min_seconds: float = 0.0

    def __post_init__(self) -> None:
        chosen = sum([self.steps is not None, self.seconds is not None, self.auto])
        if chosen != 1:
            raise ValueError("choose exactly one of steps=N, seconds=T or auto=True for a schedule")
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise ValueError(f"steps must be an int >= 1, got {self.steps!r}")
        if self.seconds is not None and not self.seconds > 0:
            raise ValueError(f"seconds must be > 0, got {self.seconds!r}")
        if self.mtbp is not None and not _is_seconds(self.mtbp):
            raise ValueError(_MTBP_RULE.format(self.mtbp))

    @classmethod
    def parse(cls, spec: str | int | SaveInterval, *, mtbp: float | None = None) -> SaveInterval:
        """Parse ``"N"`` (steps), ``"Ts"``/``"Tm"``/``"Th"`` (seconds) or ``"auto"``.

        Raises:
            ValueError: naming the spec and the valid forms.
        """
        if isinstance(spec, SaveInterval):
            return spec
        if mtbp is not None and not _is_seconds(mtbp):
            raise ValueError(_MTBP_RULE.format(mtbp))
        hint = None if mtbp is None else float(mtbp)
        steps = whole_number(spec)
        if steps is not None:
            if steps >= 1:
                return cls(steps=steps, mtbp=hint)
            text = ""  # 0 or fewer steps: refused below, naming the interval
        else:
            text = str(spec).strip().lower()
        if text == "auto":
            return cls(auto=True, mtbp=hint)
        if text.isdecimal() and int(text) >= 1:  # isdigit() takes "²", which int() refuses
            return cls(steps=int(text), mtbp=hint)
        match = _SECONDS_RE.fullmatch(text)
        if match and float(match.group(1)) > 0:
            return cls(seconds=float(match.group(1)) * _UNIT[match.group(2)], mtbp=hint)
        raise ValueError(
            f"checkpoint interval {spec!r} is not valid: use a number of steps (e.g. 100), "
            "a duration (e.g. 30s, 5m, 1h) or 'auto'"
        )

    def describe(self) -> str:
        """A short human description."""
        if self.steps is not None:
            return f"every {self.steps} steps"
        if self.seconds is not None:
            return f"every {self.seconds:g} s"
        if self.mtbp is None:
            return "auto (Young-Daly, MTBP learned from this run)"
        return f"auto (Young-Daly, MTBP hint {self.mtbp:g} s)"


def interval_argument(text: str) -> str:
    """An argparse ``type=`` for a ``--checkpoint-every`` option: ``text`` if it is an interval.

    ``parser.add_argument("--checkpoint-every", type=interval_argument, default="auto")``: a bad
    value is a usage error (exit 2) naming the valid forms, before any training starts.

    Raises:
        argparse.ArgumentTypeError: ``text`` is not a valid :meth:`SaveInterval.parse` spec.
    """
    try:
        SaveInterval.parse(text)
    except ValueError as exc:
        import argparse  # only command lines need it; importing kfp_spot.trainer stays light

        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


class IntervalPolicy:
    """Decides, step by step, whether a save is due; learns the save cost and preemption rate.

    Args:
        interval: the schedule.
        records: attempt records of earlier attempts of this run (for ``auto``).
        now: the current time (s, any clock that :meth:`due` is later called with).
    """

    def __init__(
        self,
        interval: SaveInterval,
        records: Iterable[AttemptRecord] = (),
        *,
        now: float = 0.0,
    ) -> None:
        self.interval = interval
        self._records = list(records)
        self._attempt_start = now
        self._last_save = now
        # smoothed stall per save; an earlier attempt's measurement saves measuring it again
        self._cost: float | None = None
        for record in reversed(self._records):
            if record.save_stall_seconds_mean is not None:
                self._cost = record.save_stall_seconds_mean
                break
        self._write: float = 0.0  # last background write duration (async saves)
        self._saves = 0

    @property
    def save_cost(self) -> float | None:
        """Smoothed seconds one save stalls the loop, once measured."""
        return self._cost

    def mtbp(self, now: float) -> float:
        """The current estimate of the mean time between preemptions (s)."""
        return estimate_mtbp(
            self._records,
            prior=self.interval.mtbp,
            current_exposure=now - self._attempt_start,
        )

    def target_seconds(self, now: float) -> float | None:
        """Seconds between saves that ``auto`` aims for now (None until a save was measured)."""
        if self._cost is None:
            return None
        target = young_daly(max(self._cost, 1e-6), self.mtbp(now))
        return max(target, self._write, self.interval.min_seconds)

    def due(self, step: int, now: float) -> bool:
        """Whether a save is due after ``step`` completed at time ``now``."""
        if self.interval.steps is not None:
            return step % self.interval.steps == 0
        if self.interval.seconds is not None:
            return now - self._last_save >= self.interval.seconds
        target = self.target_seconds(now)
        if target is None:
            return True  # save once early to measure what a save costs
        return now - self._last_save >= target

    def record_save(self, stall: float, now: float, *, write: float | None = None) -> None:
        """Record a save that stalled the loop ``stall`` s and finished at ``now``.

        Args:
            stall: seconds the training loop waited.
            now: when the loop resumed.
            write: for async saves, how long the background write took.
        """
        stall = max(0.0, stall)
        self._cost = stall if self._cost is None else 0.7 * self._cost + 0.3 * stall
        if write is not None:
            self._write = max(0.0, write)
        self._last_save = now
        self._saves += 1

    def record_failure(self, now: float) -> None:
        """Record a save that failed at ``now``: the next one is due an interval later."""
        self._last_save = now
