"""One live launch per output directory: launches that share one resume from each other's steps.

A launch's jobs write their checkpoints under its base output directory, and every attempt resumes
from the newest step there. Two launches given the same directory at once (the same
``base_output_directory`` passed to every iteration of a ``ParallelFor``) would each train on top of
the other's steps, with nothing to say so. So every job the launcher creates carries a label naming
its base output directory (:data:`~kfp_spot.jobs.service.OUTPUT_LABEL`, a digest: label values hold
63 characters), and before it creates one the launcher lists the jobs with that label in the region,
and in every other region of the launch whose jobs write there (another launch may have failed over
to one): a job of another launch that has not ended holds the directory, and this launch fails,
naming it. Two launches that start together both find the directory free and both create; each then
lists again, and the one whose job was created later (on a tie: the larger name) gives way: it
cancels its job and fails. The jobs of the same launch (its resubmissions, a restarted launcher's)
are its own: they share the directory by design, one after the other.

:func:`holder` is the policy (pure); :func:`check` lists; the launcher cancels.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from kfp_spot.jobs.outcome import Classified, Outcome, is_terminal
from kfp_spot.jobs.service import OUTPUT_LABEL, SUBMISSION_LABEL, JobService

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1.types.custom_job import CustomJob


def output_label(base_output_directory: str) -> str:
    """The label value that names ``base_output_directory`` (lowercase hex, 32 characters)."""
    return hashlib.sha256(base_output_directory.rstrip("/").encode()).hexdigest()[:32]


def _order(job: CustomJob) -> tuple[float, str]:
    created: Any = job.create_time  # a datetime once read (proto-plus); None when unset
    return (created.timestamp() if created else float("inf"), job.name)


def holder(
    jobs: Sequence[CustomJob], *, mine: CustomJob | None, own_tokens: Collection[str]
) -> CustomJob | None:
    """The job of another launch that holds the directory before ``mine``, or None.

    Args:
        jobs: the jobs labelled with the directory (any state).
        mine: this launch's job once created; None before its create.
        own_tokens: the submission labels of this launch's own jobs.

    Returns:
        Before the create, any job of another launch that has not ended (the earliest created);
        after it, the earliest such job created before ``mine`` (None: ``mine`` goes on).
    """
    others = [
        job
        for job in jobs
        if not is_terminal(job)
        and job.labels.get(SUBMISSION_LABEL) not in own_tokens
        and (mine is None or job.name != mine.name)
    ]
    if mine is not None:
        # its create time as listed, like the others' (a create's answer may lack it)
        listed = next((job for job in jobs if job.name == mine.name), mine)
        others = [job for job in others if _order(job) < _order(listed)]
    return min(others, key=_order) if others else None


def held_message(base_output_directory: str, job_name: str) -> str:
    """What a launch that gives way says: whose the directory is and what to do."""
    return (
        f"base_output_directory {base_output_directory} is in use by CustomJob {job_name} of "
        "another launch, which has not ended: launches running at once each need their own "
        "directory (their checkpoints would mix, each resuming from the other's steps); inside "
        "a ParallelFor leave base_output_directory empty (each task then gets its own), or "
        "give each iteration a different one"
    )


def check(
    places: Sequence[tuple[JobService, str]],
    base_output_directory: str,
    *,
    mine: CustomJob | None,
    own_tokens: Collection[str],
) -> Classified | None:
    """Whether another launch holds ``base_output_directory`` in any of ``places``.

    Args:
        places: ``(service, parent)`` of each region to look in (``mine``'s own first); their
            jobs are judged together, ``mine`` by its create time as listed in its region.
        base_output_directory: the directory.
        mine: see :func:`holder`.
        own_tokens: see :func:`holder`.

    Returns:
        A USER_ERROR naming the :func:`holder`, or None.
    """
    label = output_label(base_output_directory)
    jobs = [
        job for service, parent in places for job in service.labelled(parent, OUTPUT_LABEL, label)
    ]
    other = holder(jobs, mine=mine, own_tokens=own_tokens)
    if other is None:
        return None
    return Classified(Outcome.USER_ERROR, held_message(base_output_directory, other.name))
