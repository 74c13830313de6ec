"""Where the launcher's CustomJobs run: Vertex AI or the local emulator, behind one interface.

Both speak the same JobService API through the same client (``kfp_spot.jobs.service``); what
differs is everything around it, and that lives here, chosen once from the endpoint
(:func:`backend_for`):

- how often to poll, how long transient errors are ridden out, how long a cancel is waited for,
  how long to wait before creating a job again where a create was refused for quota;
- the billing ledger (the emulator serves one per job; Vertex AI has none the launcher can read);
- the failed job's own log lines (the emulator serves them; on Vertex they are in Cloud Logging);
- how the attempts of a running job are observed (the emulator's ledger; on Vertex, the attempt
  records the trainer writes next to its checkpoints, since the service does not say when it
  restarted a job).
"""

from __future__ import annotations

import abc
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kfp_spot import accounting, tracebacks
from kfp_spot.jobs.quota_backoff import QuotaBackoff
from kfp_spot.jobs.service import PollPolicy, RetryBudget
from kfp_spot.vertex.client import Endpoint

log = logging.getLogger(__name__)


_IGNORED = "Exception ignored in"


def traceback_before(output: list[str], window: int) -> list[str]:
    """The last frame and exception of the traceback that ended a process, if before ``window``.

    ``window``: where the shown last lines begin; [] when they hold the exception. A trainer's
    traceback may be followed by more lines than are shown: a DataLoader's workers' ``Exception
    ignored in ...`` tracebacks, an experiment tracker's closing lines. The cause is the last
    traceback not introduced by ``Exception ignored in``.
    """
    starts = [
        i
        for i, line in enumerate(output)
        if line.startswith(tracebacks.HEADER)
        and not any(o.startswith(_IGNORED) for o in output[max(0, i - 2) : i])
    ]
    if not starts:
        return []
    end = tracebacks.frames_end(output, starts[-1])
    if end >= len(output) or end >= window:
        return []  # the shown lines hold its exception
    frames = output[starts[-1] + 1 : end]
    last_frame = max((i for i, f in enumerate(frames) if f.lstrip().startswith("File ")), default=0)
    return [*frames[last_frame:], output[end]]


@dataclass(frozen=True)
class Backend(abc.ABC):
    """What the launcher needs from the place its jobs run.

    Attributes:
        endpoint: the JobService endpoint.
        poll: how often a job's state is read while waiting.
        retry: how long transient errors (UNAVAILABLE, connection refused...) are ridden out.
        cancel_wait_seconds: how long a cancelled job is waited for before giving up on it.
        observe_every: seconds between looks at a running job's attempts (also on every change).
        quota_backoff: the waits before a create in a region whose last creates were refused
            for quota (429 RESOURCE_EXHAUSTED).
    """

    endpoint: Endpoint
    poll: PollPolicy
    retry: RetryBudget
    cancel_wait_seconds: float
    observe_every: float
    quota_backoff: QuotaBackoff

    name = "backend"

    @abc.abstractmethod
    def ledger(self, job_name: str) -> list[dict[str, Any]] | None:
        """The job's billing ledger rows (docs/emulator.md), or None when there is none."""

    @abc.abstractmethod
    def failure_logs(self, job_name: str, lines: int = 20) -> str:
        """What to show of a failed job's own output ("" when nothing can be shown)."""

    @abc.abstractmethod
    def observe(
        self, job_name: str, strategy: str, checkpoint_root: str, since: float
    ) -> list[accounting.Attempt]:
        """The attempts of ``job_name`` known so far (started, and ended if they did).

        Args:
            job_name: the CustomJob.
            strategy: its scheduling strategy.
            checkpoint_root: where its trainer keeps checkpoints and attempt records.
            since: when it was submitted (epoch seconds).
        """


# GCPC's launcher reads a CustomJob every 20 s (180 calls an hour); see vertex_poll_delay.
GCPC_POLL_SECONDS = 20.0
POLL_BURST_CALLS = 3  # how many calls the launcher may be ahead of GCPC's schedule
_WAITING_STATES = frozenset({"JOB_STATE_QUEUED", "JOB_STATE_PENDING"})


def vertex_poll_delay(state: str, since_change: float, since_first: float, calls: int) -> float:
    """Seconds until the next read of a CustomJob on Vertex AI (pure; docs/launcher.md).

    Short reads right after a state change (a job that fails does so mostly just after it starts
    RUNNING, or while PENDING), GCPC's 20 s in a steady RUNNING, 30 s while QUEUED or PENDING
    (nothing waits on when a job starts, so those reads bank calls for the bursts); capped so
    that the launcher is never more than ``POLL_BURST_CALLS`` calls ahead of GCPC's fixed 20 s
    schedule: call ``k`` (0-based, the first at ``since_first`` = 0) is made no earlier than
    ``20 * (k - POLL_BURST_CALLS)`` s.

    Args:
        state: the job's state name as last read (``JOB_STATE_RUNNING``, ...).
        since_change: seconds since the read that first saw ``state``.
        since_first: seconds since the first read of the job.
        calls: reads made so far (the next is call number ``calls``).
    """
    if state in _WAITING_STATES:
        wanted = 30.0
    elif since_change < 30.0:
        wanted = 5.0
    elif since_change < 90.0:
        wanted = 10.0
    else:
        wanted = GCPC_POLL_SECONDS
    earliest = GCPC_POLL_SECONDS * (calls - POLL_BURST_CALLS) - since_first
    return max(wanted, earliest)


class VertexBackend(Backend):
    """Vertex AI: a gentle poll, GCPC-like retries, attempts from the trainer's records."""

    name = "vertex"

    def ledger(self, job_name: str) -> list[dict[str, Any]] | None:
        """None: Vertex AI bills per project (Cloud Billing), not per attempt."""
        return None  # billing is per project in Cloud Billing, not per attempt

    def failure_logs(self, job_name: str, lines: int = 20) -> str:
        """Where the logs are: the job's console page (the replicas write to Cloud Logging)."""
        parts = job_name.split("/")
        if len(parts) != 6:
            return ""
        project, location, job_id = parts[1], parts[3], parts[5]
        # The console page the Vertex SDK itself links for a CustomJob; its logs are a tab there.
        return (
            "the replicas' logs are in Cloud Logging: "
            f"https://console.cloud.google.com/ai/platform/locations/{location}/training/{job_id}"
            f"?project={project}"
        )

    def observe(
        self, job_name: str, strategy: str, checkpoint_root: str, since: float
    ) -> list[accounting.Attempt]:
        """From the trainer's attempt records: Vertex does not say when it restarted a job."""
        job_id = job_name.rsplit("/", 1)[-1]
        records = [
            r
            for r in accounting.read_records(checkpoint_root)
            if (r.job_id == job_id) or (not r.job_id and r.start_time >= since)
        ]
        run = accounting.JobRun(job_name, strategy, submitted_at=since)
        return accounting.record_attempts(records, [run])


class EmulatorBackend(Backend):
    """The local emulator: quick polls, retries that outlast its restart, its ledger and logs."""

    name = "emulator"

    def _get(self, path: str, timeout: float = 10.0) -> Any:
        url = f"{self.endpoint.base_url}/emulator/v1/{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return json.loads(response.read())
        except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
            log.info("nothing at %s: %s", url, exc)
            return None

    def ledger(self, job_name: str) -> list[dict[str, Any]] | None:
        """``GET /emulator/v1/{job}/attempts``."""
        doc = self._get(f"{job_name}/attempts")
        rows = doc.get("attempts") if isinstance(doc, Mapping) else None
        return rows if isinstance(rows, list) else None

    def failure_logs(self, job_name: str, lines: int = 20) -> str:
        """The last ``lines`` lines of each replica of the job's last attempt."""
        doc = self._get(f"{job_name}/logs?tail=16384")
        entries = doc.get("logs") if isinstance(doc, Mapping) else None
        if not isinstance(entries, list) or not entries:
            return ""
        entries = [e for e in entries if isinstance(e, Mapping)]
        last = max((int(e.get("attempt") or 0) for e in entries), default=0)
        parts = []
        for entry in entries:
            if int(entry.get("attempt") or 0) != last:
                continue
            output = str(entry.get("text") or "").rstrip().splitlines()
            text = "\n".join(output[-lines:])
            if text:
                parts.append(f"--- {entry.get('replica')} (attempt {last}), last lines ---\n{text}")
            cause = traceback_before(output, len(output) - lines)
            if cause:
                parts.append(
                    f"--- {entry.get('replica')} (attempt {last}), its traceback, further up ---\n"
                    + "\n".join(cause)
                )
        return "\n".join(parts)

    def observe(
        self, job_name: str, strategy: str, checkpoint_root: str, since: float
    ) -> list[accounting.Attempt]:
        """From the job's ledger."""
        rows = self.ledger(job_name)
        if rows is None:
            return []
        try:
            return accounting.ledger_attempts(
                rows, default_job=job_name, strategy_of={job_name: strategy}
            )
        except accounting.AccountingError as exc:
            log.info("unreadable ledger of %s: %s", job_name, exc)
            return []


@dataclass(frozen=True)
class _Settings:
    """A backend's timings (the fields of :class:`Backend` but the endpoint)."""

    poll: PollPolicy
    retry: RetryBudget
    cancel_wait_seconds: float
    observe_every: float
    quota_backoff: QuotaBackoff


# Against the emulator one GET costs about a millisecond: poll every 0.1 s so a job's end is seen
# within a poll (the target is 0.3 s at p95, report included). Transient errors are ridden out for
# 20 s: an emulator restarted on the same state dir and port gives running replicas up to 10 s to
# stop first. A cancel waits for the emulator's default 30 s grace period. A create the emulator
# refused for quota (a Spot capacity setting, for a time or for good) is tried again after 1 s,
# doubling to 8 s: the waits and their lines are Vertex AI's, shortened as the emulator's clock is.
_EMULATOR = _Settings(
    poll=PollPolicy(0.05, 0.1),
    retry=RetryBudget(40, 20.0, 0.1, 1.0),
    cancel_wait_seconds=30.0,
    observe_every=0.5,
    quota_backoff=QuotaBackoff(1.0, 8.0),
)
# On Vertex AI: vertex_poll_delay (quick after a change, GCPC's 20 s in a steady RUNNING, never
# more than 3 calls ahead of GCPC's schedule); transient errors ridden out for 10 min, whether they
# come fast (UNAVAILABLE at once: 25 tries, 1 s doubling to 30 s, fill the window) or slow (a
# request timing out: the window ends it first), since giving up leaves a paid training job
# unwatched over a regional blip; the pod is killed ~30 s after SIGTERM, so a cancel is recorded
# within ~20 s; attempt records (a listing on gs://) are looked at once a minute. A create refused
# for quota (429) is made again after 30 s, Google's least interval for a 429 quota error (Service
# Usage's troubleshooting page: exponential intervals plus randomness), doubling to 5 min: a
# regional quota of Spot CPUs frees as jobs end, a per-minute request quota within a minute.
_VERTEX = _Settings(
    poll=PollPolicy(GCPC_POLL_SECONDS, GCPC_POLL_SECONDS, 1.0, schedule=vertex_poll_delay),
    retry=RetryBudget(25, 600.0, 1.0, 30.0),
    cancel_wait_seconds=20.0,
    observe_every=60.0,
    quota_backoff=QuotaBackoff(30.0, 300.0),
)


def backend_for(
    endpoint: Endpoint, *, poll_interval: float = 0.0, cancel_wait: float = 0.0
) -> Backend:
    """The backend behind ``endpoint``: the emulator for a plain-HTTP endpoint, else Vertex AI.

    Args:
        endpoint: from ``kfp_spot.vertex.client.resolve_endpoint``.
        poll_interval: > 0 polls at this fixed interval instead of the backend's own.
        cancel_wait: > 0 waits this long for a cancelled job instead of the backend's own.
    """
    cls: type[Backend]
    cls, settings = (EmulatorBackend, _EMULATOR) if endpoint.local else (VertexBackend, _VERTEX)
    if poll_interval > 0:
        settings = replace(settings, poll=PollPolicy.fixed(poll_interval))
    if cancel_wait > 0:
        settings = replace(settings, cancel_wait_seconds=cancel_wait)
    return cls(
        endpoint=endpoint,
        poll=settings.poll,
        retry=settings.retry,
        cancel_wait_seconds=settings.cancel_wait_seconds,
        observe_every=settings.observe_every,
        quota_backoff=settings.quota_backoff,
    )
