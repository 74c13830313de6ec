"""The emulator's service: CustomJob API semantics, scheduling, attempts, preemption and billing.

The HTTP layer (``server.py``) only maps requests onto :class:`Service` methods; everything a job
goes through is here. States follow Vertex: QUEUED (waiting for capacity) -> PENDING (installing
packages, starting replicas) -> RUNNING -> SUCCEEDED | FAILED, or CANCELLING -> CANCELLED. A
preempted attempt ends with STOCKOUT and the job is queued again, up to ``MAX_RESTARTS`` times.
"""

from __future__ import annotations

import base64
import fcntl
import logging
import random
import re
import secrets
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from google.cloud.aiplatform_v1.types import AcceleratorType, CustomJob, JobState, Scheduling
from google.protobuf import json_format

from kfp_spot import machines
from kfp_spot.emulator import filters, replicas
from kfp_spot.emulator.runner import AttemptRunner
from kfp_spot.emulator.states import (
    ACTIVE_STATES,
    CANCELLED,
    CANCELLING,
    CODE_CANCELLED,
    CODE_RESOURCE_EXHAUSTED,
    FAILED,
    PENDING,
    QUEUED,
    RUNNING,
    SUCCEEDED,
)
from kfp_spot.emulator.store import AttemptRow, JobRow, Store
from kfp_spot.validation import InvalidJobSpecError, validate_custom_job

log = logging.getLogger(__name__)

MAX_RESTARTS = 6
MAX_REPLICAS = 64  # every replica is a local process
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
}

_NAME = re.compile(r"^(projects/[^/]+/locations/[^/]+)/customJobs/([^/:]+)$")
_SPOT = int(Scheduling.Strategy.SPOT)


class ApiError(Exception):
    """An error answered as a Google JSON error (``{"error": {"code", "message", "status"}}``).

    Attributes:
        status: the canonical status name, e.g. ``INVALID_ARGUMENT``.
        message: what is wrong and what would be valid.
        field: the offending request field, when there is one.
    """

    def __init__(self, status: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field

    @property
    def http_status(self) -> int:
        """The HTTP status ``google.api_core.exceptions`` maps back to this status."""
        return HTTP_STATUS.get(self.status, 500)

    def to_json(self) -> dict[str, Any]:
        """The Google JSON error body."""
        error: dict[str, Any] = {
            "code": self.http_status,
            "message": self.message,
            "status": self.status,
        }
        if self.field:
            error["details"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [{"field": self.field, "description": self.message}],
                }
            ]
        return {"error": error}


@dataclass(frozen=True)
class PreemptionPolicy:
    """When Spot attempts are preempted without being asked.

    Attributes:
        preempt_at: attempt *i* (1-based) is preempted ``preempt_at[i-1]`` seconds after it
            started RUNNING.
        preempt_every: for attempts past ``preempt_at``: preempt after an exponentially
            distributed time with this mean (seconds); None for never.
        seed: makes the random times reproducible (same job order, same times).
    """

    preempt_at: tuple[float, ...] = ()
    preempt_every: float | None = None
    seed: int | None = None

    def delay(self, job_seq: int, attempt: int) -> float | None:
        """Seconds after RUNNING at which this attempt is preempted, or None."""
        if attempt <= len(self.preempt_at):
            return self.preempt_at[attempt - 1]
        if self.preempt_every:
            rng = random.Random(f"{self.seed}:{job_seq}:{attempt}")
            if self.seed is None:
                rng.seed()
            return rng.expovariate(1.0 / self.preempt_every)
        return None


def rfc3339(ts: float | None) -> str | None:
    """Epoch seconds as an RFC 3339 UTC string (None stays None)."""
    if ts is None:
        return None
    return (
        datetime.fromtimestamp(ts, tz=timezone.utc)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def parse_name(name: str) -> tuple[str, str]:
    """Split ``projects/P/locations/L/customJobs/ID`` into (parent, id).

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
    return match.group(1), match.group(2)


_PARSE_PATH = re.compile(r'at "CustomJob\.([^"]+?)\.?"')


def _parse_error(err: Exception) -> ApiError:
    """A 400 for a body the message classes refuse, naming the field where the parser stopped."""
    text = str(err)
    match = _PARSE_PATH.search(text)
    field = match.group(1) if match else None
    hint = ""
    if "multiple" in text and '"task" oneof' in text:
        hint = " Set exactly one of containerSpec or pythonPackageSpec per worker pool."
    elif "multiple" in text and "oneof" in text:
        hint = " Set only one field of that oneof."
    return ApiError("INVALID_ARGUMENT", f"Invalid JSON payload received. {text}{hint}", field)


def container_runtime() -> str | None:
    """The container runtime (``docker`` or ``podman``) that answers, or None."""
    for tool in ("docker", "podman"):
        exe = shutil.which(tool)
        if not exe:
            continue
        try:
            probe = subprocess.run([exe, "info"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return exe
    return None


class StateDirBusyError(RuntimeError):
    """Another emulator is using the state dir."""


def _lock_state_dir(state_dir: Path) -> IO[str]:
    """Hold an exclusive lock on the state dir for the emulator's lifetime (released on exit).

    Two emulators on one state dir would each take the other's running attempts for orphans.
    """
    handle = open(state_dir / "emulator.lock", "w")  # noqa: SIM115 - held until stop()
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise StateDirBusyError(
            f"another emulator is using the state dir {state_dir}; stop it or pick another "
            "--state-dir"
        ) from None
    return handle


class Service:
    """The emulated JobService plus its scheduler.

    Args:
        state_dir: where the SQLite state, logs and working directories live.
        grace_period: seconds between SIGTERM and SIGKILL when an attempt is stopped.
        policy: automatic preemptions of Spot attempts.
        capacity: simulated VMs per machine type (an int for every type, or a mapping with an
            optional ``"*"`` default); None for unlimited.
        env_cache_dir: where package environments are cached (default ``state_dir/envs``).
        shutdown_grace: the grace period used when the emulator itself stops (at most
            ``grace_period``).
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        grace_period: float = 30.0,
        policy: PreemptionPolicy | None = None,
        capacity: int | Mapping[str, int] | None = None,
        env_cache_dir: Path | None = None,
        shutdown_grace: float = 10.0,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._lock_file = _lock_state_dir(self.state_dir)
        self.store = Store(self.state_dir / "emulator.sqlite")
        self.grace_period = grace_period
        self.shutdown_grace = min(shutdown_grace, grace_period)
        self.policy = policy or PreemptionPolicy()
        self.capacity = capacity
        self.env_cache_dir = Path(env_cache_dir) if env_cache_dir else self.state_dir / "envs"
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._runners: dict[str, AttemptRunner] = {}
        self._in_use: Counter[str] = Counter()
        self._specs: dict[str, bytes] = {}
        self._thread: threading.Thread | None = None
        self._runtime: str | bool | None = False  # False: not probed yet

    # lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Recover jobs a previous emulator left running, then start scheduling."""
        self._recover()
        self._thread = threading.Thread(target=self._loop, name="emulator-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop scheduling; running attempts end as EMULATOR_RESTARTED and resume next start."""
        self._stopping.set()
        self._wake()
        if self._thread:
            self._thread.join()
        with self._cond:
            runners = list(self._runners.values())
        for runner in runners:
            runner.join()
        self.store.close()
        self._lock_file.close()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # API --------------------------------------------------------------------------------------

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
            raise _parse_error(err) from None
        except RecursionError:
            raise ApiError("INVALID_ARGUMENT", "Invalid JSON payload: nested too deeply") from None
        try:
            validate_custom_job(pb)
        except InvalidJobSpecError as err:
            raise ApiError("INVALID_ARGUMENT", str(err), err.field) from None
        for index, pool in enumerate(pb.job_spec.worker_pool_specs):
            if pool.HasField("container_spec") and not self._container_runtime():
                raise ApiError(
                    "FAILED_PRECONDITION",
                    f"jobSpec.workerPoolSpecs[{index}].containerSpec: running a container needs "
                    "a container runtime (docker or podman) and none answers on this machine; "
                    "use pythonPackageSpec to run the job as local processes",
                    f"jobSpec.workerPoolSpecs[{index}].containerSpec",
                )
        self._check_capacity(pb)
        for output_only in (
            "name",
            "state",
            "create_time",
            "start_time",
            "end_time",
            "update_time",
            "error",
            "web_access_uris",
        ):
            pb.ClearField(output_only)
        now = time.time()
        spec = pb.SerializeToString()
        while True:
            job_id = str(secrets.randbelow(9 * 10**18) + 10**18)
            inserted = self.store.insert_job(
                {
                    "id": job_id,
                    "parent": parent,
                    "display_name": pb.display_name,
                    "spec": base64.b64encode(spec).decode(),
                    "state": QUEUED,
                    "create_time": now,
                    "update_time": now,
                    "queued_since": now,
                }
            )
            if inserted:
                break
        self._specs[job_id] = spec
        self._wake()
        row = self.store.job(job_id)
        assert row is not None
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
            pb = self._spec(row)
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
        changed = self.store.update_job_if(
            row.id, ACTIVE_STATES, state=CANCELLING, cancel_requested=1, update_time=time.time()
        )
        if not changed:  # it finished meanwhile
            return self.cancel_job(name)
        self._wake()

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
        self.store.update_job(row.id, deleted=1, update_time=time.time())
        return {
            "name": f"{row.name}/operations/{secrets.randbelow(10**18)}",
            "done": True,
            "response": {"@type": "type.googleapis.com/google.protobuf.Empty"},
        }

    def preempt(self, name: str) -> dict[str, Any]:
        """Preempt the running attempt of a Spot job (or the next one as soon as it runs)."""
        row = self._row(name)
        if row.terminal or row.state == CANCELLING:
            raise ApiError(
                "FAILED_PRECONDITION",
                f"{row.name} is in state {row.state}; only a queued, pending or running job "
                "can be preempted",
                "name",
            )
        pb = self._spec(row)
        if pb.job_spec.scheduling.strategy != _SPOT:
            strategy = Scheduling.Strategy(pb.job_spec.scheduling.strategy).name
            raise ApiError(
                "FAILED_PRECONDITION",
                f"{row.name} does not run on Spot VMs (jobSpec.scheduling.strategy is "
                f"{strategy}); only SPOT jobs are preempted",
                "jobSpec.scheduling.strategy",
            )
        self.store.update_job_if(row.id, (QUEUED, PENDING, RUNNING), preempt_requested=1)
        self._wake()
        attempts = self.store.attempts(row.id)
        current = attempts[-1] if attempts and attempts[-1].end_time is None else None
        return {
            "name": row.name,
            "attempt": current.attempt if current else len(attempts) + 1,
            "state": row.state,
        }

    def attempts(self, name: str) -> list[dict[str, Any]]:
        """The ledger rows of a job, as served by the ``/attempts`` endpoint."""
        row = self._row(name)
        return [self.ledger_row(a) for a in self.store.attempts(row.id)]

    def logs(
        self, name: str, attempt: int | None = None, replica: str | None = None, tail: int = 0
    ) -> list[dict[str, Any]]:
        """Log text per attempt and replica (the last ``tail`` bytes of each when > 0)."""
        row = self._row(name)
        root = self.log_dir(row.id)
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

    # views ------------------------------------------------------------------------------------

    def _row(self, name: str) -> JobRow:
        parent, job_id = parse_name(name)
        row = self.store.job(job_id)
        if row is None or row.deleted or row.parent != parent:
            raise ApiError("NOT_FOUND", f"The CustomJob {name} does not exist.", "name")
        return row

    def _spec(self, row: JobRow) -> Any:
        raw = self._specs.get(row.id)
        if raw is None:
            raw = base64.b64decode(row.spec)
            self._specs[row.id] = raw
        pb = CustomJob.pb()()
        pb.ParseFromString(raw)
        return pb

    def to_proto(self, row: JobRow) -> Any:
        """The CustomJob as the API shows it: the spec plus name, state, times and error."""
        pb = self._spec(row)
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

    def ledger_row(self, att: AttemptRow, now: float | None = None) -> dict[str, Any]:
        """One ledger line: RUNNING time only is billable, at the Spot and on-demand prices."""
        end = att.end_time
        if att.start_time is None:
            billable = 0.0
        else:
            stop = end if end is not None else (now or time.time())
            billable = max(0.0, stop - att.start_time)
        hours = billable / 3600.0
        # rounded first, so every row adds up exactly: savings == onDemandCost - cost
        spot_cost = round(att.spot_usd_per_hour * hours, 6)
        on_demand_cost = round(att.on_demand_usd_per_hour * hours, 6)
        cost = spot_cost if att.strategy == "SPOT" else on_demand_cost
        return {
            "attempt": att.attempt,
            "startTime": rfc3339(att.start_time),
            "endTime": rfc3339(end),
            "endReason": att.end_reason,
            "billableSeconds": round(billable, 3),
            "queuedSeconds": round(att.queued_seconds, 3),
            "machineType": att.machine_type,
            "replicaCount": att.replica_count,
            "strategy": att.strategy,
            "spotCost": spot_cost,
            "onDemandCost": on_demand_cost,
            "cost": cost,
            "savings": round(on_demand_cost - cost, 6),
        }

    def log_dir(self, job_id: str) -> Path:
        """Where the logs of a job's attempts are kept."""
        return self.state_dir / "logs" / job_id

    def runner(self, job_id: str) -> AttemptRunner | None:
        """The runner of the job's current attempt, if one is active."""
        with self._cond:
            return self._runners.get(job_id)

    # scheduling -------------------------------------------------------------------------------

    def _container_runtime(self) -> str | None:
        if self._runtime is False:
            self._runtime = container_runtime()
        return self._runtime or None

    def _capacity_of(self, machine_type: str) -> int | None:
        if self.capacity is None:
            return None
        if isinstance(self.capacity, int):
            return self.capacity
        return self.capacity.get(machine_type, self.capacity.get("*"))

    @staticmethod
    def _needs(pb: Any) -> Counter[str]:
        needs: Counter[str] = Counter()
        for pool in pb.job_spec.worker_pool_specs:
            if pool.ByteSize():
                needs[pool.machine_spec.machine_type] += pool.replica_count
        return needs

    def _check_capacity(self, pb: Any) -> None:
        needs = self._needs(pb)
        if sum(needs.values()) > MAX_REPLICAS:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"the job asks for {sum(needs.values())} replicas; the local emulator runs each "
                f"as a process on this machine and allows at most {MAX_REPLICAS} per job",
                "jobSpec.workerPoolSpecs",
            )
        for machine_type, count in needs.items():
            cap = self._capacity_of(machine_type)
            if cap is not None and count > cap:
                raise ApiError(
                    "RESOURCE_EXHAUSTED",
                    f"the job needs {count} VMs of type {machine_type} but the emulator has "
                    f"capacity for {cap} (kfp-spot emulator start --capacity)",
                    "jobSpec.workerPoolSpecs",
                )

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._schedule_once()
            with self._cond:
                self._cond.wait(0.25)

    def _schedule_once(self) -> None:
        rows = sorted(self.store.jobs(states=[QUEUED, CANCELLING]), key=lambda r: r.seq)
        for row in rows:
            if self._stopping.is_set():
                return
            with self._cond:
                if row.id in self._runners:
                    continue
            if row.cancel_requested:
                now = time.time()
                self.store.update_job(
                    row.id,
                    state=CANCELLED,
                    end_time=now,
                    update_time=now,
                    error_code=CODE_CANCELLED,
                    error_message="CANCELED",
                )
                continue
            pb = self._spec(row)
            needs = self._needs(pb)
            with self._cond:
                fits = all(
                    (cap := self._capacity_of(m)) is None or self._in_use[m] + n <= cap
                    for m, n in needs.items()
                )
                if not fits:
                    continue
                self._in_use.update(needs)
                runner = self._admit(row, pb, needs)
                self._runners[row.id] = runner
            runner.start()

    def _admit(self, row: JobRow, pb: Any, needs: Counter[str]) -> AttemptRunner:
        attempt = len(self.store.attempts(row.id)) + 1
        spot_rate = on_demand_rate = 0.0
        for pool in pb.job_spec.worker_pool_specs:
            if not pool.ByteSize():
                continue
            ms = pool.machine_spec
            acc = machines_acc_name(ms.accelerator_type)
            args = (ms.machine_type, acc, ms.accelerator_count)
            spot_rate += machines.hourly_price(*args, spot=True) * pool.replica_count
            on_demand_rate += machines.hourly_price(*args, spot=False) * pool.replica_count
        now = time.time()
        self.store.admit(
            row.id,
            {
                "job_id": row.id,
                "attempt": attempt,
                "admit_time": now,
                "queued_seconds": 0.0,
                "machine_type": pb.job_spec.worker_pool_specs[0].machine_spec.machine_type,
                "replica_count": sum(needs.values()),
                "strategy": Scheduling.Strategy(pb.job_spec.scheduling.strategy).name
                if pb.job_spec.scheduling.strategy in {int(s) for s in Scheduling.Strategy}
                else str(pb.job_spec.scheduling.strategy),
                "spot_usd_per_hour": spot_rate,
                "on_demand_usd_per_hour": on_demand_rate,
            },
            {"state": PENDING, "update_time": now},
        )
        return AttemptRunner(self, row, pb, attempt, needs)

    def _release(self, runner: AttemptRunner) -> None:
        with self._cond:
            self._in_use.subtract(runner.needs)
            self._runners.pop(runner.job_id, None)
            self._cond.notify_all()

    def _finish_attempt(
        self,
        job_id: str,
        attempt: int,
        reason: str,
        *,
        preempted: bool = False,
        state: str | None = None,
        error: tuple[int, str] | None = None,
        end: float | None = None,
    ) -> None:
        """Record an attempt's end and decide what happens to the job, atomically."""
        now = time.time()
        end = now if end is None else end
        row = self.store.job(job_id)
        assert row is not None
        job: dict[str, Any] = {"update_time": now}
        if preempted:
            job["preemptions"] = row.preemptions + 1
            job["preempt_requested"] = 0
            if row.cancel_requested:
                state = CANCELLED
            elif row.preemptions + 1 > MAX_RESTARTS:
                state = FAILED
                error = (
                    CODE_RESOURCE_EXHAUSTED,
                    f"STOCKOUT: the job's Spot VMs were preempted {row.preemptions + 1} times and "
                    f"it was restarted the maximum of {MAX_RESTARTS} times; "
                    "no Spot capacity to finish it",
                )
            else:
                state = QUEUED
                job["queued_since"] = now
        assert state is not None
        if state == CANCELLED and error is None:
            error = (CODE_CANCELLED, "CANCELED")
        job["state"] = state
        if state in (SUCCEEDED, FAILED, CANCELLED):
            job["end_time"] = now
        if error:
            job["error_code"], job["error_message"] = error
        attempt_fields = {"end_time": end, "end_reason": reason, "last_seen": end}
        self.store.end_attempt(job_id, attempt, attempt_fields, job)
        log.info("job %s attempt %d ended: %s -> %s", job_id, attempt, reason, state)

    def _recover(self) -> None:
        """Attempts that were open when the previous emulator died count as preempted."""
        for att in self.store.open_attempts():
            replicas.stop_orphans(att.process_list, self.shutdown_grace)
            end = att.last_seen or att.start_time or att.admit_time
            if att.start_time is None:  # never ran: just queue the job again
                row = self.store.job(att.job_id)
                state = CANCELLED if row and row.cancel_requested else QUEUED
                self._finish_attempt(att.job_id, att.attempt, "EMULATOR_RESTARTED", state=state)
                continue
            self._finish_attempt(
                att.job_id, att.attempt, "EMULATOR_RESTARTED", preempted=True, end=end
            )
        now = time.time()
        for row in self.store.jobs(states=[PENDING, RUNNING]):
            self.store.update_job(row.id, state=QUEUED, queued_since=now, update_time=now)


def machines_acc_name(value: int) -> str:
    """The ``AcceleratorType`` name of an enum value ("" for unspecified)."""
    if not value:
        return ""
    try:
        return AcceleratorType(value).name
    except ValueError:
        return ""
