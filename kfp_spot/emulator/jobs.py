"""The CustomJob API of the emulator: create, get, list, cancel, delete; preempt, attempts, logs.

It parses and validates requests, answers in the API's shapes and raises
:class:`~kfp_spot.emulator.errors.ApiError`; every state change goes through the
:class:`~kfp_spot.emulator.lifecycle.Lifecycle`, and ``notify(job_id)`` tells the scheduler (and
the job's running attempt) that something was asked of a job.
"""

from __future__ import annotations

import base64
import re
import secrets
from collections.abc import Callable
from typing import Any

from google.cloud.aiplatform_v1.types import CustomJob, JobState, Scheduling
from google.protobuf import json_format

from kfp_spot.emulator import billing, filters, replicas
from kfp_spot.emulator.errors import ApiError, parse_error
from kfp_spot.emulator.lifecycle import Lifecycle
from kfp_spot.emulator.scheduler import Capacity
from kfp_spot.emulator.statedir import StateDir
from kfp_spot.emulator.states import CANCELLING
from kfp_spot.emulator.store import JobRow, Store
from kfp_spot.validation import InvalidJobSpecError, validate_custom_job

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

_NAME = re.compile(r"^(projects/[^/]+/locations/[^/]+)/customJobs/([^/:]+)$")
_SPOT = int(Scheduling.Strategy.SPOT)
_OUTPUT_ONLY = (
    "name",
    "state",
    "create_time",
    "start_time",
    "end_time",
    "update_time",
    "error",
    "web_access_uris",
)


def parse_name(name: str) -> tuple[str, str]:
    """Split ``projects/P/locations/L/customJobs/ID`` into (parent, id).

    Raises:
        ApiError: INVALID_ARGUMENT when the name has another shape.
    """
    match = _NAME.match(name or "")
    if not match:
        raise ApiError(
            "INVALID_ARGUMENT",
            f"name {name!r} is not a CustomJob name; expected "
            "projects/PROJECT/locations/LOCATION/customJobs/ID",
            "name",
        )
    return match.group(1), match.group(2)


def preempt_replica(body: Any) -> str | None:
    """The ``replica`` of a ``:preempt`` request body (``{}`` or ``{"replica": "workerpool1-0"}``).

    Raises:
        ApiError: INVALID_ARGUMENT for another shape, naming the field.
    """
    if not isinstance(body, dict):
        raise ApiError("INVALID_ARGUMENT", "the :preempt body must be a JSON object", "body")
    unknown = sorted(set(body) - {"replica"})
    if unknown:
        raise ApiError(
            "INVALID_ARGUMENT",
            f"unknown field {unknown[0]!r} in the :preempt body; the only field is 'replica'",
            unknown[0],
        )
    replica = body.get("replica")
    if replica is not None and (not isinstance(replica, str) or not replica):
        raise ApiError(
            "INVALID_ARGUMENT",
            f"replica must be a replica name such as 'workerpool1-0', got {replica!r}",
            "replica",
        )
    return replica


class JobService:
    """The emulated JobService (CustomJob methods) and the emulator's own extensions.

    Args:
        store: the durable state (read here; written through ``lifecycle``).
        lifecycle: every change of a job's state.
        capacity: refuses jobs that could never run here.
        state_dir: where attempt logs are.
        container_runtime: the container runtime probe (containerSpec jobs need one).
        notify: called with a job id after a request that the scheduler or the job's running
            attempt must act on.
    """

    def __init__(
        self,
        store: Store,
        lifecycle: Lifecycle,
        capacity: Capacity,
        state_dir: StateDir,
        container_runtime: Callable[[], str | None],
        notify: Callable[[str], None],
    ) -> None:
        self.store = store
        self.lifecycle = lifecycle
        self.capacity = capacity
        self.state_dir = state_dir
        self.container_runtime = container_runtime
        self._notify = notify

    # CustomJob methods ------------------------------------------------------------------------

    def create_job(self, parent: str, body: Any) -> Any:
        """Validate and store a CustomJob; returns its protobuf with name and state set."""
        if not isinstance(body, dict):
            raise ApiError(
                "INVALID_ARGUMENT",
                "Invalid JSON payload: the request body must be a JSON object (a CustomJob)",
                "custom_job",
            )
        pb = CustomJob.pb()()
        try:
            json_format.ParseDict(body, pb, ignore_unknown_fields=False)
        except (json_format.ParseError, ValueError, TypeError, AttributeError, KeyError) as err:
            raise parse_error(err) from None
        except RecursionError:
            raise ApiError("INVALID_ARGUMENT", "Invalid JSON payload: nested too deeply") from None
        try:
            validate_custom_job(pb)
        except InvalidJobSpecError as err:
            raise ApiError("INVALID_ARGUMENT", str(err), err.field) from None
        for index, pool in enumerate(pb.job_spec.worker_pool_specs):
            if pool.HasField("container_spec") and not self.container_runtime():
                raise ApiError(
                    "FAILED_PRECONDITION",
                    f"jobSpec.workerPoolSpecs[{index}].containerSpec: running a container needs "
                    "a container runtime (docker or podman) and none answers on this machine; "
                    "use pythonPackageSpec to run the job as local processes",
                    f"jobSpec.workerPoolSpecs[{index}].containerSpec",
                )
        self.capacity.check(pb)
        for output_only in _OUTPUT_ONLY:
            pb.ClearField(output_only)
        row = self.lifecycle.submit(parent, pb)
        self._notify(row.id)
        return self.to_proto(row)

    def get_job(self, name: str) -> Any:
        """The CustomJob called ``name``."""
        return self.to_proto(self._row(name))

    def list_jobs(
        self, parent: str, filter_text: str = "", page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Any], str]:
        """A page of the parent's jobs, newest first, and the next page's token (or "")."""
        try:
            predicate = filters.compile_filter(filter_text or "")
        except filters.FilterError as err:
            raise ApiError("INVALID_ARGUMENT", f"filter: {err}", "filter") from None
        if page_size < 0:
            raise ApiError(
                "INVALID_ARGUMENT", f"pageSize is {page_size}; it must be >= 0", "page_size"
            )
        size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        offset = 0
        if page_token:
            try:
                offset = int(base64.urlsafe_b64decode(page_token.encode()).decode())
                if offset < 0:
                    raise ValueError(offset)
            except (ValueError, UnicodeDecodeError):
                raise ApiError(
                    "INVALID_ARGUMENT",
                    "pageToken is not a token this service returned; pass nextPageToken from "
                    "the previous page, or none for the first page",
                    "page_token",
                ) from None
        matching = []
        for row in self.store.jobs(parent):
            pb = self.lifecycle.spec(row)
            record = filters.Record(
                row.state, row.display_name, dict(pb.labels), row.create_time, row.update_time
            )
            if predicate(record):
                matching.append(row)
        page = matching[offset : offset + size]
        more = offset + size < len(matching)
        token = base64.urlsafe_b64encode(str(offset + size).encode()).decode() if more else ""
        return [self.to_proto(r) for r in page], token

    def cancel_job(self, name: str) -> None:
        """Ask a job to stop: CANCELLING now, CANCELLED once its replicas are gone."""
        row = self._row(name)
        if row.terminal:
            raise ApiError(
                "FAILED_PRECONDITION",
                f"{row.name} is in state {row.state} and can no longer be cancelled",
                "name",
            )
        if not self.lifecycle.request_cancel(row.id):  # it finished meanwhile
            return self.cancel_job(name)
        self._notify(row.id)

    def delete_job(self, name: str) -> dict[str, Any]:
        """Delete a finished job; returns a done long-running operation."""
        row = self._row(name)
        if not row.terminal:
            raise ApiError(
                "FAILED_PRECONDITION",
                f"{row.name} is in state {row.state}; cancel it and wait for "
                "JOB_STATE_CANCELLED before deleting it",
                "name",
            )
        self.lifecycle.delete(row.id)
        return {
            "name": f"{row.name}/operations/{secrets.randbelow(10**18)}",
            "done": True,
            "response": {"@type": "type.googleapis.com/google.protobuf.Empty"},
        }

    # emulator extensions ----------------------------------------------------------------------

    def preempt(self, name: str, replica: str | None = None) -> dict[str, Any]:
        """Preempt the running attempt of a Spot job (or the next one as soon as it runs).

        With ``replica`` (a worker, e.g. ``workerpool1-0``) only that replica's VM is preempted
        and replaced while the others keep running (see ``runner``); the primary replica's
        preemption is the attempt's.
        """
        row = self._row(name)
        if row.terminal or row.state == CANCELLING:
            raise ApiError(
                "FAILED_PRECONDITION",
                f"{row.name} is in state {row.state}; only a queued, pending or running job "
                "can be preempted",
                "name",
            )
        pb = self.lifecycle.spec(row)
        if pb.job_spec.scheduling.strategy != _SPOT:
            strategy = Scheduling.Strategy(pb.job_spec.scheduling.strategy).name
            raise ApiError(
                "FAILED_PRECONDITION",
                f"{row.name} does not run on Spot VMs (jobSpec.scheduling.strategy is "
                f"{strategy}); only SPOT jobs are preempted",
                "jobSpec.scheduling.strategy",
            )
        if replica is not None:
            names = [n for n, _, _ in replicas.replica_names(pb.job_spec)]
            if replica not in names:
                raise ApiError(
                    "INVALID_ARGUMENT",
                    f"replica {replica!r} is not a replica of {row.name}; its replicas are "
                    f"{', '.join(names)}",
                    "replica",
                )
        self.lifecycle.request_preempt(row.id, replica)
        self._notify(row.id)
        attempts = self.store.attempts(row.id)
        current = attempts[-1] if attempts and attempts[-1].end_time is None else None
        return {
            "name": row.name,
            "attempt": current.attempt if current else len(attempts) + 1,
            "state": row.state,
            **({"replica": replica} if replica is not None else {}),
        }

    def attempts(self, name: str) -> list[dict[str, Any]]:
        """The ledger rows of a job, as served by the ``/attempts`` endpoint."""
        row = self._row(name)
        return [billing.ledger_row(a) for a in self.store.attempts(row.id)]

    def logs(
        self, name: str, attempt: int | None = None, replica: str | None = None, tail: int = 0
    ) -> list[dict[str, Any]]:
        """Log text per attempt and replica (the last ``tail`` bytes of each when > 0)."""
        row = self._row(name)
        root = self.state_dir.log_dir(row.id)
        out: list[dict[str, Any]] = []
        for att in self.store.attempts(row.id):
            if attempt is not None and att.attempt != attempt:
                continue
            folder = root / f"attempt-{att.attempt}"
            for path in sorted(folder.glob("*.log")) if folder.is_dir() else []:
                if replica is not None and path.stem != replica:
                    continue
                data = path.read_bytes()
                if tail > 0:
                    data = data[-tail:]
                out.append(
                    {
                        "attempt": att.attempt,
                        "replica": path.stem,
                        "path": str(path),
                        "text": data.decode("utf-8", "replace"),
                    }
                )
        return out

    def all_jobs(self, parent: str | None = None) -> list[Any]:
        """Every job (of ``parent`` when given, else of every project), newest first."""
        return [self.to_proto(row) for row in self.store.jobs(parent)]

    def summaries(self) -> list[dict[str, str]]:
        """Name, state and display name of every job of every project, newest first."""
        return [
            {"name": r.name, "state": r.state, "displayName": r.display_name}
            for r in self.store.jobs()
        ]

    def resolve(self, job: str) -> str:
        """The resource name of a job given by name or by bare numeric id.

        Raises:
            ApiError: NOT_FOUND for an id no job has.
        """
        if job.isdigit():
            row = self.store.job(job)
            if row is None or row.deleted:
                raise ApiError("NOT_FOUND", f"no CustomJob with id {job}", "name")
            return row.name
        return job

    # views ------------------------------------------------------------------------------------

    def _row(self, name: str) -> JobRow:
        parent, job_id = parse_name(name)
        row = self.store.job(job_id)
        if row is None or row.deleted or row.parent != parent:
            raise ApiError("NOT_FOUND", f"The CustomJob {name} does not exist.", "name")
        return row

    def to_proto(self, row: JobRow) -> Any:
        """The CustomJob as the API shows it: the spec plus name, state, times and error."""
        pb = self.lifecycle.spec(row)
        pb.name = row.name
        pb.state = int(JobState[row.state])
        pb.create_time.FromNanoseconds(int(row.create_time * 1e9))
        pb.update_time.FromNanoseconds(int(row.update_time * 1e9))
        if row.start_time is not None:
            pb.start_time.FromNanoseconds(int(row.start_time * 1e9))
        if row.end_time is not None:
            pb.end_time.FromNanoseconds(int(row.end_time * 1e9))
        if row.error_code:
            pb.error.code = row.error_code
            pb.error.message = row.error_message or ""
        return pb
