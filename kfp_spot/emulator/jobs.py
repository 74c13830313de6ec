"""The CustomJob API of the emulator: create, get, list, cancel, delete; operations; extensions.

It parses and validates requests, answers in the API's shapes and raises
:class:`~kfp_spot.emulator.errors.ApiError`; every state change goes through the
:class:`~kfp_spot.emulator.lifecycle.Lifecycle`, and ``notify(job_id)`` tells the scheduler (and
the job's running attempt) that something was asked of a job.

What Vertex AI does and the emulator does too (docs/emulator.md says which is documented):
names carry the project number (a request may name the project by ID or number); ids are int64;
the returned spec has the service's documented defaults filled in; list pages carry opaque,
signed page tokens tied to their query and honour ``readMask``; delete answers a location-scoped
long-running operation with ``DeleteOperationMetadata`` that can be fetched afterwards;
``webAccessUris`` is filled per replica while a job with ``enableWebAccess`` runs.

Why one module: this is the CustomJob API surface, one method per REST method on one class;
lifecycle, scheduling, billing, HTTP and serving already live in their own modules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from google.cloud.aiplatform_v1.types.custom_job import CustomJob, Scheduling
from google.cloud.aiplatform_v1.types.job_service import ListCustomJobsResponse
from google.cloud.aiplatform_v1.types.job_state import JobState
from google.cloud.aiplatform_v1.types.operation import DeleteOperationMetadata
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2, json_format

from kfp_spot.emulator import billing, containers, filters, listing, names, replicas
from kfp_spot.emulator.answers import AnswerCache
from kfp_spot.emulator.errors import ApiError, proto_path, rule_error
from kfp_spot.emulator.lifecycle import Lifecycle, flex_start_deadline
from kfp_spot.emulator.pagetokens import PageTokens
from kfp_spot.emulator.payloads import parse_message
from kfp_spot.emulator.scheduler import Capacity
from kfp_spot.emulator.scope import check_location
from kfp_spot.emulator.statedir import StateDir, attempt_log_dir
from kfp_spot.emulator.states import CANCELLING, QUEUED, RUNNING
from kfp_spot.emulator.store import JobBrief, JobRow, JobScan, OperationRow, Store
from kfp_spot.vertex import InvalidJobSpecError, validate_custom_job
from kfp_spot.vertex.values import INT32_MAX

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
# DiskSpec's documented defaults: boot_disk_type "pd-ssd" ("hyperdisk-balanced" on A3 Ultra
# machines), boot_disk_size_gb 100.
DEFAULT_BOOT_DISK_GB = 100

_NAME = re.compile(r"(projects/[^/]+/locations/[^/]+)/customJobs/([^/:]+)")
_OPERATION = re.compile(r"(projects/[^/]+/locations/[^/]+)/operations/([^/:]+)")
_SPOT = int(Scheduling.Strategy.SPOT)
_CUSTOM_JOB = CustomJob.pb()
_OUTPUT_ONLY = (
    "name",
    "state",
    "create_time",
    "start_time",
    "end_time",
    "update_time",
    "error",
    "web_access_uris",
    "satisfies_pzs",
    "satisfies_pzi",
)


def parse_name(name: str) -> tuple[str, str]:
    """Split ``projects/P/locations/L/customJobs/ID`` into (canonical parent, id).

    The parent comes back as ``projects/NUMBER/locations/L`` whether P was an ID or a number.

    Raises:
        ApiError: INVALID_ARGUMENT when the name has another shape.
    """
    match = _NAME.fullmatch(name or "")
    if not match:
        raise ApiError(
            "INVALID_ARGUMENT",
            f"name {name!r} is not a CustomJob name; expected "
            "projects/PROJECT/locations/LOCATION/customJobs/ID",
            "name",
        )
    return names.parse_parent(match.group(1)).canonical, match.group(2)


def _parent(parent: str) -> names.Parent:
    """The parent of a create or list; a location Vertex AI runs no CustomJobs in is refused."""
    try:
        where = names.parse_parent(parent)
    except ValueError as err:
        raise ApiError("INVALID_ARGUMENT", f"parent: {err}", "parent") from None
    check_location(where.location, "parent")  # the route did; again for a call from Python
    return where


def _field_mask(text: str) -> Any | None:
    """The ``readMask`` query parameter as a FieldMask of CustomJob, None for every field."""
    try:
        return listing.field_mask(text, _CUSTOM_JOB.DESCRIPTOR)
    except filters.FilterError as err:
        raise ApiError("INVALID_ARGUMENT", f"readMask: {err}", "read_mask") from None


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


class CustomJobApi:
    """The emulated JobService (CustomJob methods and their operations) and extensions.

    Args:
        store: the durable state (read here; written through ``lifecycle``).
        lifecycle: every change of a job's state.
        capacity: refuses jobs that could never run here.
        state_dir: where attempt logs are.
        container_runtime: the container runtime probe (containerSpec jobs need one).
        notify: called with a job id after a request that the scheduler or the job's running
            attempt must act on.
        alarm: ``alarm(when, job_id)`` calls ``notify(job_id)`` at wall time ``when`` (the end
            of a FLEX_START job's wait for capacity); None when nothing needs waking.
    """

    def __init__(
        self,
        store: Store,
        lifecycle: Lifecycle,
        capacity: Capacity,
        state_dir: StateDir,
        container_runtime: Callable[[], str | None],
        notify: Callable[[str], None],
        alarm: Callable[[float, str], None] | None = None,
    ) -> None:
        self.store = store
        self.lifecycle = lifecycle
        self.capacity = capacity
        self.state_dir = state_dir
        self.container_runtime = container_runtime
        self._notify = notify
        self._alarm = alarm
        self._tokens = PageTokens(store.secret())
        self.base_url = ""  # set by the HTTP server: the root of webAccessUris
        self._answers = AnswerCache(store.job_version, self._answer_json)
        self._job_labels: dict[str, dict[str, str]] = {}

    # CustomJob methods ------------------------------------------------------------------------

    def create_job(self, parent: str, body: Any) -> Any:
        """Validate and store a CustomJob; returns its protobuf with name and state set."""
        where = _parent(parent)
        pb = parse_message(body, _CUSTOM_JOB, "custom_job")
        for output_only in _OUTPUT_ONLY:  # ignored on create, as the service does
            pb.ClearField(output_only)
        try:
            validate_custom_job(pb, location=where.location)
        except InvalidJobSpecError as err:
            raise rule_error(err.field, err.message, _CUSTOM_JOB.DESCRIPTOR) from None
        for index, pool in enumerate(pb.job_spec.worker_pool_specs):
            if pool.HasField("container_spec") and not self.container_runtime():
                raise ApiError(
                    "FAILED_PRECONDITION",
                    f"jobSpec.workerPoolSpecs[{index}].containerSpec: running a container needs "
                    f"a container runtime (docker or podman) and {containers.no_runtime()}; "
                    "use pythonPackageSpec to run the job as local processes",
                    f"job_spec.worker_pool_specs[{index}].container_spec",
                )
        try:
            self.capacity.check(pb, where.location)
        except ApiError as err:
            err.field = proto_path(err.field, _CUSTOM_JOB.DESCRIPTOR) if err.field else err.field
            raise
        _fill_defaults(pb)
        row = self.lifecycle.submit(where.canonical, pb, project_id=where.project)
        deadline = flex_start_deadline(row, pb)
        if deadline is not None and self._alarm is not None:
            self._alarm(deadline, row.id)
        self._notify(row.id)
        return self.to_proto(row)

    def get_job(self, name: str) -> Any:
        """The CustomJob called ``name``."""
        return self.to_proto(self._row(name))

    def get_job_json(self, name: str, int_enums: bool = False) -> str:
        """The CustomJob called ``name`` as the GET answers it (JSON text).

        :func:`message_json` of :meth:`get_job`, kept until the job's row is written again
        (see ``answers``).
        """
        parent, job_id = parse_name(name)
        answer = self._answers.current(job_id, int_enums)
        if answer is None:
            read_at = self.store.job_version(job_id)  # before the row: see answers.py
            row = self.store.job(job_id)
            if row is None:
                raise ApiError("NOT_FOUND", f"The CustomJob {name} does not exist.", "name")
            answer = self._answers.build(row, int_enums, read_at)
        if answer.deleted or answer.parent != parent:
            raise ApiError("NOT_FOUND", f"The CustomJob {name} does not exist.", "name")
        return answer.json

    def list_jobs_json(
        self,
        parent: str,
        filter_text: str = "",
        page_size: int = 0,
        page_token: str = "",
        read_mask: str = "",
        int_enums: bool = False,
    ) -> str:
        """A page of the parent's jobs, newest first, as a ``ListCustomJobsResponse``'s JSON.

        The same text as :func:`list_json` of the jobs' protobufs: each job's JSON is its GET
        answer (kept, see ``answers``) unless ``readMask`` picks fields.
        """
        canonical = _parent(parent).canonical
        try:
            predicate = filters.compile_filter(filter_text or "")
        except filters.FilterError as err:
            raise ApiError("INVALID_ARGUMENT", f"filter: {err}", "filter") from None
        if not 0 <= page_size <= INT32_MAX:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"pageSize is {page_size}; it must be between 0 and {INT32_MAX} "
                f"(0: the default of {DEFAULT_PAGE_SIZE}; at most {MAX_PAGE_SIZE} are returned)",
                "page_size",
            )
        mask = _field_mask(read_mask)
        size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        query = hashlib.sha256(f"{canonical}\0{filter_text}".encode("utf-8", "replace"))
        query_key = query.hexdigest()[:16]
        after = self._tokens.read(page_token, query_key) if page_token else None
        page: list[JobBrief] = []
        more = False
        read_at = self.store.last_version()  # before the scan: see answers.py
        with self.store.job_scan() as scan:  # the filter and the answers see one commit
            with contextlib.closing(scan.brief(canonical, after)) as briefs:
                for brief in briefs:  # newest (highest seq) first
                    labels = self._labels(brief.id, scan)
                    record = filters.Record(
                        brief.state, brief.display_name, labels, brief.create_time
                    )
                    if predicate(record):
                        if len(page) == size:
                            more = True
                            break
                        page.append(brief)
            token = self._tokens.issue(page[-1].seq, query_key) if more else ""
            if mask is not None:
                masked = [
                    listing.masked(self.to_proto(self._scanned(scan, b.id)), mask) for b in page
                ]
                return list_json(ListCustomJobsResponse, "custom_jobs", masked, token, int_enums)
            texts = []
            for brief in page:
                answer = self._answers.current(brief.id, int_enums, at_most=read_at)
                if answer is None:
                    version = self.store.job_version(brief.id)
                    kept_at = version if version <= read_at else None
                    answer = self._answers.build(self._scanned(scan, brief.id), int_enums, kept_at)
                texts.append(answer.json)
        return list_texts("customJobs", texts, token)

    def _labels(self, job_id: str, scan: JobScan) -> dict[str, str]:
        """A job's labels (its spec never changes once stored), read once."""
        labels = self._job_labels.get(job_id)
        if labels is None:
            labels = self._job_labels[job_id] = dict(
                self.lifecycle.spec(self._scanned(scan, job_id)).labels
            )
        return labels

    @staticmethod
    def _scanned(scan: JobScan, job_id: str) -> JobRow:
        row = scan.job(job_id)
        if row is None:
            raise LookupError(f"job {job_id} is not in the store")  # it was in this scan
        return row

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

    def delete_job(self, name: str) -> Any:
        """Delete a finished job; returns its (done) long-running operation."""
        row = self._row(name)
        if not row.terminal:
            raise ApiError(
                "FAILED_PRECONDITION",
                f"{row.name} is in state {row.state}; cancel it and wait for "
                "JOB_STATE_CANCELLED before deleting it",
                "name",
            )
        created = time.time()
        self.lifecycle.delete(row.id)
        op = OperationRow(
            id=names.new_id(),
            parent=row.parent,
            kind="delete",
            target=row.name,
            create_time=created,
            update_time=time.time(),
            done=1,
        )
        self.store.insert_operation(dataclasses.asdict(op))
        return self._operation(op)

    # operations -------------------------------------------------------------------------------

    def get_operation(self, name: str) -> Any:
        """The long-running operation called ``projects/P/locations/L/operations/ID``."""
        return self._operation(self._operation_row(name))

    def delete_operation(self, name: str) -> None:
        """Forget an operation (its outcome is no longer fetchable)."""
        self.store.delete_operation(self._operation_row(name).id)

    def cancel_operation(self, name: str) -> None:
        """Cancel an operation; every operation here is done already, so nothing changes."""
        self._operation_row(name)

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
                "job_spec.scheduling.strategy",
            )
        if replica is not None:
            known = [n for n, _, _ in replicas.replica_names(pb.job_spec)]
            if replica not in known:
                raise ApiError(
                    "INVALID_ARGUMENT",
                    f"replica {replica!r} is not a replica of {row.name}; its replicas are "
                    f"{', '.join(known)}",
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
        out: list[dict[str, Any]] = []
        attempts = self.store.attempts(row.id)
        if attempt is not None and attempt not in {att.attempt for att in attempts}:
            had = f"attempts 1..{len(attempts)}" if attempts else "no attempt yet"
            raise ApiError(
                "NOT_FOUND", f"{row.name} has no attempt {attempt}: it has {had}", "attempt"
            )
        for att in attempts:
            if attempt is not None and att.attempt != attempt:
                continue
            folder = attempt_log_dir(self.state_dir.path, row.id, att.attempt)
            for path in sorted(folder.glob("*.log")):
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
        canonical = _parent(parent).canonical if parent is not None else None
        return [self.to_proto(row) for row in self.store.jobs(canonical)]

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

    def flex_start_deadlines(self) -> list[tuple[float, str]]:
        """(deadline, job id) of every FLEX_START job still waiting for its first VMs."""
        out = []
        for row in self.store.jobs(states=[QUEUED]):
            deadline = flex_start_deadline(row, self.lifecycle.spec(row))
            if deadline is not None:
                out.append((deadline, row.id))
        return out

    # views ------------------------------------------------------------------------------------

    def _row(self, name: str) -> JobRow:
        parent, job_id = parse_name(name)
        row = self.store.job(job_id)
        if row is None or row.deleted or row.parent != parent:
            raise ApiError("NOT_FOUND", f"The CustomJob {name} does not exist.", "name")
        return row

    def _operation_row(self, name: str) -> OperationRow:
        match = _OPERATION.fullmatch(name or "")
        if not match:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"name {name!r} is not an operation name; expected "
                "projects/PROJECT/locations/LOCATION/operations/ID",
                "name",
            )
        row = self.store.operation(match.group(2))
        if row is None or row.parent != names.parse_parent(match.group(1)).canonical:
            raise ApiError("NOT_FOUND", f"Operation {name} is not found.", "name")
        return row

    def _operation(self, row: OperationRow) -> Any:
        """A done operation with DeleteOperationMetadata and an Empty response."""
        metadata = DeleteOperationMetadata.pb()()
        metadata.generic_metadata.create_time.FromNanoseconds(int(row.create_time * 1e9))
        metadata.generic_metadata.update_time.FromNanoseconds(int(row.update_time * 1e9))
        op = operations_pb2.Operation(name=row.name, done=bool(row.done))
        op.metadata.Pack(metadata)
        op.response.Pack(empty_pb2.Empty())
        return op

    def to_proto(self, row: JobRow) -> Any:
        """The CustomJob as the API shows it: the spec plus name, state, times and error."""
        pb = self.lifecycle.spec(row)
        pb.name = row.name
        pb.state = int(JobState.__members__[row.state])
        pb.create_time.FromNanoseconds(int(row.create_time * 1e9))
        pb.update_time.FromNanoseconds(int(row.update_time * 1e9))
        if row.start_time is not None:
            pb.start_time.FromNanoseconds(int(row.start_time * 1e9))
        if row.end_time is not None:
            pb.end_time.FromNanoseconds(int(row.end_time * 1e9))
        if row.error_code:
            pb.error.code = row.error_code
            pb.error.message = row.error_message or ""
        if pb.job_spec.enable_web_access and row.state == RUNNING:
            for pool_index, pool in enumerate(pb.job_spec.worker_pool_specs):
                if not pool.ByteSize():
                    continue
                for index in range(pool.replica_count):
                    replica = f"workerpool{pool_index}-{index}"
                    pb.web_access_uris[replica] = (
                        f"{self.base_url}/emulator/v1/{row.name}/logs?replica={replica}"
                    )
        return pb

    def _answer_json(self, row: JobRow, int_enums: bool) -> str:
        return message_json(self.to_proto(row), int_enums)


def _fill_defaults(pb: Any) -> None:
    """The documented defaults the service fills into a stored CustomJob (``DiskSpec``)."""
    for pool in pb.job_spec.worker_pool_specs:
        if not pool.ByteSize():
            continue  # an empty placeholder pool stays empty
        disk = pool.disk_spec
        if not disk.boot_disk_type:
            a3_ultra = pool.machine_spec.machine_type.startswith("a3-ultragpu")
            disk.boot_disk_type = "hyperdisk-balanced" if a3_ultra else "pd-ssd"
        if not disk.boot_disk_size_gb:
            disk.boot_disk_size_gb = DEFAULT_BOOT_DISK_GB


def message_json(pb: Any, int_enums: bool = False) -> str:
    """Protobuf JSON of an answer (camelCase; enums as numbers when the client asks)."""
    return json_format.MessageToJson(pb, use_integers_for_enums=int_enums, indent=None)


def list_json(
    response_type: Any, field_name: str, items: Iterable[Any], token: str, int_enums: bool
) -> str:
    """Every list method's answer: ``response_type`` with ``items`` and the next page token.

    ``items`` go in the response's ``field_name``; the JSON is :func:`message_json`'s.
    """
    response = response_type.pb()(next_page_token=token)
    getattr(response, field_name).extend(items)
    return message_json(response, int_enums)


def list_texts(json_name: str, texts: Sequence[str], token: str) -> str:
    """A list answer from its items' :func:`message_json` texts.

    The same text as :func:`list_json` of the items (the JSON mapping omits an empty list and an
    empty token).
    """
    parts = []
    if texts:
        parts.append(f"{json.dumps(json_name)}: [{', '.join(texts)}]")
    if token:
        parts.append(f'"nextPageToken": {json.dumps(token)}')
    return "{" + ", ".join(parts) + "}"
