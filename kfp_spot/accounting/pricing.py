"""What training time costs: the one place a price is turned into dollars.

Pure and light: the standard library and ``kfp_spot.machines`` (a CSV table) only, so the
emulator's billing, the launcher's job report and the run report all call the same functions.

The prices are estimates. On-demand rates come from a recorded table
(``kfp_spot/data/machines.csv``), not a quote; Spot rates are derived from Compute Engine's Spot
discounts, and Google states those only as a range ("60-91% off", changing up to daily). So a Spot
cost is shown as the table's figure, which is fixed and so compares runs fairly, together with
the range the same time would cost anywhere in that discount range (:func:`spot_range`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kfp_spot import machines

__all__ = [
    "SPOT_DISCOUNT_RANGE",
    "SPOT_PRICE_NOTE",
    "AttemptCost",
    "Pool",
    "Rates",
    "UnknownPriceError",
    "attempt_cost",
    "hourly_rates",
    "is_spot",
    "spot_range",
]

# Compute Engine's stated Spot discount off the on-demand price: at least 60%, at most 91%.
SPOT_DISCOUNT_RANGE = (0.60, 0.91)
SPOT_PRICE_NOTE = (
    "Spot prices are estimates (kfp_spot/data/machines.csv, from Compute Engine's Spot discounts); "
    "Google states Spot discounts of 60-91% off on-demand, changing up to daily. Use the figures "
    "to compare runs, not to forecast a bill."
)
# Costs are kept to the micro-dollar: an emulated attempt costs fractions of a cent.
_DIGITS = 6


class UnknownPriceError(ValueError):
    """A machine type the price table does not know (the message names it)."""


@dataclass(frozen=True)
class Pool:
    """Machines of one worker pool: what one attempt bills for, per replica."""

    machine_type: str
    accelerator_type: str = ""  # AcceleratorType name, "" for none
    accelerator_count: int = 0
    replica_count: int = 1


@dataclass(frozen=True)
class Rates:
    """USD per hour of a whole attempt (every replica of every pool)."""

    spot_usd_per_hour: float
    on_demand_usd_per_hour: float


@dataclass(frozen=True)
class AttemptCost:
    """What one attempt's billable time costs.

    Attributes:
        spot_usd: the time at the (estimated) Spot rate.
        on_demand_usd: the same time at the on-demand rate.
        paid_usd: what the attempt's strategy pays: the Spot figure for SPOT, on-demand otherwise.
        savings_usd: ``on_demand_usd - paid_usd``.
        spot: whether ``paid_usd`` is at the Spot rate (and so an estimate within a range).
    """

    spot_usd: float
    on_demand_usd: float
    paid_usd: float
    savings_usd: float
    spot: bool

    def to_ledger(self) -> dict[str, float]:
        """The ledger's cost fields (camelCase, as the emulator's ``/attempts`` rows carry them)."""
        return {
            "spotCost": self.spot_usd,
            "onDemandCost": self.on_demand_usd,
            "cost": self.paid_usd,
            "savings": self.savings_usd,
        }


def is_spot(strategy: str) -> bool:
    """Whether ``strategy`` (a ``Scheduling.Strategy`` name) runs on Spot VMs.

    Every other strategy (STANDARD, FLEX_START, ON_DEMAND, STRATEGY_UNSPECIFIED, ...) is priced
    on demand: kfp-spot has no separate price table for Flex-start.
    """
    return str(strategy).strip().upper() == "SPOT"


def hourly_rates(pools: Iterable[Pool]) -> Rates:
    """The Spot and on-demand USD per hour of a job's machines.

    Each pool costs its machine type plus separately billed accelerators, times its replicas
    (``kfp_spot.machines.hourly_price``). Pools with no replicas cost nothing.

    Raises:
        UnknownPriceError: a machine type the table does not know, or an accelerator it has no
            price for (``machines.unpriced``): such a pool is never priced as if it cost less.
    """
    spot = on_demand = 0.0
    for pool in pools:
        if pool.replica_count <= 0:
            continue
        args = (pool.machine_type, pool.accelerator_type, pool.accelerator_count)
        problem = machines.unpriced(*args)
        if problem is not None:
            raise UnknownPriceError(problem)
        spot += machines.hourly_price(*args, spot=True) * pool.replica_count
        on_demand += machines.hourly_price(*args, spot=False) * pool.replica_count
    return Rates(spot, on_demand)


def attempt_cost(billable_seconds: float, rates: Rates, strategy: str) -> AttemptCost:
    """Price ``billable_seconds`` of one attempt at ``rates`` under ``strategy``.

    Each figure is rounded to the micro-dollar first, so ``savings_usd`` is exactly
    ``on_demand_usd - paid_usd`` of the rounded figures and rows add up.

    Args:
        billable_seconds: the attempt's RUNNING time (queued and preempted time is free).
        rates: the job's hourly rates (:func:`hourly_rates`).
        strategy: the ``Scheduling.Strategy`` name the attempt ran under.
    """
    hours = max(0.0, float(billable_seconds)) / 3600.0
    spot_usd = round(rates.spot_usd_per_hour * hours, _DIGITS)
    on_demand_usd = round(rates.on_demand_usd_per_hour * hours, _DIGITS)
    spot = is_spot(strategy)
    paid = spot_usd if spot else on_demand_usd
    return AttemptCost(
        spot_usd=spot_usd,
        on_demand_usd=on_demand_usd,
        paid_usd=paid,
        savings_usd=round(on_demand_usd - paid, _DIGITS),
        spot=spot,
    )


def spot_range(on_demand_usd: float) -> tuple[float, float]:
    """What time costing ``on_demand_usd`` on demand costs on Spot, across the stated discounts.

    Returns:
        (lowest, highest): at 91% and at 60% off.
    """
    low_discount, high_discount = SPOT_DISCOUNT_RANGE
    return on_demand_usd * (1.0 - high_discount), on_demand_usd * (1.0 - low_discount)
