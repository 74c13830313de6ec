"""Scheduling and capacity: which queued job gets simulated VMs next, and its attempt runner.

The scheduler thread sleeps until something may let a job move: a job was created, cancelled or
asked to be preempted, an attempt ended and gave its VMs back, or the Spot capacity table changed
(:meth:`Scheduler.wake`). A wake that comes while it is scheduling is remembered, so a job queued
again after a preemption is admitted at once, never after a polling interval. Its only timed
wake-ups are the Spot capacity deadlines: the end of a job's stockout wait and the end of a timed
setting of the table (:mod:`~kfp_spot.emulator.spot_capacity`).

Spot capacity (Spot jobs only): a job whose region has no Spot VMs for one of its machine types
waits in PENDING without VMs (unbilled) and FAILS with code 8 and Vertex's stockout words when
none come back within ``stockout_seconds``; a running attempt whose region loses them is
preempted (SIGTERM, grace period, as any preemption) and its restart waits the same way.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kfp_spot.emulator import billing
from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.lifecycle import Lifecycle
from kfp_spot.emulator.policy import PreemptionPolicy
from kfp_spot.emulator.runner import AttemptContext, AttemptRunner
from kfp_spot.emulator.spot_capacity import QUOTA, SpotCapacity, quota_message, stockout_message
from kfp_spot.emulator.statedir import StateDir
from kfp_spot.emulator.states import PENDING, QUEUED
from kfp_spot.emulator.store import JobRow
from kfp_spot.vertex.custom_job import EMULATOR

log = logging.getLogger(__name__)

DEFAULT_STOCKOUT_SECONDS = 10.0  # the emulator's wait for Spot VMs (Vertex's is not documented)
MAX_REPLICAS = EMULATOR.max_job_replicas  # every replica is a local process (the floor)


@functools.cache
def _spot() -> int:
    """``Scheduling.Strategy.SPOT`` (GAPIC types load on first use, not when this imports)."""
    from google.cloud.aiplatform_v1.types.custom_job import Scheduling

    return int(Scheduling.Strategy.SPOT)


class Capacity:
    """Simulated VMs per machine type and how many are in use.

    Args:
        capacity: an int for every machine type, or a mapping with an optional ``"*"``
            default; None for unlimited.
        spot: which regions and machine types have Spot VMs (default: all, always).

    Not thread-safe on its own: the scheduler changes ``in use`` under its lock.
    """

    def __init__(
        self, capacity: int | Mapping[str, int] | None, spot: SpotCapacity | None = None
    ) -> None:
        self.capacity = capacity
        self.spot = spot if spot is not None else SpotCapacity()
        self._in_use: Counter[str] = Counter()

    def of(self, machine_type: str) -> int | None:
        """VMs of this type in all, None for unlimited."""
        if self.capacity is None:
            return None
        if isinstance(self.capacity, int):
            return self.capacity
        return self.capacity.get(machine_type, self.capacity.get("*"))

    @staticmethod
    def needs(pb: Any) -> Counter[str]:
        """VMs per machine type a CustomJob (raw protobuf) needs: one per replica."""
        needs: Counter[str] = Counter()
        for pool in pb.job_spec.worker_pool_specs:
            if pool.ByteSize():
                needs[pool.machine_spec.machine_type] += pool.replica_count
        return needs

    def check(self, pb: Any, location: str | None = None) -> None:
        """Refuse a job that could never run here, or that Vertex would refuse for its quota.

        Raises:
            ApiError: INVALID_ARGUMENT past ``MAX_REPLICAS`` replicas; RESOURCE_EXHAUSTED when
                it needs more VMs of a type than there are, or (a Spot job in ``location``) when
                the Spot capacity table refuses it with ``QUOTA`` (Vertex's 429 quota words).
        """
        needs = self.needs(pb)
        if sum(needs.values()) > MAX_REPLICAS:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"the job asks for {sum(needs.values())} replicas; the local emulator runs each "
                f"as a process on this machine and allows at most {MAX_REPLICAS} per job",
                "jobSpec.workerPoolSpecs",
            )
        for machine_type, count in needs.items():
            cap = self.of(machine_type)
            if cap is not None and count > cap:
                raise ApiError(
                    "RESOURCE_EXHAUSTED",
                    f"the job needs {count} VMs of type {machine_type} but the emulator has "
                    f"capacity for {cap} (kfp-spot emulator start --capacity)",
                    "jobSpec.workerPoolSpecs",
                )
        if location is None or pb.job_spec.scheduling.strategy != _spot():
            return
        refused = self.spot.refusal(location, needs)
        if refused is not None and refused.refusal == QUOTA:
            accelerators = [
                billing.accelerator_name(pool.machine_spec.accelerator_type)
                for pool in pb.job_spec.worker_pool_specs
                if pool.ByteSize()
            ]
            raise ApiError("RESOURCE_EXHAUSTED", quota_message(accelerators))

    def take(self, needs: Counter[str]) -> bool:
        """Reserve the VMs if they are free; False (nothing reserved) otherwise."""
        fits = all(
            (cap := self.of(m)) is None or self._in_use[m] + n <= cap for m, n in needs.items()
        )
        if fits:
            self._in_use.update(needs)
        return fits

    def give_back(self, needs: Counter[str]) -> None:
        """Free VMs reserved by :meth:`take`."""
        self._in_use.subtract(needs)


class Scheduler:
    """Admits queued jobs onto free capacity and runs each admitted attempt.

    Args:
        lifecycle: records the transitions (admission, cancel of a queued job) and gives runners
            their recorder.
        capacity: the simulated VMs and the Spot capacity table (its changes wake the scheduler).
        policy: automatic preemptions of Spot attempts and of their VMs one at a time.
        state_dir: where attempts keep logs and working directories.
        env_cache_dir: where package environments are cached.
        grace_period: seconds between SIGTERM and SIGKILL when an attempt is stopped.
        shutdown_grace: the same when the emulator stops.
        container_runtime: the container runtime probe.
        stockout_seconds: how long a Spot job waits (PENDING, unbilled) for Spot VMs its region
            has none of before it FAILS with STOCKOUT (code 8).
    """

    def __init__(
        self,
        lifecycle: Lifecycle,
        capacity: Capacity,
        policy: PreemptionPolicy,
        *,
        state_dir: StateDir,
        env_cache_dir: Path,
        grace_period: float,
        shutdown_grace: float,
        container_runtime: Callable[[], str | None],
        stockout_seconds: float = DEFAULT_STOCKOUT_SECONDS,
    ) -> None:
        self.lifecycle = lifecycle
        self.capacity = capacity
        self.policy = policy
        self.stockout_seconds = stockout_seconds
        self._stopping = threading.Event()
        self._ctx = AttemptContext(
            recorder=lifecycle,
            state_dir=state_dir,
            env_cache_dir=env_cache_dir,
            grace_period=grace_period,
            shutdown_grace=shutdown_grace,
            stopping=self._stopping,
            container_runtime=container_runtime,
            on_done=self._release,
        )
        self._cond = threading.Condition()
        self._dirty = True  # schedule once at start: jobs may be queued from a previous run
        self._runners: dict[str, AttemptRunner] = {}
        self._thread: threading.Thread | None = None
        # Spot jobs waiting for Spot VMs their region has none of: job id -> since (epoch s).
        # Scheduler thread only. Not durable: after an emulator restart the wait starts again.
        self._awaiting: dict[str, float] = {}
        self._reclaimed: set[tuple[str, int]] = set()  # attempts stopped for lost Spot capacity
        self._locations: dict[str, str] = {}  # job id -> location, of the jobs with a runner
        self._deadline: float | None = None  # the next Spot capacity deadline (epoch s)
        capacity.spot.subscribe(self.wake)

    def start(self) -> None:
        """Start the scheduler thread."""
        self._thread = threading.Thread(target=self._loop, name="emulator-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop admitting; running attempts are stopped (EMULATOR_RESTARTED) and joined."""
        self._stopping.set()
        self.capacity.spot.unsubscribe(self.wake)
        self.wake()
        if self._thread:
            self._thread.join()
        with self._cond:
            runners = list(self._runners.values())
        for runner in runners:
            runner.wake()
        for runner in runners:
            runner.join()

    def wake(self) -> None:
        """Look at the queue again as soon as possible (remembered if busy right now)."""
        with self._cond:
            self._dirty = True
            self._cond.notify_all()

    def poke(self, job_id: str) -> None:
        """Something was asked of this job: wake its attempt's runner, if any, and the queue."""
        with self._cond:
            runner = self._runners.get(job_id)
            self._dirty = True
            self._cond.notify_all()
        if runner is not None:
            runner.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._dirty and not self._stopping.is_set():
                    deadline = self._deadline
                    if deadline is None:
                        self._cond.wait()
                        continue
                    left = deadline - time.time()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._stopping.is_set():
                    return
                self._dirty = False
            self._schedule_once()

    def _schedule_once(self) -> None:
        self.lifecycle.expire_flex_start_waits()
        now = time.time()
        self._reclaim(now)
        for row in self._candidates():
            if self._stopping.is_set():
                return
            with self._cond:
                if row.id in self._runners:
                    continue
            if row.cancel_requested:
                self._awaiting.pop(row.id, None)
                self.lifecycle.cancel_queued(row.id)
                continue
            pb = self.lifecycle.spec(row)
            needs = self.capacity.needs(pb)
            spot = pb.job_spec.scheduling.strategy == _spot()
            if spot and self._no_spot_vms(row, needs, now):
                continue
            with self._cond:
                taken = self.capacity.take(needs)
            if not taken:
                if self._awaiting.pop(row.id, None) is not None:
                    self.lifecycle.requeue(row.id)  # Spot VMs are back, the local VMs taken
                continue
            self._awaiting.pop(row.id, None)
            with self._cond:
                attempt = self.lifecycle.admit(row, pb, sum(needs.values()))
                delay = vm_delay = None
                if spot:
                    delay = self.policy.delay(row.seq, attempt)
                    if self.policy.per_vm:
                        vm_delay = functools.partial(self.policy.vm_delay, row.seq)
                runner = AttemptRunner(
                    self._ctx,
                    row,
                    pb,
                    attempt,
                    needs,
                    delay,
                    vm_delay=vm_delay,
                    lives=self.lifecycle.vm_lives(row.id),
                    vm_downtime=self.policy.vm_downtime,
                )
                self._runners[row.id] = runner
                self._locations[row.id] = _location(row)
            runner.start()
        ends = [since + self.stockout_seconds for since in self._awaiting.values()]
        change = self.capacity.spot.next_change(now)
        self._deadline = min([*ends, *([change] if change is not None else [])], default=None)

    def _candidates(self) -> list[JobRow]:
        """The queued and cancelling jobs, and the Spot jobs waiting (PENDING) for Spot VMs."""
        rows = self.lifecycle.waiting()
        seen = {row.id for row in rows}
        for job_id in [j for j in self._awaiting if j not in seen]:
            row = self.lifecycle.job(job_id)
            if row.state == PENDING:
                rows.append(row)
            else:  # it left the wait some other way
                del self._awaiting[job_id]
        return sorted(rows, key=lambda r: r.seq)

    def _no_spot_vms(self, row: JobRow, needs: Counter[str], now: float) -> bool:
        """Whether a Spot job must wait for Spot VMs; FAILS it once its stockout wait is over."""
        if self.capacity.spot.empty():
            return False
        location = _location(row)
        refused = self.capacity.spot.refusal(location, needs, now)
        if refused is None:
            return False
        since = self._awaiting.setdefault(row.id, now)
        if row.state == QUEUED:
            self.lifecycle.await_capacity(row.id)
            log.info("job %s: no Spot capacity for %s in %s, waiting", row.id, needs, location)
        if now - since >= self.stockout_seconds:
            del self._awaiting[row.id]
            self.lifecycle.stockout(row.id, stockout_message(location))
        return True

    def _reclaim(self, now: float) -> None:
        """Preempt the attempts of Spot jobs whose region lost the Spot VMs they run on."""
        if self.capacity.spot.empty():
            return
        with self._cond:
            runners = list(self._runners.values())
        for runner in runners:
            key = (runner.job_id, runner.attempt)
            if key in self._reclaimed or runner.pb.job_spec.scheduling.strategy != _spot():
                continue
            location = self._locations.get(runner.job_id)
            if location is None or self.capacity.spot.refusal(location, runner.needs, now) is None:
                continue
            self._reclaimed.add(key)
            if self.lifecycle.reclaim(runner.job_id):
                log.info(
                    "job %s attempt %d: %s lost its Spot capacity, preempting",
                    runner.job_id,
                    runner.attempt,
                    location,
                )
                runner.notify()

    def _release(self, runner: AttemptRunner) -> None:
        """A runner's ``on_done``: its VMs are free, so the queue may move."""
        with self._cond:
            self.capacity.give_back(runner.needs)
            self._runners.pop(runner.job_id, None)
            self._locations.pop(runner.job_id, None)
            self._reclaimed.discard((runner.job_id, runner.attempt))
            self._dirty = True
            self._cond.notify_all()


def _location(row: JobRow) -> str:
    """The location of a job (its parent is ``projects/N/locations/L``)."""
    return row.parent.split("/")[3]
