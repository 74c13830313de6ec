"""The serving replicas of one DeployedModel: start, health, preemption, restart, routing.

Each replica is a local process (the prediction server of the model's image, or the user's
container) listening on its own loopback port. A monitor thread per deployed model:

- starts every missing replica and polls its health route until it answers;
- preempts Spot replicas when asked (:meth:`ReplicaPool.preempt`) or when the emulator's
  preemption policy says (:func:`spot_delay`: ``preempt_at`` / ``preempt_every`` and the per-VM
  ``preempt_vm_every``, drawn per replica life, each replica being one VM): the replica
  stops taking traffic at once, gets SIGTERM, the grace period, SIGKILL; its life ends PREEMPTED
  (billing stops) and a new life starts after ``restart_delay`` seconds (the VM coming back);
- restarts a replica that exited on its own (its life ends FAILED), as Vertex restarts a crashed
  serving container.

Requests go to the ready replicas in turn (:meth:`ReplicaPool.pick`); a replica that fails a
request at the connection level is taken out of the rotation (:meth:`ReplicaPool.mark_down`) so
the endpoint keeps answering through the others. With one replica a preemption is an outage.

Why one module: a deployed model's replicas share one lock and one monitor thread (start, health,
preemption, restart and routing all read and change the same slots); split, that state would be
reached across modules.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kfp_spot.emulator import replicas
from kfp_spot.emulator.policy import PreemptionPolicy
from kfp_spot.emulator.serving.store import ServingStore

log = logging.getLogger(__name__)

HEARTBEAT = 0.5
HEALTH_POLL = 0.05
START_TIMEOUT = 300.0  # a replica that never answers its health route fails the deployment


@dataclass(frozen=True)
class ReplicaLaunch:
    """How to start one replica of a deployed model.

    Attributes:
        command: builds the command line from the port the replica must listen on.
        env: the replica's environment (the host's, the AIP_* variables, the model's own).
        health_route: the route that answers 200 once the model is loaded.
        predict_route: the route predictions are posted to.
    """

    command: Callable[[int], list[str]]
    env: Mapping[str, str]
    health_route: str
    predict_route: str


@dataclass(frozen=True)
class PoolSettings:
    """What every pool shares.

    Attributes:
        store: the serving ledger.
        policy: automatic preemptions (Spot replicas only).
        grace_period: SIGTERM -> SIGKILL on preemption and undeploy.
        shutdown_grace: the same when the emulator stops.
        restart_delay: seconds between a preempted replica's end and its next start.
        log_dir: where each replica life's log goes.
    """

    store: ServingStore
    policy: PreemptionPolicy
    grace_period: float
    shutdown_grace: float
    restart_delay: float
    log_dir: Path


@dataclass
class Slot:
    """One replica position of the deployed model and its current life."""

    index: int
    life: int = 0
    process: replicas.Replica | None = None
    port: int = 0
    ready: bool = False
    stopping: bool = False
    started: float = 0.0
    preempt_deadline: float | None = None
    preempt_requested: bool = False
    restart_at: float = 0.0
    ever_ready: bool = False  # some life of this slot answered its health route
    life_ready: bool = False  # this life did


@dataclass
class PoolIdentity:
    """Which deployed model a pool serves and what its replicas cost."""

    deployed_model_id: str
    endpoint_id: str
    seq: int
    replica_count: int
    machine_type: str
    spot: bool
    spot_usd_per_hour: float
    on_demand_usd_per_hour: float
    extra: dict[str, str] = field(default_factory=dict)


def spot_delay(policy: PreemptionPolicy, seq: int, replica: int, life: int) -> float | None:
    """Seconds after it became ready at which life ``life`` of a Spot serving replica is preempted.

    The training policy's clocks: an attempt's (``preempt_at``, ``preempt_every``: each life is
    an attempt of the replica) and a VM's (``preempt_vm_every``), whichever comes first; None
    for never. ``preempt_vm_at`` names training replicas (``workerpool1-0``), never these.
    """
    key = -(seq * 1000 + replica + 1)  # apart from the job sequence numbers of training
    delays = [policy.delay(key, life), policy.vm_delay(key, f"serving-{replica}", life)]
    return min((d for d in delays if d is not None), default=None)


class ReplicaPool:
    """The replicas of one deployed model (see the module docstring).

    Args:
        settings: what every pool shares.
        identity: the deployed model and its replica prices.
        launch: how a replica starts.
        on_ready: called once, when every replica has answered its health route.
        on_failed: called once with a message if a replica exits before it was ever ready
            while the deployment is being made (then the pool stops itself).
    """

    def __init__(
        self,
        settings: PoolSettings,
        identity: PoolIdentity,
        launch: ReplicaLaunch,
        on_ready: Callable[[], None],
        on_failed: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.identity = identity
        self.launch = launch
        self._on_ready = on_ready
        self._on_failed = on_failed
        self._reported = False
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop_reason: str | None = None
        self._stop_grace = settings.grace_period
        self._slots = [Slot(i) for i in range(identity.replica_count)]
        for life in settings.store.lives(dm_id=identity.deployed_model_id):  # after a restart
            if life.replica < len(self._slots):
                slot = self._slots[life.replica]
                slot.life = max(slot.life, life.life)
        self._turn = 0
        self._thread = threading.Thread(
            target=self._main, name=f"serving-{identity.deployed_model_id}", daemon=True
        )

    # control ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the monitor thread (it starts the replicas)."""
        self._thread.start()

    def stop(self, reason: str, grace: float | None = None) -> None:
        """Stop every replica (SIGTERM, grace, SIGKILL), end their lives with ``reason``; join."""
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = reason
                self._stop_grace = self.settings.grace_period if grace is None else grace
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def preempt(self, index: int | None = None) -> dict[str, int]:
        """Preempt one replica (the given one, else the first ready one); returns which.

        Raises:
            LookupError: no such replica, or none is up to be preempted.
        """
        with self._lock:
            if index is not None:
                if not 0 <= index < len(self._slots):
                    raise LookupError(
                        f"replica {index} does not exist; this deployed model has replicas "
                        f"0..{len(self._slots) - 1}"
                    )
                slot = self._slots[index]
            else:
                up = [s for s in self._slots if s.ready] or [
                    s for s in self._slots if s.process is not None and not s.stopping
                ]
                if not up:
                    raise LookupError("no replica is running right now (all are restarting)")
                slot = up[0]
            if slot.process is None or slot.stopping:
                raise LookupError(f"replica {slot.index} is not running right now (restarting)")
            slot.preempt_requested = True
            slot.ready = False  # out of the rotation at once, like a VM that got its notice
            answer = {"replica": slot.index, "life": slot.life}
        self._wake.set()
        return answer

    # routing ----------------------------------------------------------------------------------

    def pick(self, exclude: Sequence[tuple[int, int]] = ()) -> tuple[int, int, int] | None:
        """The next ready replica in turn as ``(index, life, port)``, or None when none is."""
        with self._lock:
            ready = [s for s in self._slots if s.ready and (s.index, s.life) not in exclude]
            if not ready:
                return None
            slot = ready[self._turn % len(ready)]
            self._turn += 1
            return slot.index, slot.life, slot.port

    def mark_down(self, index: int, life: int) -> None:
        """A request to this replica life failed at the connection: take it out of rotation."""
        with self._lock:
            slot = self._slots[index]
            if slot.life == life:
                slot.ready = False
        self._wake.set()

    def ready_count(self) -> int:
        """Replicas answering right now."""
        with self._lock:
            return sum(s.ready for s in self._slots)

    def status(self) -> list[dict[str, object]]:
        """One line per replica: index, life, state, port, pid."""
        with self._lock:
            out = []
            for s in self._slots:
                if s.process is None:
                    state = "RESTARTING" if s.life else "STARTING"
                elif s.stopping or s.preempt_requested:
                    state = "STOPPING"
                else:
                    state = "READY" if s.ready else "STARTING"
                out.append(
                    {
                        "replica": s.index,
                        "life": s.life,
                        "state": state,
                        "port": s.port if s.process is not None else None,
                        "pid": s.process.pid if s.process is not None else None,
                    }
                )
            return out

    # the monitor ------------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._loop()
        # A replica that cannot start fails its deployment, never hangs it: ValueError is what
        # a process start raises for a value no process can be given (a NUL character).
        except (OSError, ValueError, sqlite3.Error) as err:
            log.exception("deployed model %s: replicas failed", self.identity.deployed_model_id)
            if not self._reported:
                self._fail(f"The replicas could not be started: {err}")
        finally:
            self._stop_all()

    def _loop(self) -> None:
        next_beat = time.monotonic() + HEARTBEAT
        while True:
            self._wake.clear()
            with self._lock:
                if self._stop_reason is not None:
                    return
            deadlines = [next_beat]
            for slot in self._slots:
                deadline = self._step(slot)
                if deadline is not None:
                    deadlines.append(deadline)
            if self._failed():
                return
            self._maybe_ready()
            now = time.monotonic()
            if now >= next_beat:
                self.settings.store.heartbeat(self.identity.deployed_model_id, time.time())
                next_beat = now + HEARTBEAT
            self._wake.wait(max(0.0, min(deadlines) - time.monotonic()))

    def _step(self, slot: Slot) -> float | None:
        """Move one slot on; returns when it next needs looking at (None: on a wake only)."""
        now = time.monotonic()
        if slot.stopping:
            return None
        if slot.process is None:
            if now < slot.restart_at:
                return slot.restart_at
            self._start(slot)
            return now + HEALTH_POLL
        if slot.process.exited.is_set():
            code = slot.process.returncode()
            self._end(slot, "FAILED")
            if not slot.ever_ready and not self._reported:
                self._fail(
                    f"The model server of replica {slot.index} exited with status {code} before "
                    f"it became ready: {self._log_tail(slot)}"
                )
                return None
            slot.restart_at = now
            return now
        if slot.preempt_requested or (
            slot.preempt_deadline is not None and now >= slot.preempt_deadline
        ):
            self._preempt_async(slot)
            return None
        if not slot.ready:
            if self._healthy(slot):
                self._became_ready(slot)
                return slot.preempt_deadline
            if now - slot.started > START_TIMEOUT:
                self._fail(
                    f"The model server of replica {slot.index} did not answer "
                    f"{self.launch.health_route} within {START_TIMEOUT:g} s: {self._log_tail(slot)}"
                )
                return None
            else:
                return now + HEALTH_POLL
        return slot.preempt_deadline

    def _start(self, slot: Slot) -> None:
        slot.life += 1
        slot.port = replicas.free_port()
        slot.ready = slot.stopping = slot.preempt_requested = slot.life_ready = False
        slot.preempt_deadline = None
        ident = self.identity
        log_path = self._log_path(slot)
        env = {**self.launch.env, "AIP_HTTP_PORT": str(slot.port)}
        slot.process = replicas.start(
            f"replica-{slot.index}",
            self.launch.command(slot.port),
            env,
            log_path,
            log_path.parent,
            on_exit=self._wake.set,
        )
        slot.started = time.monotonic()
        self.settings.store.start_life(
            {
                "deployed_model_id": ident.deployed_model_id,
                "endpoint_id": ident.endpoint_id,
                "replica": slot.index,
                "life": slot.life,
                "start_time": time.time(),
                "machine_type": ident.machine_type,
                "strategy": "SPOT" if ident.spot else "STANDARD",
                "spot_usd_per_hour": ident.spot_usd_per_hour,
                "on_demand_usd_per_hour": ident.on_demand_usd_per_hour,
                "pid": slot.process.pid,
                "token": slot.process.token,
            }
        )

    def _log_path(self, slot: Slot) -> Path:
        return self.settings.log_dir / f"replica-{slot.index}-life-{slot.life}.log"

    def _log_tail(self, slot: Slot, size: int = 2000) -> str:
        try:
            data = self._log_path(slot).read_bytes()[-size:]
        except OSError:
            return "(no log)"
        return data.decode("utf-8", "replace").strip() or "(empty log)"

    def _healthy(self, slot: Slot) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", slot.port, timeout=2.0)
        try:
            conn.request("GET", self.launch.health_route)
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def _became_ready(self, slot: Slot) -> None:
        if slot.life_ready:  # back in the rotation after a failed request: same life, same deadline
            with self._lock:
                slot.ready = not (slot.preempt_requested or slot.stopping)
            return
        ident = self.identity
        delay = None
        if ident.spot:
            delay = spot_delay(self.settings.policy, ident.seq, slot.index, slot.life)
        with self._lock:
            if slot.preempt_requested or slot.stopping:
                return
            slot.ready = slot.ever_ready = slot.life_ready = True
            slot.preempt_deadline = time.monotonic() + delay if delay is not None else None
        self.settings.store.update_life(
            ident.deployed_model_id, slot.index, slot.life, ready_time=time.time()
        )
        log.info(
            "deployed model %s replica %d life %d ready on port %d",
            ident.deployed_model_id,
            slot.index,
            slot.life,
            slot.port,
        )

    def _preempt_async(self, slot: Slot) -> None:
        with self._lock:
            slot.ready = False
            slot.stopping = True
            process = slot.process
        log.info(
            "preempting deployed model %s replica %d life %d",
            self.identity.deployed_model_id,
            slot.index,
            slot.life,
        )

        def stop() -> None:
            assert process is not None
            replicas.stop([process], self.settings.grace_period)
            self._end(slot, "PREEMPTED")
            with self._lock:
                slot.stopping = False
                slot.restart_at = time.monotonic() + self.settings.restart_delay
            self._wake.set()

        threading.Thread(target=stop, name=f"preempt-{slot.index}", daemon=True).start()

    def _end(self, slot: Slot, reason: str) -> None:
        with self._lock:
            slot.ready = False
            slot.process = None
        self.settings.store.update_life(
            self.identity.deployed_model_id,
            slot.index,
            slot.life,
            end_time=time.time(),
            end_reason=reason,
        )

    def _maybe_ready(self) -> None:
        if self._reported:
            return
        with self._lock:
            all_ready = all(s.ever_ready for s in self._slots)
        if all_ready:
            self._reported = True
            self._on_ready()

    def _fail(self, message: str) -> None:
        self._reported = True
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = "FAILED"
                self._stop_grace = 0.0
        self._on_failed(message)

    def _failed(self) -> bool:
        with self._lock:
            return self._stop_reason == "FAILED"

    def _stop_all(self) -> None:
        with self._lock:
            reason = self._stop_reason or "FAILED"
            grace = self._stop_grace
        # A preemption in progress finishes on its own thread; wait for it to give the slot back.
        for slot in self._slots:
            while True:
                with self._lock:
                    if not slot.stopping:
                        break
                self._wake.wait(0.05)
                self._wake.clear()
        running = [(s, s.process) for s in self._slots if s.process is not None]
        replicas.stop([p for _, p in running if p is not None], grace)
        for slot, _ in running:
            with contextlib.suppress(sqlite3.Error):  # the store may be closing with the emulator
                self._end(slot, reason)
