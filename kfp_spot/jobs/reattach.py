"""Reattaching to the CustomJobs that ``gcp_resources`` lists but the launch state does not know.

A restarted launcher normally finds its submissions in the state file next to the job's outputs.
When that file is gone or belongs to another base directory, ``gcp_resources`` (every CustomJob of
the launch, oldest first: :mod:`kfp_spot.jobs.gcp_resources`) still says what ran. Each listed
job the state does not know is adopted: one that ended is recorded with its outcome, so it counts
against the budgets; of the unfinished ones, the last is the one to watch. A launch runs one job
at a time on its checkpoint directory, so any other unfinished one (which only a launcher that
died while cancelling one could leave behind) is cancelled. Each job is read (and cancelled)
through the service of its own region, the ``locations/L`` of its name.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from google.api_core import exceptions as api_exceptions

from kfp_spot.jobs.outcome import Outcome, classify, is_terminal
from kfp_spot.jobs.recovery import LaunchState, Submission
from kfp_spot.jobs.regions import location_of
from kfp_spot.jobs.service import SUBMISSION_LABEL, JobService
from kfp_spot.jobs.strategy import strategy_of

if TYPE_CHECKING:  # GAPIC's types load where jobs are read (service)
    from google.cloud.aiplatform_v1.types.custom_job import CustomJob

log = logging.getLogger(__name__)


def job_time(job: CustomJob, name: str) -> dt.datetime | None:
    """The timestamp field ``name`` of ``job``; None when the service has not set it.

    The GAPIC annotations say ``timestamp_pb2.Timestamp``; proto-plus returns the field as a
    ``DatetimeWithNanoseconds`` (a datetime), or None when it is unset.
    """
    value: object = getattr(job, name)
    return value if isinstance(value, dt.datetime) else None


def _rfc3339(value: dt.datetime | None) -> str:
    return value.isoformat() if value is not None else ""


def record_times(sub: Submission, job: CustomJob) -> None:
    """Copy ``job``'s create, start and end times into ``sub`` (RFC 3339; "" when unset)."""
    sub.create_time = _rfc3339(job_time(job, "create_time"))
    sub.start_time = _rfc3339(job_time(job, "start_time"))
    sub.end_time = _rfc3339(job_time(job, "end_time"))


def _submission(job: CustomJob, clock: Callable[[], float]) -> Submission:
    created = job_time(job, "create_time")
    sub = Submission(
        token=job.labels.get(SUBMISSION_LABEL, ""),
        strategy=strategy_of(job),
        job_name=job.name,
        region=location_of(job.name),
        submitted_at=created.timestamp() if created is not None else clock(),
    )
    record_times(sub, job)
    if is_terminal(job):
        verdict = classify(job)
        sub.outcome, sub.message, sub.ended_at = verdict.outcome, verdict.message, clock()
    return sub


def adopt(
    state: LaunchState,
    job_names: Sequence[str],
    service_of: Callable[[str], JobService],
    clock: Callable[[], float],
) -> list[Submission]:
    """Add the jobs in ``job_names`` that ``state`` does not know; return the adopted ones.

    Args:
        state: the launch state (changed in place).
        job_names: the CustomJobs ``gcp_resources`` lists, oldest first.
        service_of: the JobService of a job's own region (from its name), to read (and if need
            be cancel) it.
        clock: wall clock for the records.
    """
    known = {s.job_name for s in state.submissions if s.job_name}
    adopted = []
    for name in job_names:
        if name in known:
            continue
        try:
            job = service_of(name).get(name)
        except api_exceptions.NotFound:
            log.warning("gcp_resources names %s, which the service does not know", name)
            continue
        adopted.append(_submission(job, clock))
    unfinished = [s for s in adopted if s.outcome is None]
    for sub in unfinished[:-1]:
        log.warning(
            "cancelling %s: a later CustomJob of this launch is the one to watch", sub.job_name
        )
        service_of(sub.job_name).cancel(sub.job_name)
        sub.outcome = Outcome.CANCELLED
        sub.message = "cancelled on reattach: a later CustomJob of this launch is being watched"
        sub.ended_at = clock()
    if unfinished:  # the one to watch goes last, where the launcher's loop looks
        adopted.remove(unfinished[-1])
        adopted.append(unfinished[-1])
    state.submissions.extend(adopted)
    return adopted
