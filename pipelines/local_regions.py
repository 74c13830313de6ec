"""Regions in a local run: ``--regions A,B`` checked, and the failover drill's last move.

With regions, a local run's drill preempts the job ``preemptions`` times in the first region, each
after a committed checkpoint, and after the last one takes that region's Spot capacity away for
good (:meth:`kfp_spot.emulator.Emulator.set_spot_capacity`): the restart finds none, the job fails
with a stockout, and the launcher carries on in the next region from the committed step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kfp_spot.accounting import region_of_job
from kfp_spot.vertex.regions import check_region
from kfp_spot.vertex.values import InvalidValueError

if TYPE_CHECKING:
    from kfp_spot.emulator import Emulator

__all__ = ["RegionsError", "check_regions", "failover_drill", "parse_regions", "take_capacity_away"]


class RegionsError(ValueError):
    """A ``regions`` value a run cannot take; the message says what would be valid."""


def check_regions(regions: Sequence[str]) -> list[str]:
    """``regions`` as a list, each a Vertex AI region named once.

    Raises:
        RegionsError: a region unknown to :mod:`kfp_spot.vertex.regions` (with the closest
            names), one named twice, or none at all.
    """
    if isinstance(regions, str):
        raise RegionsError(f"expected a list of regions, got the text {regions!r}")
    out = list(regions)
    if not out:
        raise RegionsError("names no region; give at least one, e.g. us-central1,europe-west4")
    for region in out:
        try:
            check_region(region)
        except InvalidValueError as exc:
            raise RegionsError(str(exc)) from None
    twice = sorted({r for r in out if out.count(r) > 1})
    if twice:
        raise RegionsError(f"names {', '.join(twice)} more than once; list each region once")
    return out


def parse_regions(text: str) -> list[str]:
    """``A,B`` (the command line's form) as checked regions; see :func:`check_regions`."""
    return check_regions([part.strip() for part in text.split(",") if part.strip()])


def take_capacity_away(emu: Emulator, home: str) -> Callable[[str], object]:
    """What the drill does after its last preemption: no Spot capacity left in the job's region."""

    def after_last(job_name: str) -> None:
        emu.set_spot_capacity(region_of_job(job_name) or home, available=False)

    return after_last


def failover_drill(
    emu: Emulator, regions: Sequence[str] | None, preemptions: int, say: Callable[[str], object]
) -> Callable[[str], object] | None:
    """What the drill does after its last preemption in a run given ``regions`` (None: none).

    With two or more regions: :func:`take_capacity_away` in the first. With two or more and no
    preemptions, nothing takes it away: ``say`` is told so (the launch stays in the first
    region, which a run asking for regions would not expect in silence). Otherwise nothing.
    """
    if regions is None or len(regions) < 2:
        return None
    if preemptions < 1:
        say(
            f"note: regions {', '.join(regions)} with no preemptions: the drill never takes "
            f"{regions[0]}'s Spot capacity away, so the launch stays in {regions[0]}; give 1 or "
            f"more preemptions to see it fail over to {regions[1]}"
        )
        return None
    return take_capacity_away(emu, regions[0])
