"""One accounting model for every report kfp-spot writes.

Typed attempts from the billing ledger, the trainer's attempt records
(:class:`kfp_spot.checkpoints.AttemptRecord`) or the CustomJobs' own timestamps
(:mod:`kfp_spot.accounting.sources`), summed into one :class:`Summary`
(:mod:`kfp_spot.accounting.model`) with one definition of a preemption and of every cost, priced by
:mod:`kfp_spot.accounting.pricing`. The launcher's ``job_report``, ``report.md``, ``report.png`` and
``kfp-spot run``'s printout all show that one summary. Attempts per region, failovers and
checkpoint copies: :mod:`kfp_spot.accounting.regions`. Serving replica lives (a Spot endpoint's
VMs) are priced and summed the same way (:mod:`kfp_spot.accounting.serving`). Definitions:
docs/reports.md.
"""

from kfp_spot.accounting.fields import AccountingError, parse_time
from kfp_spot.accounting.model import (
    UNKNOWN_PRICE,
    Attempt,
    Costs,
    EndReason,
    Source,
    Summary,
    VmRuns,
    describe_cost,
    summarize,
    total_costs,
    usd,
)
from kfp_spot.accounting.pricing import (
    SPOT_DISCOUNT_RANGE,
    SPOT_PRICE_NOTE,
    AttemptCost,
    Pool,
    Rates,
    UnknownPriceError,
    attempt_cost,
    hourly_rates,
    is_spot,
    spot_range,
)
from kfp_spot.accounting.records import read_commits, read_records
from kfp_spot.accounting.regions import (
    Copy,
    Failover,
    RegionCost,
    RegionSummary,
    region_of_job,
    region_price_note,
    summarize_regions,
)
from kfp_spot.accounting.serving import (
    ReplicaLife,
    ServingSummary,
    serving_lives,
    summarize_serving,
)
from kfp_spot.accounting.sources import (
    JobRun,
    account,
    ledger_attempts,
    lost_seconds,
    record_attempts,
)

__all__ = [
    "SPOT_DISCOUNT_RANGE",
    "SPOT_PRICE_NOTE",
    "UNKNOWN_PRICE",
    "AccountingError",
    "Attempt",
    "AttemptCost",
    "Copy",
    "Costs",
    "EndReason",
    "Failover",
    "JobRun",
    "Pool",
    "Rates",
    "RegionCost",
    "RegionSummary",
    "ReplicaLife",
    "ServingSummary",
    "Source",
    "Summary",
    "UnknownPriceError",
    "VmRuns",
    "account",
    "attempt_cost",
    "describe_cost",
    "hourly_rates",
    "is_spot",
    "ledger_attempts",
    "lost_seconds",
    "parse_time",
    "read_commits",
    "read_records",
    "record_attempts",
    "region_of_job",
    "region_price_note",
    "serving_lives",
    "spot_range",
    "summarize",
    "summarize_regions",
    "summarize_serving",
    "total_costs",
    "usd",
]
