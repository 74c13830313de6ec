"""What became of a CustomJob: the launcher's classification of every terminal job.

Preemption is not a bug: a Spot job that the service gave up on after its restarts
(PREEMPTED_EXHAUSTED) is recovered by resubmitting; a job whose code failed (USER_ERROR) is not.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # GAPIC's types load where a job is read, not on import
    from google.api_core.exceptions import GoogleAPICallError
    from google.cloud.aiplatform_v1.types.custom_job import CustomJob


class Outcome(str, enum.Enum):
    """The classified end of one CustomJob (and of the launch as a whole)."""

    SUCCEEDED = "SUCCEEDED"
    PREEMPTED_EXHAUSTED = "PREEMPTED_EXHAUSTED"  # Spot preemptions past the service's restarts
    CAPACITY = "CAPACITY"  # quota or no capacity before the job ever ran
    USER_ERROR = "USER_ERROR"  # a replica exited non-zero, bad args, permissions
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"  # scheduling.timeout (or the launcher's deadline) passed
    SERVICE_ERROR = "SERVICE_ERROR"  # the service failed the job for its own reasons (INTERNAL)

    def __str__(self) -> str:
        return self.value


# The JobState names of a job that will not change state again.
TERMINAL_STATES = frozenset(
    {
        "JOB_STATE_SUCCEEDED",
        "JOB_STATE_FAILED",
        "JOB_STATE_CANCELLED",
        "JOB_STATE_PAUSED",
        "JOB_STATE_EXPIRED",
        "JOB_STATE_PARTIALLY_SUCCEEDED",
    }
)

# google.rpc.Code values seen in CustomJob.error.
_CODE_CANCELLED = 1
_CODE_DEADLINE_EXCEEDED = 4
_CODE_RESOURCE_EXHAUSTED = 8
_USER_CODES = frozenset({3, 5, 6, 7, 9, 11, 12})  # as GCPC's _JOB_USER_ERROR_CODES
_STOCKOUT_RE = re.compile(r"stockout|preempt|resources? (are|is) (insufficient|unavailable)", re.I)
_QUOTA_RE = re.compile(r"quota", re.I)
_TIMEOUT_RE = re.compile(r"timed? ?out|timeout|deadline", re.I)
_REPLICA_RE = re.compile(r"exited with a non-zero status|replica .* (failed|exited)", re.I)


@dataclass(frozen=True)
class Classified:
    """An outcome and the service's words for it."""

    outcome: Outcome
    message: str = ""


def state_name(value: int) -> str:
    """The JobState name of ``value`` (a number the API added after this client: ``STATE_<n>``)."""
    from google.cloud.aiplatform_v1.types.job_state import JobState

    try:
        return str(JobState(value).name)
    except ValueError:
        return f"STATE_{int(value)}"


def is_terminal(job: CustomJob) -> bool:
    """Whether ``job`` will not change state again (a state this client does not know is not)."""
    return state_name(job.state) in TERMINAL_STATES


def classify(job: CustomJob) -> Classified:
    """Classify a terminal CustomJob.

    Args:
        job: the job as the service returned it (``state``, ``error``, ``start_time``).

    Returns:
        The outcome with the job's error message.

    Raises:
        ValueError: when the job is not in a terminal state.
    """
    if not is_terminal(job):
        raise ValueError(
            f"job {job.name} is still {state_name(job.state)}; only terminal jobs are classified"
        )
    state = state_name(job.state)
    code, message = int(job.error.code), str(job.error.message)
    if state in ("JOB_STATE_SUCCEEDED", "JOB_STATE_PARTIALLY_SUCCEEDED"):
        return Classified(Outcome.SUCCEEDED, message)
    if state in ("JOB_STATE_CANCELLED", "JOB_STATE_PAUSED"):
        return Classified(Outcome.CANCELLED, message or f"the job was {state[10:].lower()}")
    if state == "JOB_STATE_EXPIRED":
        # FLEX_START: no capacity within max_wait_duration.
        return Classified(Outcome.CAPACITY, message or "the job expired waiting for capacity")
    return classify_error(code, message, ran=bool(job.start_time))


def classify_error(code: int, message: str, *, ran: bool) -> Classified:
    """Classify a FAILED job by its ``error`` (google.rpc code and message).

    Args:
        code: ``CustomJob.error.code``.
        message: ``CustomJob.error.message``.
        ran: whether the job ever reached RUNNING (``start_time`` is set).
    """
    if _QUOTA_RE.search(message):
        return Classified(Outcome.CAPACITY, message)
    if _STOCKOUT_RE.search(message) or code == _CODE_RESOURCE_EXHAUSTED:
        return Classified(Outcome.PREEMPTED_EXHAUSTED if ran else Outcome.CAPACITY, message)
    if code == _CODE_DEADLINE_EXCEEDED or (not code and _TIMEOUT_RE.search(message)):
        return Classified(Outcome.TIMEOUT, message)
    if code == _CODE_CANCELLED:
        return Classified(Outcome.CANCELLED, message)
    if code in _USER_CODES or _REPLICA_RE.search(message):
        return Classified(Outcome.USER_ERROR, message)
    return Classified(Outcome.SERVICE_ERROR, message or f"the job failed with code {code}")


def classify_create_error(exc: GoogleAPICallError) -> Classified:
    """Classify a refused ``create_custom_job``: quota and stockouts are CAPACITY, the rest ours."""
    from google.api_core import exceptions as api_exceptions

    message = str(exc.message or exc)
    if isinstance(exc, api_exceptions.TooManyRequests) or _QUOTA_RE.search(message):
        return Classified(Outcome.CAPACITY, message)
    if isinstance(exc, (api_exceptions.ServiceUnavailable, api_exceptions.InternalServerError)):
        return Classified(Outcome.SERVICE_ERROR, message)
    return Classified(Outcome.USER_ERROR, message)
