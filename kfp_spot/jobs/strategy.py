"""The scheduling strategies a launch submits with: an enum inside, the API's names at the edges.

The launcher keeps a submission's strategy as a :class:`Strategy`; it becomes text only where it
leaves the process (the CustomJob's ``scheduling.strategy``, the launch state file, log lines and
KFP metadata). Its values are the names of ``Scheduling.Strategy`` in the Vertex AI API.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # GAPIC's types load where a job is built or read, not on import
    from google.cloud.aiplatform_v1.types.custom_job import CustomJob, Scheduling


class Strategy(str, enum.Enum):
    """A scheduling strategy the launcher submits with (a ``Scheduling.Strategy`` name)."""

    SPOT = "SPOT"
    STANDARD = "STANDARD"
    FLEX_START = "FLEX_START"

    def __str__(self) -> str:
        return self.value

    @property
    def api(self) -> Scheduling.Strategy:
        """This strategy as the API's enum (what ``scheduling.strategy`` holds)."""
        from google.cloud.aiplatform_v1.types.custom_job import Scheduling

        return Scheduling.Strategy(int(getattr(Scheduling.Strategy, self.value)))

    @classmethod
    def from_api(cls, name: str) -> Strategy:
        """The strategy a ``Scheduling.Strategy`` name means.

        The deprecated ON_DEMAND and LOW_COST are STANDARD and SPOT; STRATEGY_UNSPECIFIED is
        STANDARD (the service's default).

        Raises:
            ValueError: ``name`` is no ``Scheduling.Strategy`` name this client knows.
        """
        return _API_ALIASES.get(name) or cls(name)


_API_ALIASES = {
    "STRATEGY_UNSPECIFIED": Strategy.STANDARD,
    "ON_DEMAND": Strategy.STANDARD,
    "LOW_COST": Strategy.SPOT,
}

STRATEGIES = tuple(Strategy)
"""Every strategy a launch may submit with."""
FALLBACK_STRATEGIES = (Strategy.STANDARD, Strategy.FLEX_START)
"""Where a launch may go once it stops waiting for Spot capacity."""


def strategy_name(job: CustomJob) -> str:
    """The scheduling strategy of ``job`` as its API name (``SPOT``, ``STANDARD``, ...).

    Raises:
        ValueError: the job's strategy is a number this client does not know.
    """
    from google.cloud.aiplatform_v1.types.custom_job import Scheduling

    return str(Scheduling.Strategy(job.job_spec.scheduling.strategy).name)


def strategy_of(job: CustomJob) -> Strategy:
    """The :class:`Strategy` ``job`` is scheduled with (:meth:`Strategy.from_api`).

    Raises:
        ValueError: the job's strategy is one this client does not know.
    """
    return Strategy.from_api(strategy_name(job))
