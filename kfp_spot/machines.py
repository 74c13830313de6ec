"""Machine types and accelerators Vertex AI training offers, with their hourly prices.

The table lives in ``kfp_spot/data/machines.csv`` (its header notes the source, region and date of
the prices). The validator uses it to reject unknown machine types and inconsistent accelerators;
the emulator uses it to bill each attempt at the Spot and the on-demand price.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from dataclasses import dataclass
from importlib import resources

__all__ = [
    "Accelerator",
    "MachineType",
    "accelerator",
    "accelerators",
    "hourly_price",
    "machine_type",
    "machine_types",
    "price_region",
]

# Accelerator types that only exist as multi-host TPU Pod slices.
TPU_POD_ACCELERATORS = frozenset({"TPU_V4_POD"})
# TPU v2/v3 single devices have 8 cores; larger counts are Pod slices.
TPU_DEVICE_CORES = 8


@dataclass(frozen=True)
class MachineType:
    """One machine type.

    Attributes:
        name: the Vertex machine type, e.g. ``n1-standard-4``.
        vcpus: virtual CPUs.
        memory_gb: memory in GB.
        on_demand_usd_per_hour: list price per hour, built-in accelerators included.
        spot_usd_per_hour: Spot price per hour, built-in accelerators included.
        accelerator_type: the GPU or TPU built into the type (a2, g2, a3, ct5lp), or ``""``.
        accelerator_count: how many of them (0 when none is built in).
    """

    name: str
    vcpus: int
    memory_gb: float
    on_demand_usd_per_hour: float
    spot_usd_per_hour: float
    accelerator_type: str = ""
    accelerator_count: int = 0

    @property
    def family(self) -> str:
        """The machine family, e.g. ``n1`` for ``n1-standard-4``."""
        return self.name.split("-", 1)[0]


@dataclass(frozen=True)
class Accelerator:
    """An accelerator attached to a machine and billed per unit.

    Attributes:
        name: the ``AcceleratorType`` enum name, e.g. ``NVIDIA_TESLA_T4``.
        on_demand_usd_per_hour: list price per accelerator per hour.
        spot_usd_per_hour: Spot price per accelerator per hour.
        allowed_counts: the counts per machine Vertex accepts.
    """

    name: str
    on_demand_usd_per_hour: float
    spot_usd_per_hour: float
    allowed_counts: tuple[int, ...]

    @property
    def attaches_to(self) -> str:
        """The machine family this accelerator attaches to (``n1`` or ``cloud-tpu``)."""
        return "cloud-tpu" if self.name.startswith("TPU_") else "n1"


@functools.lru_cache(maxsize=1)
def price_region() -> str:
    """The one region whose prices the table holds (its header's ``# Region:`` line).

    kfp-spot has no other region's prices: every region is priced with this table.
    """
    text = resources.files("kfp_spot").joinpath("data/machines.csv").read_text()
    found = re.search(r"^# Region: ([a-z0-9-]+)", text, re.MULTILINE)
    if found is None:  # pragma: no cover - guards the data file's header
        raise ValueError("machines.csv: the header names no '# Region:'")
    return found.group(1)


@functools.lru_cache(maxsize=1)
def _load() -> tuple[dict[str, MachineType], dict[str, Accelerator]]:
    text = resources.files("kfp_spot").joinpath("data/machines.csv").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    machines: dict[str, MachineType] = {}
    accs: dict[str, Accelerator] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if row["kind"] == "machine":
            machines[row["name"]] = MachineType(
                name=row["name"],
                vcpus=int(row["vcpus"]),
                memory_gb=float(row["memory_gb"]),
                on_demand_usd_per_hour=float(row["on_demand_usd_per_hour"]),
                spot_usd_per_hour=float(row["spot_usd_per_hour"]),
                accelerator_type=row["accelerator_type"],
                accelerator_count=int(row["accelerator_count"] or 0),
            )
        elif row["kind"] == "accelerator":
            accs[row["name"]] = Accelerator(
                name=row["name"],
                on_demand_usd_per_hour=float(row["on_demand_usd_per_hour"]),
                spot_usd_per_hour=float(row["spot_usd_per_hour"]),
                allowed_counts=tuple(int(c) for c in row["allowed_counts"].split("|")),
            )
        else:  # pragma: no cover - guards the data file against typos
            raise ValueError(f"machines.csv: unknown kind {row['kind']!r} for {row['name']!r}")
    return machines, accs


def machine_types() -> dict[str, MachineType]:
    """All known machine types by name."""
    return dict(_load()[0])


def accelerators() -> dict[str, Accelerator]:
    """All separately billed accelerators by ``AcceleratorType`` name."""
    return dict(_load()[1])


def machine_type(name: str) -> MachineType | None:
    """The machine type called ``name``, or None when the table does not know it."""
    return _load()[0].get(name)


def accelerator(name: str) -> Accelerator | None:
    """The separately billed accelerator called ``name``, or None."""
    return _load()[1].get(name)


def unpriced(machine: str, accelerator_type: str = "", accelerator_count: int = 0) -> str | None:
    """What the table cannot price of one replica (for a message), or None when it prices it all.

    :func:`hourly_price` adds nothing for an accelerator the table lacks, and a machine priced
    per accelerator (``cloud-tpu``) costs nothing alone: priced so, a TPU v4 Pod slice or a GPU
    missing from the table would show a cost too low, down to zero.
    """
    mt = machine_type(machine)
    if mt is None:
        return f"no price for machine type {machine!r}"
    if mt.accelerator_type:  # built in: its price is the machine's
        return None
    attached = accelerator_count > 0 and bool(accelerator_type)
    if attached and accelerator(accelerator_type) is None:
        return f"no price for accelerator {accelerator_type!r} (on {machine})"
    if not attached and mt.on_demand_usd_per_hour == 0:
        return (
            f"no price for machine type {machine!r} without accelerators (priced per accelerator)"
        )
    return None


def hourly_price(
    machine: str, accelerator_type: str = "", accelerator_count: int = 0, *, spot: bool
) -> float:
    """Price per hour of one replica: the machine plus separately billed accelerators.

    Accelerators built into the machine type (a2, g2, a3, ct5lp) are part of its price and are
    not added again.

    Args:
        machine: machine type name.
        accelerator_type: ``AcceleratorType`` name or ``""``.
        accelerator_count: accelerators per replica.
        spot: the Spot price when True, the on-demand price otherwise.

    Returns:
        USD per hour.

    Raises:
        ValueError: the machine type is not in the table.
    """
    mt = machine_type(machine)
    if mt is None:
        raise ValueError(f"unknown machine type {machine!r}")
    price = mt.spot_usd_per_hour if spot else mt.on_demand_usd_per_hour
    acc = accelerator(accelerator_type) if accelerator_type else None
    if acc is not None and accelerator_count > 0 and not mt.accelerator_type:
        unit = acc.spot_usd_per_hour if spot else acc.on_demand_usd_per_hour
        price += unit * accelerator_count
    return price
