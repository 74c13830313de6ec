"""Talking to the JobService: create, get, cancel and wait, with bounded transient-error retries.

Every call goes through ``google.cloud.aiplatform_v1.JobServiceClient``. Reads are retried on
UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL and connection errors within a budget;
a create is retried only after checking (by a label unique to the submission) that the lost
request did not create the job, so a retry never makes a duplicate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from google.api_core import exceptions as api_exceptions

from kfp_spot.jobs.outcome import is_terminal, state_name
from kfp_spot.vertex import signals
from kfp_spot.vertex.client import Endpoint, make_job_client

if TYPE_CHECKING:  # the client and its types load when the first call is made
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
    from google.cloud.aiplatform_v1.types.custom_job import CustomJob
    from google.cloud.aiplatform_v1.types.job_service import ListCustomJobsResponse

log = logging.getLogger(__name__)

# Underscores, not hyphens: list filters (AIP-160) take bare identifiers as field names.
SUBMISSION_LABEL = "kfp_spot_submission"
"""Label unique to one submission: a lost create is found by it, never made twice."""
OUTPUT_LABEL = "kfp_spot_output"
"""Label naming a job's base output directory (:func:`kfp_spot.jobs.sharing.output_label`)."""
KFP_SPOT_LABELS = (SUBMISSION_LABEL, OUTPUT_LABEL)
"""The labels the launcher puts on every job it creates, beside the user's."""

_T = TypeVar("_T")

# Transient on reads. OSError covers requests' ConnectionError (REST) and socket errors.
TRANSIENT_READ_ERRORS: tuple[type[BaseException], ...] = (
    api_exceptions.ServiceUnavailable,
    api_exceptions.DeadlineExceeded,
    api_exceptions.TooManyRequests,  # RESOURCE_EXHAUSTED over REST (HTTP 429)
    api_exceptions.InternalServerError,
    api_exceptions.BadGateway,
    api_exceptions.GatewayTimeout,
    OSError,
)
# Transient on writes: the request may not have reached the service. RESOURCE_EXHAUSTED on a
# create is quota, which the caller classifies as CAPACITY rather than retrying here.
TRANSIENT_WRITE_ERRORS: tuple[type[BaseException], ...] = (
    api_exceptions.ServiceUnavailable,
    api_exceptions.DeadlineExceeded,
    api_exceptions.BadGateway,
    api_exceptions.GatewayTimeout,
    OSError,
)


class ServiceUnreachableError(RuntimeError):
    """Transient errors outlasted the retry budget."""


@dataclass(frozen=True)
class PollPolicy:
    """How often to ask for a job's state: start quick, back off to a ceiling, reset on change.

    Each backend (``kfp_spot.jobs.backend``) has its own; ``fixed`` is what
    ``poll_interval_seconds`` asks for.
    """

    initial: float
    maximum: float
    factor: float = 1.5
    # (state name, s since it was first seen, s since the first read, reads made) -> next delay;
    # when given, it replaces the back-off in ``JobService.wait`` (the Vertex backend's policy)
    schedule: Callable[[str, float, float, int], float] | None = None

    @classmethod
    def fixed(cls, interval: float) -> PollPolicy:
        """Every ``interval`` seconds, no back-off."""
        return cls(interval, interval, 1.0)

    def next(self, current: float) -> float:
        """The interval after ``current`` when nothing changed."""
        return min(self.maximum, max(self.initial, current * self.factor))


@dataclass(frozen=True)
class RetryBudget:
    """How long transient errors are tolerated: consecutive failures and seconds, both bounded.

    The defaults are Vertex AI's: with fast failures the tries last the whole window (1 s doubling
    to 30 s: 25 tries take about 10 min); the emulator's backend has a shorter one.
    """

    max_attempts: int = 25
    max_seconds: float = 600.0
    initial_backoff: float = 1.0
    max_backoff: float = 30.0


class JobService:
    """The launcher's view of the JobService (one client, bounded retries)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        client: JobServiceClient | None = None,
        retry: RetryBudget | None = None,
        sleep: Callable[[float], None] = signals.sleep,
        clock: Callable[[], float] = time.monotonic,
        request_timeout: float = 60.0,
    ):
        self.endpoint = endpoint
        self._client = client
        self.retry = retry or RetryBudget()
        self._sleep = sleep
        self._clock = clock
        self._timeout = request_timeout

    def bounded(self, seconds: float) -> JobService:
        """This service (its client) riding out transient errors for at most ``seconds``.

        For work that must end within a deadline: a cancelled launch has about 30 s between
        SIGTERM and SIGKILL (Kubernetes' grace period), where Vertex's usual budget is 10 min.
        """
        seconds = max(0.0, seconds)
        return JobService(
            self.endpoint,
            client=self._client,
            retry=replace(self.retry, max_seconds=min(self.retry.max_seconds, seconds)),
            sleep=self._sleep,
            clock=self._clock,
            request_timeout=min(self._timeout, max(seconds, 1.0)),
        )

    @property
    def client(self) -> JobServiceClient:
        """The JobServiceClient, made on first use (credentials are looked up only then)."""
        if self._client is None:
            self._client = make_job_client(self.endpoint)
        return self._client

    def _with_retries(
        self, what: str, call: Callable[[], _T], transient: tuple[type[BaseException], ...]
    ) -> _T:
        started = self._clock()
        backoff = self.retry.initial_backoff
        for attempt in range(1, self.retry.max_attempts + 1):
            try:
                return call()
            except transient as exc:
                spent = self._clock() - started
                if attempt == self.retry.max_attempts or spent + backoff > self.retry.max_seconds:
                    raise ServiceUnreachableError(
                        f"{what} failed {attempt} times in {spent:.0f} s "
                        f"({self.endpoint.base_url}); last error: {exc}"
                    ) from exc
                log.warning(
                    "%s: transient error (%s); retry %d in %.1f s", what, exc, attempt, backoff
                )
                self._sleep(backoff)
                backoff = min(self.retry.max_backoff, backoff * 2)
        raise AssertionError("unreachable")  # pragma: no cover

    def get(self, name: str) -> CustomJob:
        """The current CustomJob ``name`` (transient errors retried)."""
        return self._with_retries(
            f"get {name}",
            lambda: self.client.get_custom_job(name=name, timeout=self._timeout),
            TRANSIENT_READ_ERRORS,
        )

    def find_submission(self, parent: str, token: str) -> CustomJob | None:
        """The job created with submission label ``token`` under ``parent``, if any."""
        found = self.labelled(parent, SUBMISSION_LABEL, token, first=True)
        return found[0] if found else None

    def labelled(
        self, parent: str, key: str, value: str, *, first: bool = False
    ) -> list[CustomJob]:
        """The jobs under ``parent`` whose label ``key`` is ``value``, newest first.

        Bounded: at most 20 pages, where the jobs looked for are among the newest.

        Args:
            parent: ``projects/P/locations/L``.
            key: the label's key.
            value: its value.
            first: stop at the first one found.
        """
        filtered = {"parent": parent, "filter": f'labels.{key}="{value}"'}

        def first_page(
            request: dict[str, str],
        ) -> tuple[Iterator[ListCustomJobsResponse], ListCustomJobsResponse | None]:
            listing = iter(
                self.client.list_custom_jobs(request=request, timeout=self._timeout).pages
            )
            return listing, next(listing, None)

        def scan() -> list[CustomJob]:
            found: list[CustomJob] = []
            try:
                listing, page = first_page(filtered)
            except api_exceptions.BadRequest:
                # A service that refuses the filter: list everything and look ourselves.
                listing, page = first_page({"parent": parent})
            for _ in range(20):  # bounded: the jobs, if they exist, are among the newest
                if page is None:
                    break
                # Checked client-side too: a service that ignores the filter must not mislead us.
                for job in page.custom_jobs:
                    if job.labels.get(key) == value:
                        found.append(job)
                        if first:
                            return found
                page = next(listing, None)
            return found

        return self._with_retries(f"list {parent}", scan, TRANSIENT_READ_ERRORS)

    def create(self, parent: str, job: CustomJob, token: str) -> CustomJob:
        """Create ``job`` labelled with submission ``token``; never creates it twice.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: when the service refuses the job.
            ServiceUnreachableError: when transient errors outlast the budget.
        """
        job = type(job).deserialize(type(job).serialize(job))  # a copy
        job.labels[SUBMISSION_LABEL] = token
        state = {"tried": False}

        def attempt() -> CustomJob:
            if state["tried"]:
                found = self.find_submission(parent, token)
                if found is not None:
                    log.info(
                        "an earlier create of submission %s went through: %s", token, found.name
                    )
                    return found
            state["tried"] = True
            return self.client.create_custom_job(
                parent=parent, custom_job=job, timeout=self._timeout
            )

        return self._with_retries(f"create in {parent}", attempt, TRANSIENT_WRITE_ERRORS)

    def cancel(self, name: str) -> None:
        """Ask the service to cancel ``name``; a job that already ended is left alone."""
        try:
            self._with_retries(
                f"cancel {name}",
                lambda: self.client.cancel_custom_job(name=name, timeout=self._timeout),
                TRANSIENT_WRITE_ERRORS,
            )
        except api_exceptions.FailedPrecondition as exc:  # already terminal
            log.info("cancel %s: %s", name, exc.message)

    def wait(
        self,
        name: str,
        poll: PollPolicy,
        *,
        on_poll: Callable[[CustomJob, bool], None] | None = None,
        stop: Callable[[CustomJob], bool] | None = None,
    ) -> CustomJob:
        """Poll ``name`` until it is terminal (or ``stop(job)`` says to give up waiting).

        Args:
            name: the CustomJob.
            poll: the polling intervals.
            on_poll: called with every job read and whether its state changed since the last.
            stop: called with every non-terminal job; True returns it as it is.

        Returns:
            The last job seen (terminal unless ``stop`` said otherwise).
        """
        interval = poll.initial
        last_state: int | None = None
        first = changed_at = self._clock()
        calls = 0
        while True:
            job = self.get(name)
            calls += 1
            now = self._clock()
            changed = job.state != last_state
            if changed:
                log.info("%s is %s", name, state_name(job.state))
                last_state = job.state
                interval = poll.initial
                changed_at = now
            if poll.schedule is not None:
                interval = poll.schedule(
                    state_name(job.state), now - changed_at, now - first, calls
                )
            if on_poll is not None:
                on_poll(job, changed)
            if is_terminal(job):
                return job
            if stop is not None and stop(job):
                return job
            self._sleep(interval)
            interval = poll.next(interval)

    def wait_terminal(self, name: str, poll: PollPolicy, timeout: float) -> CustomJob | None:
        """Poll ``name`` until terminal for at most ``timeout`` seconds; None if it did not end."""
        deadline = self._clock() + timeout
        interval = poll.initial
        while True:
            job = self.get(name)
            if is_terminal(job):
                return job
            if self._clock() + interval > deadline:
                return None
            self._sleep(interval)
            interval = poll.next(interval)
