"""Scheduling and capacity: which queued job gets simulated VMs next, and its attempt runner.

The scheduler thread sleeps until something may let a job move: a job was created, cancelled or
asked to be preempted, or an attempt ended and gave its VMs back (:meth:`Scheduler.wake`). A wake
that comes while it is scheduling is remembered, so a job queued again after a preemption is
admitted at once, never after a polling interval.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from google.cloud.aiplatform_v1.types import Scheduling

from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.lifecycle import Lifecycle
from kfp_spot.emulator.policy import PreemptionPolicy
from kfp_spot.emulator.runner import AttemptContext, AttemptRunner
from kfp_spot.emulator.statedir import StateDir
from kfp_spot.vertex.custom_job import EMULATOR

MAX_REPLICAS = EMULATOR.max_job_replicas  # every replica is a local process (the floor)
_SPOT = int(Scheduling.Strategy.SPOT)


class Capacity:
    """Simulated VMs per machine type and how many are in use.

    Args:
        capacity: an int for every machine type, or a mapping with an optional ``"*"``
            default; None for unlimited.

    Not thread-safe on its own: the scheduler changes ``in use`` under its lock.
    """

    def __init__(self, capacity: int | Mapping[str, int] | None) -> None:
        self.capacity = capacity
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

    def check(self, pb: Any) -> None:
        """Refuse a job that could never run here.

        Raises:
            ApiError: INVALID_ARGUMENT past ``MAX_REPLICAS`` replicas; RESOURCE_EXHAUSTED when
                it needs more VMs of a type than there are.
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
        capacity: the simulated VMs.
        policy: automatic preemptions of Spot attempts and of their VMs one at a time.
        state_dir: where attempts keep logs and working directories.
        env_cache_dir: where package environments are cached.
        grace_period: seconds between SIGTERM and SIGKILL when an attempt is stopped.
        shutdown_grace: the same when the emulator stops.
        container_runtime: the container runtime probe.
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
    ) -> None:
        self.lifecycle = lifecycle
        self.capacity = capacity
        self.policy = policy
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

    def start(self) -> None:
        """Start the scheduler thread."""
        self._thread = threading.Thread(target=self._loop, name="emulator-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop admitting; running attempts are stopped (EMULATOR_RESTARTED) and joined."""
        self._stopping.set()
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
                    self._cond.wait()
                if self._stopping.is_set():
                    return
                self._dirty = False
            self._schedule_once()

    def _schedule_once(self) -> None:
        self.lifecycle.expire_flex_start_waits()
        for row in self.lifecycle.waiting():
            if self._stopping.is_set():
                return
            with self._cond:
                if row.id in self._runners:
                    continue
            if row.cancel_requested:
                self.lifecycle.cancel_queued(row.id)
                continue
            pb = self.lifecycle.spec(row)
            needs = self.capacity.needs(pb)
            with self._cond:
                if not self.capacity.take(needs):
                    continue
                attempt = self.lifecycle.admit(row, pb, sum(needs.values()))
                delay = vm_delay = None
                if pb.job_spec.scheduling.strategy == _SPOT:
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
            runner.start()

    def _release(self, runner: AttemptRunner) -> None:
        """A runner's ``on_done``: its VMs are free, so the queue may move."""
        with self._cond:
            self.capacity.give_back(runner.needs)
            self._runners.pop(runner.job_id, None)
            self._dirty = True
            self._cond.notify_all()
