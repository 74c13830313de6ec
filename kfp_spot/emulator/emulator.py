"""The in-process emulator: a context manager that serves on a free port and stops cleanly."""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format

from kfp_spot import envcache, lightimports, machines
from kfp_spot.emulator.policy import REPLICA_NAME, PreemptionPolicy
from kfp_spot.emulator.scheduler import DEFAULT_STOCKOUT_SECONDS
from kfp_spot.emulator.server import READ_TIMEOUT, EmulatorHTTPServer
from kfp_spot.emulator.spot_capacity import ANY_MACHINE, STOCKOUT, SpotCapacity
from kfp_spot.emulator.statedir import StateDirBusyError, write_endpoint
from kfp_spot.emulator.states import CANCELLED, FAILED, SUCCEEDED

if TYPE_CHECKING:
    # The service, its routes and the GAPIC types load in ``start``: building an Emulator is light.
    from google.cloud.aiplatform_v1.types.custom_job import CustomJob

    from kfp_spot.emulator.service import Service

TERMINAL = (SUCCEEDED, FAILED, CANCELLED)


def _unusable_database(state_dir: Path, err: sqlite3.DatabaseError) -> str:
    """Why the state dir's database cannot be used (left as it is), and what to do."""
    return (
        f"the state dir {state_dir} holds an emulator database this emulator cannot use "
        f"({err}): corrupt, or written by another kfp-spot version; it was left untouched: "
        "move it away or pick another --state-dir"
    )


class EmulatorError(ValueError):
    """A bad argument to the emulator; the message names it and what is valid."""


def _check_seconds(name: str, value: Any, *, positive: bool = False) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise EmulatorError(f"{name} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        bound = "> 0" if positive else ">= 0"
        raise EmulatorError(f"{name} must be a finite number of seconds {bound}, got {value!r}")
    return seconds


def _check_offsets(name: str, value: Any) -> tuple[float, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Collection):
        raise EmulatorError(f"{name} must be a sequence of seconds, got {value!r}")
    return tuple(_check_seconds(f"{name}[{i}]", v) for i, v in enumerate(value))


def _check_vm_offsets(value: Any) -> dict[str, tuple[float, ...]]:
    if not isinstance(value, Mapping):
        raise EmulatorError(
            "preempt_vm_at must map replica names to seconds, e.g. "
            f"{{'workerpool1-0': (5.0, 20.0)}}, got {value!r}"
        )
    out = {}
    for replica, offsets in value.items():
        if not isinstance(replica, str) or not REPLICA_NAME.match(replica):
            raise EmulatorError(
                f"preempt_vm_at: {replica!r} is not a replica name; Vertex names replicas "
                "workerpoolP-I (pool P in 0..3, index I), e.g. workerpool1-0"
            )
        out[replica] = _check_offsets(f"preempt_vm_at[{replica!r}]", offsets)
    return out


def check_capacity(capacity: Any) -> int | dict[str, int] | None:
    """``capacity`` as the emulator keeps it: VMs per machine type, or per named type.

    Raises:
        EmulatorError: not a count >= 1, or a machine type the emulator does not know.
    """
    if capacity is None:
        return None
    if isinstance(capacity, Mapping):
        out = {}
        for key, value in capacity.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise EmulatorError(f"capacity[{key!r}] must be an integer >= 1, got {value!r}")
            if key != ANY_MACHINE and machines.machine_type(str(key)) is None:
                # a misspelt type would limit nothing, and its jobs would run unlimited
                raise EmulatorError(
                    f"capacity: {key!r} is not a machine type the emulator knows; give one of "
                    "kfp_spot/data/machines.csv (e.g. 'n1-standard-4') or '*' for every other one"
                )
            out[str(key)] = value
        return out
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
        raise EmulatorError(
            f"capacity must be an integer >= 1 (VMs per machine type) or a mapping of machine "
            f"type to VMs, got {capacity!r}"
        )
    return capacity


class Emulator:
    """The local Vertex AI CustomJob emulator, usable as a context manager.

    Args:
        state_dir: SQLite state, logs and working directories; reuse it to resume after a crash.
        host: interface to bind (127.0.0.1 unless told otherwise).
        port: TCP port; 0 picks a free one.
        grace_period: seconds between SIGTERM and SIGKILL on preemption (Compute Engine: ~30).
        preempt_at: attempt *i* of every Spot job is preempted ``preempt_at[i-1]`` seconds after
            it started RUNNING; later attempts run unpreempted unless ``preempt_every`` is set.
        preempt_every: mean seconds between random preemptions (exponential), or None.
        seed: seed for the random preemptions (reproducible runs).
        capacity: simulated VMs per machine type (int for all, or a mapping, ``"*"`` default);
            None for unlimited.
        env_cache_dir: where package environments are cached (default: the shared cache of
            ``kfp_spot.envcache.default_cache_dir()``).
        read_timeout: seconds a request may take to arrive in full (and a kept-alive
            connection to stay idle) before it is answered 408 and closed.
        preempt_vm_at: one VM at a time: replica name -> seconds; the *i*-th start of that
            replica's VM (in the job) is preempted ``seconds[i-1]`` after it started. A worker's
            VM is replaced while the others run; the primary's preempts the attempt.
        preempt_vm_every: mean seconds between random preemptions of each VM (exponential, one
            clock per VM, seeded by ``seed``), or None.
        vm_downtime: seconds a preempted worker's VM is away (not billed) before its
            replacement starts.
        serving_restart_delay: seconds a preempted Spot serving replica stays down before it
            starts again (the time a new Spot VM takes; 0: at once).
        stockout_seconds: how long a Spot job waits (PENDING, unbilled) for Spot VMs in a region
            that has none (:meth:`set_spot_capacity`) before it FAILS with code 8, Vertex's
            stockout; Vertex's own wait is not documented.

    Raises:
        EmulatorError: an argument is out of range; at start, the state dir is in use by another
            emulator or the port cannot be bound.
    """

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        host: str = "127.0.0.1",
        port: int = 0,
        grace_period: float = 30.0,
        preempt_at: Sequence[float] = (),
        preempt_every: float | None = None,
        seed: int | None = None,
        capacity: int | Mapping[str, int] | None = None,
        *,
        env_cache_dir: str | os.PathLike[str] | None = None,
        read_timeout: float = READ_TIMEOUT,
        preempt_vm_at: Mapping[str, Sequence[float]] | None = None,
        preempt_vm_every: float | None = None,
        vm_downtime: float = 0.0,
        serving_restart_delay: float = 0.0,
        stockout_seconds: float = DEFAULT_STOCKOUT_SECONDS,
    ) -> None:
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise EmulatorError(f"port must be an integer in 0..65535 (0: any free), got {port!r}")
        if not host:
            raise EmulatorError("host must name an interface, e.g. 127.0.0.1")
        at = _check_offsets("preempt_at", preempt_at)
        every = vm_every = None
        if preempt_every is not None:
            every = _check_seconds("preempt_every", preempt_every, positive=True)
        if preempt_vm_every is not None:
            vm_every = _check_seconds("preempt_vm_every", preempt_vm_every, positive=True)
        vm_at = _check_vm_offsets(preempt_vm_at or {})
        downtime = _check_seconds("vm_downtime", vm_downtime)
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise EmulatorError(f"seed must be an integer, got {seed!r}")
        self.state_dir = Path(state_dir).absolute()  # replicas run elsewhere: AIP_STORAGE_URI
        self.host = host
        self.port = port
        self.grace_period = _check_seconds("grace_period", grace_period)
        self.serving_restart_delay = _check_seconds("serving_restart_delay", serving_restart_delay)
        self.policy = PreemptionPolicy(at, every, seed, vm_at, vm_every, downtime)
        self.capacity = check_capacity(capacity)
        self.env_cache_dir = Path(env_cache_dir) if env_cache_dir else None  # resolved at start
        self.read_timeout = _check_seconds("read_timeout", read_timeout, positive=True)
        self.stockout_seconds = _check_seconds("stockout_seconds", stockout_seconds)
        # Spot capacity per region: set before or while serving, kept across start/stop (not in
        # the state dir: a new Emulator starts with Spot capacity everywhere).
        self.spot_capacity = SpotCapacity()
        self._service: Service | None = None
        self._httpd: EmulatorHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle --------------------------------------------------------------------------------

    def start(self) -> Emulator:
        """Recover the state dir, start the scheduler and serve; returns self."""
        if self._service is not None:
            return self
        lightimports.defer_gapic_packages()  # the service loads only the GAPIC types it serves
        from kfp_spot.emulator.routes import route_table
        from kfp_spot.emulator.service import Service

        env_cache_dir = self.env_cache_dir or envcache.default_cache_dir()
        try:  # here, not at the first job: each job would fail preparing its environment
            envcache.make_cache_dir(env_cache_dir)
        except OSError as err:
            raise EmulatorError(
                f"cannot use the environment cache {env_cache_dir}: {err.strerror or err}; "
                "pick a writable directory (--env-cache-dir, or $KFP_SPOT_CACHE_DIR)"
            ) from None
        try:
            service = Service(
                self.state_dir,
                grace_period=self.grace_period,
                policy=self.policy,
                capacity=self.capacity,
                env_cache_dir=env_cache_dir,
                serving_restart_delay=self.serving_restart_delay,
                spot_capacity=self.spot_capacity,
                stockout_seconds=self.stockout_seconds,
            )
        except StateDirBusyError as err:
            raise EmulatorError(str(err)) from None
        except OSError as err:
            raise EmulatorError(
                f"cannot use the state dir {self.state_dir}: {err.strerror or err}; "
                "pick a writable directory"
            ) from None
        except sqlite3.DatabaseError as err:
            raise EmulatorError(_unusable_database(self.state_dir, err)) from None
        try:
            service.start()
        except sqlite3.DatabaseError as err:
            service.stop()
            raise EmulatorError(_unusable_database(self.state_dir, err)) from None
        try:
            httpd = EmulatorHTTPServer(
                (self.host, self.port),
                service,
                route_table(service, service.serving),
                read_timeout=self.read_timeout,
            )
        except OSError as err:
            service.stop()
            raise EmulatorError(f"cannot listen on {self.host}:{self.port}: {err}") from None
        self._service = service
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()
        write_endpoint(self.state_dir, self.endpoint)  # whole: never a partial line to read
        return self

    def stop(self) -> None:
        """Stop serving; running attempts are stopped and resume when the state dir is reused."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        if self._service is not None:
            self._service.stop()
        self._httpd = self._service = self._thread = None

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # use --------------------------------------------------------------------------------------

    @property
    def service(self) -> Service:
        """The running service (raises when the emulator is not started)."""
        if self._service is None:
            raise EmulatorError("the emulator is not running: call start() or use `with`")
        return self._service

    @property
    def endpoint(self) -> str:
        """``http://HOST:PORT``, the ``api_endpoint`` for clients."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _name(self, job_name: str) -> str:
        return self.service.resolve(job_name)  # a name, or a bare job id

    def job(self, job_name: str) -> CustomJob:
        """The stored CustomJob (proto-plus), exactly as ``get`` serves it."""
        from google.cloud.aiplatform_v1.types.custom_job import CustomJob

        job: CustomJob = CustomJob.wrap(self.service.get_job(self._name(job_name)))
        return job

    def list_jobs(self, parent: str | None = None) -> list[dict[str, Any]]:
        """Every job (of ``parent`` when given), newest first, as protobuf JSON dicts."""
        return [
            json_format.MessageToDict(pb, use_integers_for_enums=False)
            for pb in self.service.all_jobs(parent)
        ]

    def preempt(self, job_name: str, replica: str | None = None) -> dict[str, Any]:
        """Preempt the job's running attempt (or its next one as soon as it runs).

        Args:
            job_name: the job's name or numeric id.
            replica: preempt only this replica's VM (``workerpool1-0``): a worker is replaced
                while the others keep running (unless the job sets
                ``scheduling.restartJobOnWorkerRestart``); the primary replica's preemption is
                the attempt's.
        """
        return self.service.preempt(self._name(job_name), replica)

    def attempts(self, job_name: str) -> list[dict[str, Any]]:
        """Ledger rows, as served by the ``/attempts`` endpoint."""
        return self.service.attempts(self._name(job_name))

    def logs(
        self, job_name: str, attempt: int | None = None, replica: str | None = None
    ) -> list[dict[str, Any]]:
        """Replica logs: ``[{"attempt", "replica", "path", "text"}, ...]``."""
        return self.service.logs(self._name(job_name), attempt, replica)

    def set_spot_capacity(
        self,
        location: str,
        machine_type: str = ANY_MACHINE,
        *,
        available: bool,
        seconds: float | None = None,
        refusal: str = STOCKOUT,
    ) -> None:
        """Give a region Spot capacity, or take it away, for a machine type or all of them.

        While a region has no Spot VMs for a machine type, a Spot job needing it is answered as
        ``refusal`` says: ``"STOCKOUT"``, the create is accepted, the job waits in PENDING without
        VMs and FAILS with code 8 (``Resources are insufficient in region: ...``) unless capacity
        comes back within ``stockout_seconds``; ``"QUOTA"``, the create is refused with 429
        RESOURCE_EXHAUSTED and Vertex's quota words. A running Spot attempt there is preempted
        (SIGTERM, grace period) and its restart waits the same way. STANDARD and FLEX_START jobs
        are not affected. Works before :meth:`start` too (capacity from the start).

        Args:
            location: a Vertex AI region (``kfp_spot.vertex.regions``), e.g. ``"us-central1"``.
            machine_type: a machine type of kfp-spot's table, or ``"*"`` for every one; a
                machine type's setting wins over the region's ``"*"``.
            available: whether Spot VMs can be had.
            seconds: how long the setting lasts (None: for good); then it is gone, and the
                region has Spot capacity again (unless its ``"*"`` setting says otherwise).
            refusal: ``"STOCKOUT"`` (default) or ``"QUOTA"``.

        Raises:
            ValueError: a bad argument, naming it and what is valid.
        """
        self.spot_capacity.set(
            location, machine_type, available=available, seconds=seconds, refusal=refusal
        )

    def preempt_replica(
        self, endpoint: str, deployed_model_id: str, replica: int | None = None
    ) -> dict[str, Any]:
        """Preempt one serving replica of a Spot deployed model (a ready one unless given)."""
        return self.service.serving.preempt_replica(endpoint, deployed_model_id, replica)

    def serving_replicas(self, endpoint: str, deployed_model_id: str) -> list[dict[str, Any]]:
        """The replicas of a deployed model: index, life, state, port, pid."""
        return self.service.serving.replica_status(endpoint, deployed_model_id)

    def serving_endpoints(self) -> list[str]:
        """The resource names of every endpoint, oldest first."""
        return self.service.serving.endpoint_names()

    def serving_ledger(self, endpoint: str) -> dict[str, Any]:
        """The serving ledger of an endpoint (``lives`` and ``total``), as ``/ledger`` serves it."""
        return self.service.serving.ledger(endpoint)

    def wait(
        self, job_name: str, states: Collection[str] = TERMINAL, timeout: float = 120.0
    ) -> CustomJob:
        """Wait until the job is in one of ``states`` (state names); returns it.

        Raises:
            TimeoutError: naming the state it was left in.
        """
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_name)
            if job.state.name in states:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{job_name} still {job.state.name} after {timeout} s "
                    f"(waited for {', '.join(states)})"
                )
            time.sleep(0.05)
