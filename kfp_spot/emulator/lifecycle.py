"""The state machine of jobs and attempts: every change of a job's or attempt's state is here.

States follow Vertex: QUEUED (waiting for capacity) -> PENDING (installing packages, starting
replicas) -> RUNNING -> SUCCEEDED | FAILED, or CANCELLING -> CANCELLED. A preempted attempt puts
the job back in QUEUED, up to ``MAX_RESTARTS`` times; the next preemption FAILS it with STOCKOUT.
A worker's VM preempted on its own (the job stays RUNNING, the VM is replaced) draws from the same
budget: every Spot preemption is one of the job's ``MAX_RESTARTS`` restarts. A Spot job whose
region has no Spot capacity waits in PENDING without an attempt (``await_capacity``) and FAILS
with code 8 when the scheduler's stockout wait is over (``stockout``); a running one is preempted
(``reclaim``).
Each transition is one SQLite transaction, committed before the emulator acts on it.

Why one module: this is the state machine, and its point is that every transition of a job or an
attempt is here, each in its own transaction; spread over modules, a new state would again need
edits in several places.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from kfp_spot.emulator import billing, names, orphans, replicas
from kfp_spot.emulator.states import (
    ACTIVE_STATES,
    CANCELLED,
    CANCELLING,
    CODE_CANCELLED,
    CODE_RESOURCE_EXHAUSTED,
    FAILED,
    HEARTBEAT,
    PENDING,
    QUEUED,
    RUNNING,
    SUCCEEDED,
)
from kfp_spot.emulator.store import JobRow, Store

log = logging.getLogger(__name__)

MAX_RESTARTS = 6
DEFAULT_MAX_WAIT_S = 24 * 3600  # Scheduling.max_wait_duration: "The default is 24 hours."
_NO_RETRIES = (
    "STOCKOUT: the job's Spot VMs were preempted and jobSpec.scheduling.disableRetries is set, "
    "so the service does not restart it"
)


def strategy_name(value: int) -> str:
    """The ``Scheduling.Strategy`` name of an enum value (the number as text when unknown)."""
    from google.cloud.aiplatform_v1.types.custom_job import Scheduling

    if value in {int(s) for s in Scheduling.Strategy.__members__.values()}:
        return str(Scheduling.Strategy(value).name)
    return str(value)


class Lifecycle:
    """Moves jobs and attempts through their states in the store.

    Args:
        store: the durable state.
        shutdown_grace: seconds between SIGTERM and SIGKILL for replicas a dead emulator left
            behind (see :meth:`recover`).
    """

    def __init__(self, store: Store, *, shutdown_grace: float) -> None:
        self.store = store
        self.shutdown_grace = shutdown_grace
        self._specs: dict[str, bytes] = {}
        self._specs_lock = threading.Lock()
        # Preempt requests for one worker's VM, by job: taken by the job's running attempt (a
        # request made before it runs waits for it). Not durable: an emulator restart ends the
        # attempt anyway (as a preemption of every VM).
        self._vm_requests: dict[str, set[str]] = {}
        # Heartbeats not yet written, by (job, attempt): see heartbeat().
        self._beats: dict[tuple[str, int], float] = {}
        self._beats_lock = threading.Lock()
        self._beats_flushed = 0.0

    # reads ------------------------------------------------------------------------------------

    def job(self, job_id: str) -> JobRow:
        """The job with this id (it must exist: ids come from the store)."""
        row = self.store.job(job_id)
        if row is None:
            raise LookupError(f"job {job_id} is not in the store")
        return row

    def waiting(self) -> list[JobRow]:
        """Jobs the scheduler looks at, oldest first: QUEUED ones and CANCELLING ones."""
        return sorted(self.store.jobs(states=[QUEUED, CANCELLING]), key=lambda r: r.seq)

    def spec(self, row: JobRow) -> Any:
        """The job's CustomJob as submitted (a fresh raw protobuf the caller may change)."""
        with self._specs_lock:
            raw = self._specs.get(row.id)
            if raw is None:
                raw = self._specs[row.id] = base64.b64decode(row.spec)
        from google.cloud.aiplatform_v1.types.custom_job import CustomJob

        pb = CustomJob.pb()()
        pb.ParseFromString(raw)
        return pb

    # requests from the API --------------------------------------------------------------------

    def submit(self, parent: str, pb: Any, project_id: str | None = None) -> JobRow:
        """Store a validated CustomJob (output-only fields cleared) as a new QUEUED job."""
        now = time.time()
        spec = pb.SerializeToString()
        while True:
            job_id = names.new_id()  # int64, as Vertex's ids
            inserted = self.store.insert_job(
                {
                    "id": job_id,
                    "project_id": project_id,
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
        with self._specs_lock:
            self._specs[job_id] = spec
        return self.job(job_id)

    def request_cancel(self, job_id: str) -> bool:
        """Move an active job to CANCELLING; False when it was no longer active."""
        return self.store.update_job_if(
            job_id, ACTIVE_STATES, state=CANCELLING, cancel_requested=1, update_time=time.time()
        )

    def request_preempt(self, job_id: str, replica: str | None = None) -> bool:
        """Ask for a preemption of the job's current (or next) attempt; False if not active.

        Args:
            job_id: the job.
            replica: only this replica's VM (a worker's VM is replaced while the others run);
                None, or the primary replica, preempts the attempt.
        """
        row = self.job(job_id)
        pb = self.spec(row)
        primary = replicas.replica_names(pb.job_spec)[0][0]
        if replica is None or replica == primary:
            return self.store.update_job_if(job_id, (QUEUED, PENDING, RUNNING), preempt_requested=1)
        if row.state not in (QUEUED, PENDING, RUNNING):
            return False
        with self._specs_lock:
            self._vm_requests.setdefault(job_id, set()).add(replica)
        return True

    def take_vm_requests(self, job_id: str) -> set[str]:
        """The workers whose VM was asked to be preempted since the last call (then forgotten)."""
        with self._specs_lock:
            return self._vm_requests.pop(job_id, set())

    def reclaim(self, job_id: str) -> bool:
        """Ask a preemption of the job's running attempt: Compute Engine reclaims its Spot VMs.

        Its region lost its Spot capacity. False when the job no longer runs an attempt.
        """
        return self.store.update_job_if(job_id, (PENDING, RUNNING), preempt_requested=1)

    def delete(self, job_id: str) -> None:
        """Mark a finished job deleted (it disappears from every view)."""
        self.store.update_job(job_id, deleted=1, update_time=time.time())

    # transitions driven by the scheduler and the attempt runners -----------------------------

    def cancel_queued(self, job_id: str) -> None:
        """A job cancelled while no attempt of it runs ends CANCELLED at once."""
        now = time.time()
        self.store.update_job(
            job_id,
            state=CANCELLED,
            end_time=now,
            update_time=now,
            error_code=CODE_CANCELLED,
            error_message="CANCELED",
        )

    def await_capacity(self, job_id: str) -> bool:
        """QUEUED -> PENDING without VMs: a Spot job waits for Spot capacity (unbilled)."""
        return self.store.update_job_if(job_id, (QUEUED,), state=PENDING, update_time=time.time())

    def requeue(self, job_id: str) -> bool:
        """PENDING (waiting for Spot capacity, no attempt) -> QUEUED: it waits for free VMs."""
        return self.store.update_job_if(job_id, (PENDING,), state=QUEUED, update_time=time.time())

    def stockout(self, job_id: str, message: str) -> bool:
        """A Spot job found no Spot VMs within the stockout wait: FAILED with code 8.

        Only a job with no attempt running (QUEUED, or PENDING waiting for capacity); its
        ``startTime`` stays what it was (unset when it never ran). False when it had left them.
        """
        now = time.time()
        failed = self.store.update_job_if(
            job_id,
            (QUEUED, PENDING),
            state=FAILED,
            end_time=now,
            update_time=now,
            error_code=CODE_RESOURCE_EXHAUSTED,
            error_message=message,
        )
        if failed:
            with self._specs_lock:
                self._vm_requests.pop(job_id, None)
            log.info("job %s: no Spot capacity within the stockout wait, failed", job_id)
        return failed

    def admit(self, row: JobRow, pb: Any, replica_count: int) -> int:
        """QUEUED -> PENDING: record a new attempt (with its hourly rates); returns its number."""
        attempt = len(self.store.attempts(row.id)) + 1
        spot_rate, on_demand_rate = billing.hourly_rates(pb.job_spec)
        now = time.time()
        self.store.admit(
            row.id,
            {
                "job_id": row.id,
                "attempt": attempt,
                "admit_time": now,
                "queued_seconds": 0.0,
                "machine_type": pb.job_spec.worker_pool_specs[0].machine_spec.machine_type,
                "replica_count": replica_count,
                "strategy": strategy_name(pb.job_spec.scheduling.strategy),
                "spot_usd_per_hour": spot_rate,
                "on_demand_usd_per_hour": on_demand_rate,
            },
            {"state": PENDING, "update_time": now},
        )
        return attempt

    def vm_lives(self, job_id: str) -> Counter[str]:
        """How many times each replica has been started in the job's attempts so far."""
        lives: Counter[str] = Counter()
        for att in self.store.attempts(job_id):
            for vm in att.process_list:
                runs = vm.get("runs")
                lives[vm["replica"]] += len(runs) if isinstance(runs, list) else 1
        return lives

    def mark_running(
        self, job_id: str, attempt: int, processes: Sequence[Mapping[str, Any]]
    ) -> None:
        """PENDING -> RUNNING (CANCELLING if a cancel came meanwhile): billing starts now.

        Every replica's VM starts its first run (and its billing) now, at its own hourly rates:
        the attempt's ``processes`` records are ``{replica, pid, token, machine_type,
        spot_usd_per_hour, on_demand_usd_per_hour, runs: [[start, end, reason], ...]}``.
        """
        started = time.time()
        row = self.job(job_id)
        spec = self.spec(row).job_spec
        pool_of = {name: pool for name, pool, _ in replicas.replica_names(spec)}
        vms = []
        for proc in processes:
            pool = spec.worker_pool_specs[pool_of[proc["replica"]]]
            spot, on_demand = billing.pool_rates(pool)
            vms.append(
                {
                    **proc,
                    "machine_type": pool.machine_spec.machine_type,
                    "spot_usd_per_hour": spot,
                    "on_demand_usd_per_hour": on_demand,
                    "runs": [[started, None, None]],
                }
            )
        self.store.end_attempt(
            job_id,
            attempt,
            {
                "start_time": started,
                "last_seen": started,
                "queued_seconds": max(0.0, started - (row.queued_since or row.create_time)),
                "processes": json.dumps(vms),
            },
            {
                "state": RUNNING if not row.cancel_requested else CANCELLING,
                "update_time": started,
                **({"start_time": started} if row.start_time is None else {}),
            },
        )

    def _vms(self, job_id: str, attempt: int) -> list[dict[str, Any]]:
        for att in self.store.attempts(job_id):
            if att.attempt == attempt:
                return att.process_list
        raise LookupError(f"job {job_id} has no attempt {attempt}")

    def vm_preempted(self, job_id: str, attempt: int, replica: str, at: float) -> bool:
        """A worker's VM was preempted on its own: its run ends, and it counts as a restart.

        Args:
            job_id: the job.
            attempt: the running attempt.
            replica: the worker whose VM was preempted.
            at: when its processes were gone (epoch seconds): its billing stops there.

        Returns:
            True when the VM may be replaced (the preemption is recorded and counted); False
            when it is the one past ``MAX_RESTARTS`` (nothing recorded: the caller ends the
            attempt as preempted, which counts it and FAILS the job with STOCKOUT).
        """
        row = self.job(job_id)
        if row.preemptions + 1 > MAX_RESTARTS:
            return False
        vms = self._vms(job_id, attempt)
        for vm in vms:
            if vm["replica"] == replica:
                vm["runs"][-1][1:] = [at, "PREEMPTED"]
        self.store.end_attempt(
            job_id,
            attempt,
            {"processes": json.dumps(vms)},
            {"preemptions": row.preemptions + 1, "update_time": time.time()},
        )
        log.info("job %s attempt %d: the VM of %s was preempted", job_id, attempt, replica)
        return True

    def vm_restarted(
        self, job_id: str, attempt: int, replica: str, process: Mapping[str, Any], at: float
    ) -> None:
        """A preempted worker's replacement started: a new run (billed from ``at``)."""
        vms = self._vms(job_id, attempt)
        for vm in vms:
            if vm["replica"] == replica:
                vm.update(process)
                vm["runs"].append([at, None, None])
        self.store.update_attempt(job_id, attempt, processes=json.dumps(vms))

    def heartbeat(self, job_id: str, attempt: int) -> None:
        """Record that the attempt still runs (a crash bills it up to here).

        Every running attempt beats each ``HEARTBEAT`` s; written one transaction (one fsync)
        per beat, 1000 running jobs made 2000 commits a second. Beats are gathered and written
        together at most every ``HEARTBEAT / 2`` s, by whichever beat comes next: one attempt
        alone is written at each of its beats, as before; with many, a beat waits at most for
        the next beat of any of them.
        """
        now = time.time()
        with self._beats_lock:
            self._beats[(job_id, attempt)] = now
            if now - self._beats_flushed < HEARTBEAT / 2:
                return
            beats, self._beats = self._beats, {}
            self._beats_flushed = now
        self.store.touch_attempts(beats)

    def finish_attempt(
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
        """Record an attempt's end and decide what happens to the job, atomically.

        Args:
            job_id: the job.
            attempt: the attempt number.
            reason: the ledger's ``endReason``.
            preempted: the attempt was preempted: the job is queued again, CANCELLED when a
                cancel was asked, or FAILED with STOCKOUT past ``MAX_RESTARTS`` restarts.
            state: the job's next state when not ``preempted``.
            error: ``(google.rpc.Code, message)`` for the job.
            end: when the attempt ended (default now).
        """
        now = time.time()
        end = now if end is None else end
        row = self.job(job_id)
        job: dict[str, Any] = {"update_time": now}
        if preempted:
            job["preemptions"] = row.preemptions + 1
            job["preempt_requested"] = 0
            if row.cancel_requested:
                state = CANCELLED
            elif self.spec(row).job_spec.scheduling.disable_retries:  # no restart: fails now
                state = FAILED
                error = (CODE_RESOURCE_EXHAUSTED, _NO_RETRIES)
            elif row.preemptions + 1 > MAX_RESTARTS:
                state = FAILED
                error = (
                    CODE_RESOURCE_EXHAUSTED,
                    f"STOCKOUT: the job's Spot VMs were preempted {row.preemptions + 1} times and "
                    f"it was restarted (whole, or one VM at a time) the maximum of "
                    f"{MAX_RESTARTS} times; no Spot capacity to finish it",
                )
            else:
                state = QUEUED
                job["queued_since"] = now
        if state is None:
            raise ValueError("finish_attempt needs a state unless the attempt was preempted")
        if state == CANCELLED and error is None:
            error = (CODE_CANCELLED, "CANCELED")
        job["state"] = state
        if state in (SUCCEEDED, FAILED, CANCELLED):
            job["end_time"] = now
            with self._specs_lock:
                self._vm_requests.pop(job_id, None)
        if error:
            job["error_code"], job["error_message"] = error
        attempt_fields = {"end_time": end, "end_reason": reason, "last_seen": end}
        self.store.end_attempt(job_id, attempt, attempt_fields, job)
        log.info("job %s attempt %d ended: %s -> %s", job_id, attempt, reason, state)

    def recover(self) -> None:
        """Attempts that were open when the previous emulator died count as preempted."""
        for att in self.store.open_attempts():
            orphans.stop_orphans(att.process_list, self.shutdown_grace)
            end = att.last_seen or att.start_time or att.admit_time
            if att.start_time is None:  # never ran: just queue the job again
                row = self.store.job(att.job_id)
                state = CANCELLED if row and row.cancel_requested else QUEUED
                self.finish_attempt(att.job_id, att.attempt, "EMULATOR_RESTARTED", state=state)
                continue
            self.finish_attempt(
                att.job_id, att.attempt, "EMULATOR_RESTARTED", preempted=True, end=end
            )
        now = time.time()
        for row in self.store.jobs(states=[PENDING, RUNNING]):
            self.store.update_job(row.id, state=QUEUED, queued_since=now, update_time=now)

    def expire_flex_start_waits(self) -> list[str]:
        """FAIL the FLEX_START jobs whose wait for capacity is over; returns their ids.

        Called by the scheduler before it admits jobs (on its thread, so a job is never both
        admitted and expired).
        """
        now = time.time()
        expired = []
        for row in self.store.jobs(states=[QUEUED]):
            pb = self.spec(row)
            deadline = flex_start_deadline(row, pb)
            if deadline is None or now < deadline or self.store.attempts(row.id):
                continue
            message = (
                "The job could not get the resources it requested within "
                f"jobSpec.scheduling.maxWaitDuration ({deadline - row.create_time:g}s): "
                f"resources are insufficient in region {row.parent.split('/')[3]} (FLEX_START)"
            )
            if self.store.update_job_if(
                row.id,
                (QUEUED,),
                state=FAILED,
                end_time=now,
                update_time=now,
                error_code=CODE_RESOURCE_EXHAUSTED,
                error_message=message,
            ):
                log.info("job %s: FLEX_START wait is over, failed", row.id)
                expired.append(row.id)
        return expired


# FLEX_START (Dynamic Workload Scheduler): a job waits for capacity up to maxWaitDuration.


def flex_start_deadline(row: JobRow, pb: Any) -> float | None:
    """When a FLEX_START job that never got its VMs stops waiting (None: it does not expire).

    ``maxWaitDuration`` 0 waits indefinitely; unset waits the documented default of 24 hours.
    """
    from google.cloud.aiplatform_v1.types.custom_job import Scheduling

    scheduling = pb.job_spec.scheduling
    if (
        scheduling.strategy != Scheduling.Strategy.FLEX_START
        or row.state != QUEUED
        or row.start_time is not None
    ):
        return None
    wait = float(DEFAULT_MAX_WAIT_S)
    if scheduling.HasField("max_wait_duration"):
        wait = scheduling.max_wait_duration.ToTimedelta().total_seconds()
    return row.create_time + wait if wait > 0 else None
