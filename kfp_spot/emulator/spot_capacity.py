"""Spot capacity per region and machine type: the table a test or a user sets, and its lookup.

A region (a Vertex AI location) has Spot capacity for every machine type unless told otherwise.
:meth:`SpotCapacity.set` records one setting for ``(location, machine_type)`` (``"*"``: every
machine type of the location): whether Spot VMs are available, for how long (``seconds``; None:
for good) and how Vertex answers a Spot job while there are none (``refusal``: ``STOCKOUT``, the
create is accepted and the job waits for VMs; ``QUOTA``, the create is refused with 429). A later
setting replaces an earlier one of the same key; a setting of the machine type wins over the
location's ``"*"``; a setting whose time is over is gone (the next one down decides, else the
region has capacity again).

Pure: no I/O, no threads; the clock is an argument (``now``) of every read, and a listener
(:meth:`SpotCapacity.subscribe`) is told of every change so the scheduler can act on it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kfp_spot import machines
from kfp_spot.vertex.regions import check_region
from kfp_spot.vertex.values import InvalidValueError

ANY_MACHINE = "*"
STOCKOUT = "STOCKOUT"
QUOTA = "QUOTA"
REFUSALS = (STOCKOUT, QUOTA)


class SpotCapacityError(ValueError):
    """A bad argument to :meth:`SpotCapacity.set`; ``argument`` names it (Python's name)."""

    def __init__(self, argument: str, reason: str) -> None:
        super().__init__(f"{argument}: {reason}")
        self.argument = argument
        self.reason = reason


@dataclass(frozen=True)
class CapacitySetting:
    """One row of the table.

    Attributes:
        location: the Vertex AI region.
        machine_type: a machine type, or ``"*"`` for every one of the location.
        available: whether Spot VMs can be had.
        until: epoch seconds when the setting ends (None: for good).
        refusal: ``STOCKOUT`` or ``QUOTA``: how a Spot job is answered while unavailable.
    """

    location: str
    machine_type: str
    available: bool
    until: float | None
    refusal: str

    def active(self, now: float) -> bool:
        """Whether the setting still holds at ``now``."""
        return self.until is None or now < self.until

    def to_json(self) -> dict[str, Any]:
        """The REST form of the row.

        ``location``, ``machineType``, ``available``, ``until`` (RFC 3339 UTC; absent: for
        good), ``refusal``.
        """
        row: dict[str, Any] = {
            "location": self.location,
            "machineType": self.machine_type,
            "available": self.available,
        }
        if self.until is not None:
            row["until"] = (
                datetime.fromtimestamp(self.until, tz=timezone.utc)
                .isoformat(timespec="milliseconds")
                .replace("+00:00", "Z")
            )
        row["refusal"] = self.refusal
        return row


def check_setting(
    location: Any, machine_type: Any, available: Any, seconds: Any, refusal: Any
) -> tuple[str, str, bool, float | None, str]:
    """The arguments of :meth:`SpotCapacity.set`, checked.

    Raises:
        SpotCapacityError: naming the argument and what would be valid.
    """
    try:
        check_region(location)
    except InvalidValueError as err:
        raise SpotCapacityError("location", str(err)) from None
    if not isinstance(machine_type, str) or (
        machine_type != ANY_MACHINE and machines.machine_type(machine_type) is None
    ):
        raise SpotCapacityError(
            "machine_type",
            f"{machine_type!r} is not a machine type the emulator knows; give one of "
            "kfp_spot/data/machines.csv (e.g. 'n1-standard-4') or '*' for every machine type",
        )
    if not isinstance(available, bool):
        raise SpotCapacityError(
            "available", f"must be true or false (a boolean), got {available!r}"
        )
    if seconds is not None:
        number = seconds if not isinstance(seconds, bool) else None
        if not isinstance(number, (int, float)) or not math.isfinite(number) or number <= 0:
            raise SpotCapacityError(
                "seconds",
                f"must be a finite number of seconds > 0, or None for good, got {seconds!r}",
            )
        seconds = float(number)
    if refusal not in REFUSALS:
        raise SpotCapacityError("refusal", f"must be one of {', '.join(REFUSALS)}, got {refusal!r}")
    return location, machine_type, available, seconds, str(refusal)


class SpotCapacity:
    """Which regions and machine types have Spot capacity now (thread-safe).

    Args:
        clock: epoch seconds now (``time.time``); the start of a setting's ``seconds``.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, str], CapacitySetting] = {}
        self._listeners: list[Callable[[], None]] = []

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every change (it must not call back into the table's set)."""
        with self._lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener`` (one that was never subscribed is ignored)."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def set(
        self,
        location: str,
        machine_type: str = ANY_MACHINE,
        *,
        available: bool,
        seconds: float | None = None,
        refusal: str = STOCKOUT,
    ) -> CapacitySetting:
        """Record a setting (replacing the one of the same key); returns it.

        Raises:
            SpotCapacityError: a bad argument (a ``ValueError`` naming it).
        """
        location, machine_type, available, seconds, refusal = check_setting(
            location, machine_type, available, seconds, refusal
        )
        now = self._clock()
        row = CapacitySetting(
            location, machine_type, available, None if seconds is None else now + seconds, refusal
        )
        with self._lock:
            self._rows[(location, machine_type)] = row
            listeners = list(self._listeners)
        for listener in listeners:
            listener()
        return row

    def rows(self, now: float | None = None) -> list[CapacitySetting]:
        """The settings that still hold, by location then machine type (``"*"`` first)."""
        now = self._clock() if now is None else now
        with self._lock:
            for key in [k for k, r in self._rows.items() if not r.active(now)]:
                del self._rows[key]
            rows = list(self._rows.values())
        return sorted(
            rows, key=lambda r: (r.location, r.machine_type != ANY_MACHINE, r.machine_type)
        )

    def setting(
        self, location: str, machine_type: str, now: float | None = None
    ) -> CapacitySetting | None:
        """The setting that decides ``machine_type`` in ``location`` now (None: the default)."""
        now = self._clock() if now is None else now
        with self._lock:
            for key in ((location, machine_type), (location, ANY_MACHINE)):
                row = self._rows.get(key)
                if row is not None and row.active(now):
                    return row
        return None

    def refusal(
        self, location: str, machine_types: Iterable[str], now: float | None = None
    ) -> CapacitySetting | None:
        """The first setting that leaves one of ``machine_types`` without Spot VMs, or None."""
        now = self._clock() if now is None else now
        for machine_type in machine_types:
            row = self.setting(location, machine_type, now)
            if row is not None and not row.available:
                return row
        return None

    def next_change(self, now: float | None = None) -> float | None:
        """When the next timed setting ends (epoch seconds), None when none is timed."""
        now = self._clock() if now is None else now
        with self._lock:
            ends = [r.until for r in self._rows.values() if r.until is not None and r.until > now]
        return min(ends, default=None)

    def empty(self) -> bool:
        """Whether no setting was ever recorded (then every lookup answers None)."""
        with self._lock:
            return not self._rows


# What Vertex AI answers. The quota metric names are those Vertex's 429 names for custom training
# (``aiplatform.googleapis.com/custom_model_training_cpus``, ``..._nvidia_t4_gpus``, ...) and their
# Spot forms (``custom_model_training_preemptible_cpus``,
# ``custom_model_training_preemptible_nvidia_t4_gpus``), as quoted in public reports of the error;
# Google's quota page lists them, with no exhaustive list of accelerator spellings.
QUOTA_PREFIX = "The following quota metrics exceed quota limits: "
_METRIC = "aiplatform.googleapis.com/custom_model_training_preemptible_"


def quota_metrics(accelerator_types: Iterable[str]) -> list[str]:
    """The Spot quota metrics a job exceeds: its CPUs, and the GPUs or TPUs it attaches.

    Args:
        accelerator_types: the ``AcceleratorType`` names of the job's pools (``""`` for none).
    """
    metrics = [_METRIC + "cpus"]
    for name in accelerator_types:
        if not name:
            continue
        short = name.lower().replace("tesla_", "")
        if short.startswith("nvidia_h100"):  # NVIDIA_H100_80GB, NVIDIA_H100_MEGA_80GB
            short = short.removesuffix("_80gb")
        metric = _METRIC + (short + "_gpus" if short.startswith("nvidia_") else short)
        if metric not in metrics:
            metrics.append(metric)
    return metrics


def quota_message(accelerator_types: Iterable[str]) -> str:
    """Vertex AI's 429 RESOURCE_EXHAUSTED message for a Spot job over its quota."""
    return QUOTA_PREFIX + ", ".join(quota_metrics(accelerator_types))


def stockout_message(location: str) -> str:
    """Vertex AI's words for a job that found no VMs in its region (``error.code`` 8)."""
    return f"Resources are insufficient in region: {location}. Please try a different region."
