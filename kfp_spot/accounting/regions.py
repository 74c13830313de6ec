"""Where a launch ran: attempts and costs per region, failovers, checkpoint copies, the baseline.

Pure: the accounting's attempts in, one :class:`RegionSummary` out, for the job report, the run
report and ``kfp-spot run``'s printout. Definitions (also in docs/reports.md):

- an attempt's **region** is its CustomJob's (``projects/P/locations/REGION/customJobs/ID``, or
  the launcher's record of where it submitted the job);
- the **home region** is the first region of the launch's order (where it starts, and where a
  launch without failover runs);
- a **failover** is a CustomJob submitted in another region than the one before it, of the same
  launch where the launches are known (a pipeline's launches side by side in several regions,
  a ``dsl.ParallelFor`` over regions, are no failover: each launch starts in its own region);
- the **home baseline** is the whole run's billable time at on-demand prices in the home region:
  what the same work would have cost without Spot and without leaving home;
- a **checkpoint copy** (the launcher copies the newest checkpoint into the next region's bucket
  before a job there, from the region of the job before it, and the newest step and the model
  back home at the end) costs its bytes at Cloud Storage's inter-region transfer price
  (``kfp_spot/data/transfer.csv``).

kfp-spot holds one region's machine prices (:func:`kfp_spot.machines.price_region`); every region
is priced with that table and every report says so (:data:`REGION_PRICE_NOTE`).
"""

from __future__ import annotations

import csv
import functools
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from kfp_spot import machines
from kfp_spot.accounting.model import Attempt, Costs, total_costs

_JOB_LOCATION = re.compile(r"projects/[^/]+/locations/([^/]+)/")
_GIB = 1024**3

# Cloud Storage's continents, by a region name's first word (every Vertex AI region's).
_CONTINENTS = {
    "us": "north-america",
    "northamerica": "north-america",
    "southamerica": "south-america",
    "europe": "europe",
    "asia": "asia",
    "me": "middle-east",
    "africa": "africa",
    "australia": "oceania",
}


def region_price_note() -> str:
    """What every per-region figure is priced with (the reports show it beside them)."""
    return (
        f"Every region is priced with kfp-spot's one price table, {machines.price_region()}'s "
        "(kfp_spot/data/machines.csv): kfp-spot holds no other region's prices, so per-region "
        "costs compare time, not regional price differences. Checkpoint copies are priced at "
        "Cloud Storage's inter-region transfer rates (kfp_spot/data/transfer.csv)."
    )


def region_of_job(job_name: str) -> str:
    """The region in a CustomJob's resource name; ``""`` when the name carries none."""
    found = _JOB_LOCATION.match(job_name)
    return found.group(1) if found else ""


def continent(region: str) -> str | None:
    """Cloud Storage's continent of ``region``; None for a name of no known continent."""
    return _CONTINENTS.get(region.split("-", 1)[0])


@functools.lru_cache(maxsize=1)
def _transfer_table() -> tuple[tuple[str, float], ...]:
    text = resources.files("kfp_spot").joinpath("data/transfer.csv").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    rows = csv.DictReader(io.StringIO("\n".join(lines)))
    return tuple((row["route"], float(row["usd_per_gib"])) for row in rows)


def transfer_prices() -> dict[str, float]:
    """USD per GiB by route (``kfp_spot/data/transfer.csv``, with its source and date)."""
    return dict(_transfer_table())


def transfer_route(source: str, destination: str) -> str | None:
    """The price table's route between two regions; None when a continent is unknown."""
    if source == destination:
        return "same-region"
    ends = (continent(source), continent(destination))
    if None in ends:
        return None
    if ends[0] == ends[1]:
        return "same-continent"
    return "intercontinental-oceania" if "oceania" in ends else "intercontinental"


@dataclass(frozen=True)
class Copy:
    """A checkpoint copied into another region's bucket before a job there."""

    source: str
    destination: str
    copied_bytes: int

    @property
    def usd(self) -> float | None:
        """Its estimated transfer cost; None when the route has no price."""
        route = transfer_route(self.source, self.destination)
        if route is None:
            return None
        return round(self.copied_bytes / _GIB * transfer_prices()[route], 6)

    def to_json(self) -> dict[str, Any]:
        """The copy as the reports' JSON lists it."""
        return {
            "from": self.source,
            "to": self.destination,
            "copied_bytes": self.copied_bytes,
            "route": transfer_route(self.source, self.destination),
            "cost_usd": self.usd,
        }


@dataclass(frozen=True)
class Failover:
    """The launch moving to another region: the first job there and the step it resumed from."""

    source: str
    destination: str
    job_name: str
    time: float | None = None  # when that job's first attempt started
    step: int | None = None  # the checkpoint step it resumed from, when known

    def describe(self) -> str:
        """``us-central1 → europe-west4 at step 40`` (the step when known)."""
        text = f"{self.source} → {self.destination}"
        return text if self.step is None else f"{text} at step {self.step}"


@dataclass(frozen=True)
class RegionCost:
    """One region's share of a launch."""

    region: str
    jobs: int
    attempts: int
    billable_seconds: float
    costs: Costs | None  # None when an attempt's price is unknown

    def to_json(self) -> dict[str, Any]:
        """The region's row in the reports' JSON."""
        c = self.costs
        return {
            "region": self.region,
            "jobs": self.jobs,
            "attempts": self.attempts,
            "billable_seconds": self.billable_seconds,
            "cost_usd": c.paid_usd if c else None,
            "cost_on_demand_usd": c.on_demand_usd if c else None,
        }


@dataclass(frozen=True)
class RegionSummary:
    """Every region a launch (or a run) used, in the order it first used them."""

    home: str
    regions: tuple[RegionCost, ...]
    failovers: tuple[Failover, ...] = ()
    copies: tuple[Copy, ...] = ()
    home_on_demand_usd: float | None = None

    @property
    def regions_used(self) -> int:
        """How many regions ran an attempt or a job."""
        return len(self.regions)

    @property
    def no_failover(self) -> str:
        """What a summary without failovers says instead, in the reports' words."""
        if self.regions_used < 2:
            return "every job ran in the home region"
        return "each launch ran in its own region"  # a pipeline's launches, side by side

    @property
    def copy_usd(self) -> float | None:
        """Σ checkpoint copy costs; None when a copy's route has no price."""
        costs = [c.usd for c in self.copies]
        if any(c is None for c in costs):
            return None
        return round(math.fsum(c for c in costs if c is not None), 6)

    def to_json(self) -> dict[str, Any]:
        """The per-region detail of the reports' JSON files."""
        return {
            "home_region": self.home,
            "regions_used": self.regions_used,
            "failovers": [
                {
                    "from": f.source,
                    "to": f.destination,
                    "job_name": f.job_name,
                    "time": f.time,
                    "step": f.step,
                }
                for f in self.failovers
            ],
            "per_region": [r.to_json() for r in self.regions],
            "copies": [c.to_json() for c in self.copies],
            "cost_copy_usd": self.copy_usd,
            "cost_on_demand_home_usd": self.home_on_demand_usd,
            "pricing": region_price_note(),
        }


def summarize_regions(
    attempts: Sequence[Attempt],
    *,
    job_names: Sequence[str] = (),
    job_regions: Mapping[str, str] | None = None,
    home: str = "",
    copied_bytes: Mapping[str, int] | None = None,
    copied_home_bytes: int = 0,
    launches: Mapping[str, str] | None = None,
) -> RegionSummary:
    """Attempts, costs and failovers per region (the definitions are in the module doc).

    Args:
        attempts: the accounting summary's attempts.
        job_names: every CustomJob, in submission order (default: the attempts' jobs).
        job_regions: a job's region where its name does not say (the launcher's record).
        home: the first region of the launch's order (default: the first job's region).
        copied_bytes: bytes of checkpoint copied into a job's region before it ran, by job.
        copied_home_bytes: bytes copied from the last job's region back home at the end.
        launches: the launch (any name: its task's) that submitted each job; none: every job
            is the one launch's.
    """
    jobs = list(dict.fromkeys([*job_names, *(a.job_name for a in attempts)]))
    where = {j: (job_regions or {}).get(j) or region_of_job(j) for j in jobs}
    order = [where[j] for j in jobs if where[j]]
    home = home or (order[0] if order else "")
    regions: dict[str, list[Attempt]] = {r: [] for r in dict.fromkeys(order)}
    for attempt in attempts:
        regions.setdefault(where.get(attempt.job_name) or home, []).append(attempt)
    rows = tuple(
        RegionCost(
            region=region,
            jobs=sum(1 for j in jobs if where[j] == region),
            attempts=len(rows),
            billable_seconds=math.fsum(a.billable_seconds for a in rows),
            costs=total_costs([a.cost for a in rows]) if rows else None,
        )
        for region, rows in regions.items()
    )
    failovers, copies, previous = [], [], home
    last: dict[str, str] = {}  # each launch's region so far
    for job in jobs:
        region = where[job] or home
        launch = (launches or {}).get(job)
        if launch is not None:  # a launch's first job runs in its own first region
            previous = last.setdefault(launch, region)
            last[launch] = region
        moved = (copied_bytes or {}).get(job, 0)
        if moved and region != previous:
            copies.append(Copy(previous, region, int(moved)))
        if region != previous:
            first = next((a for a in attempts if a.job_name == job), None)
            failovers.append(
                Failover(
                    previous,
                    region,
                    job,
                    first.start if first else None,
                    first.first_step if first else None,
                )
            )
        previous = region
    if copied_home_bytes and previous != home:
        copies.append(Copy(previous, home, int(copied_home_bytes)))
    priced = [a.cost for a in attempts]
    baseline = (
        math.fsum(c.on_demand_usd for c in priced if c is not None)
        if all(c is not None for c in priced)
        else None
    )
    return RegionSummary(home, rows, tuple(failovers), tuple(copies), baseline)
