"""One attempt of a job: install its packages, start its replicas, watch them, stop them.

The runner knows nothing of the scheduler or the API: it gets an :class:`AttemptContext` (the
settings it needs, the :class:`AttemptTransitions` it records its transitions through, and
callbacks) and reports its end through ``on_done``. It sleeps until something happens: a request
(``wake()``, called for a preempt or cancel request and when the emulator stops), a replica's exit
(its reaper thread calls ``wake()``), or the next deadline (automatic preemption, timeout,
heartbeat, the end of a worker's grace period, a worker's replacement).

Every replica runs on its own simulated VM. A worker's VM can be preempted on its own: SIGTERM to
its process group, the grace period, SIGKILL; the VM is away (not billed) for the policy's
``vm_downtime``, then its replacement starts with the same name, address and environment while the
other replicas keep running. With ``scheduling.restartJobOnWorkerRestart`` (and not
``disableRetries``, which overrides it) a worker's preemption restarts the whole attempt instead;
the primary replica's preemption always does.

Why one module: an attempt's replicas, VMs and deadlines are one object's state, woken by one
condition; the per-VM preemption and the whole-attempt stop must see the same state under the same
lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kfp_spot import envcache, fs
from kfp_spot.emulator import containers, replicas, vmenv
from kfp_spot.emulator.replicas import Replica, ReplicaPlan
from kfp_spot.emulator.statedir import StateDir
from kfp_spot.emulator.states import (
    CANCELLED,
    CODE_CANCELLED,
    CODE_DEADLINE_EXCEEDED,
    CODE_INTERNAL,
    CODE_INVALID_ARGUMENT,
    FAILED,
    HEARTBEAT,
    QUEUED,
    SUCCEEDED,
)
from kfp_spot.emulator.store import JobRow
from kfp_spot.packaging import envreads
from kfp_spot.trainer.preemption import GRACE_PERIOD_VAR

log = logging.getLogger(__name__)


class AttemptTransitions(Protocol):
    """Where an attempt's transitions are recorded (:class:`~.lifecycle.Lifecycle` is one)."""

    def job(self, job_id: str) -> JobRow:
        """The job's current row."""
        ...

    def mark_running(
        self, job_id: str, attempt: int, processes: Sequence[Mapping[str, Any]]
    ) -> None:
        """The replicas are started: the attempt is RUNNING."""
        ...

    def take_vm_requests(self, job_id: str) -> set[str]:
        """Replicas whose VM was asked to be preempted since the last call."""
        ...

    def vm_preempted(self, job_id: str, attempt: int, replica: str, at: float) -> bool:
        """A worker's VM was preempted at ``at``; False when the restart budget is exhausted."""
        ...

    def vm_restarted(
        self, job_id: str, attempt: int, replica: str, process: Mapping[str, Any], at: float
    ) -> None:
        """A preempted worker's replacement (``process``: ``pid``, ``token``) started at ``at``."""
        ...

    def heartbeat(self, job_id: str, attempt: int) -> None:
        """The attempt still runs."""
        ...

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
        """The attempt ended (see ``Lifecycle.finish_attempt``)."""
        ...


def _check_python(python: str, pps: Any) -> None:
    """Refuse a job module that needs a newer Python than its executor image's, as Vertex would.

    The replicas run on this machine's Python; on Vertex AI the image's (older) one fails the
    import of syntax or standard modules it lacks.

    Raises:
        envcache.PackageInstallError: it needs a newer Python (where, and why).
    """
    from kfp_spot import executors
    from kfp_spot.packaging import pycompat

    image = executors.profile(pps.executor_image_uri)  # as package_env read it
    site = envcache.site_packages_of(python)
    found = pycompat.problems(site, pps.python_module, image.python)
    if found:
        raise envcache.PackageInstallError(
            pycompat.explain(found, pps.python_module, image.python, image.image)
        )


def _check_wheels(pps: Any) -> None:
    """Refuse a package URI that is a wheel pip on the image's Linux x86_64 Python refuses.

    This machine's pip (on a Mac, say) would install a ``macosx_14_0_arm64`` wheel; Vertex AI's
    pip, on the training VM, fails the job with "not a supported wheel on this platform".

    Raises:
        envcache.PackageInstallError: naming the wheel and what pip there takes.
    """
    from kfp_spot import executors
    from kfp_spot.packaging import wheeltags

    image = executors.profile(pps.executor_image_uri)
    for uri in pps.package_uris:
        name = str(uri).rstrip("/").rsplit("/", 1)[-1]
        reason = wheeltags.unsupported_reason(name, image.python, f"the image {image.image}")
        if reason:
            raise envcache.PackageInstallError(reason)


def _note_hidden(log_path: Path, hidden: Mapping[str, str]) -> None:
    """Say at the top of a replica's log which variables of this machine it runs without."""
    note = (
        f"kfp-spot emulator: the job's code reads {envreads.described(hidden)}: set on this "
        "machine, but neither in the job's env nor set by Vertex AI, so the job runs without it "
        "here as it would on Vertex AI. Pass it through the worker pool's env (launch_spot_job's "
        "env)."
    )
    log.warning("%s", note)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a", encoding="utf-8") as out:
        out.write(note + "\n")


@dataclass(frozen=True)
class AttemptContext:
    """Everything an attempt runner uses from the rest of the emulator.

    Attributes:
        recorder: reads the job and records the attempt's transitions.
        state_dir: where logs and working directories go.
        env_cache_dir: where package environments are cached.
        grace_period: seconds between SIGTERM and SIGKILL when the attempt is stopped.
        shutdown_grace: the same when the emulator itself stops.
        stopping: set when the emulator stops (the runner is woken too).
        container_runtime: the runtime's path for containerSpec replicas, or None.
        on_done: called once, from the runner's thread, when the attempt is over.
    """

    recorder: AttemptTransitions
    state_dir: StateDir
    env_cache_dir: Path
    grace_period: float
    shutdown_grace: float
    stopping: threading.Event
    container_runtime: Callable[[], str | None]
    on_done: Callable[[AttemptRunner], None]


@dataclass
class VM:
    """One replica's simulated VM during an attempt.

    Attributes:
        plan: the replica's name, address and Vertex variables (kept across replacements).
        command: what it runs.
        env: its full process environment.
        life: the job-wide number of its current (or last) process (1 = its first).
        replica: the running process; None while the VM is away.
        preempt_at: monotonic time of this life's automatic preemption, or None.
        terminating_since: monotonic time SIGTERM was sent (its preemption is under way).
        back_at: monotonic time its replacement starts (while away).
        requested: a preemption was asked for while it was not running.
    """

    plan: ReplicaPlan
    command: list[str]
    env: dict[str, str]
    life: int = 1
    replica: replicas.Replica | None = None
    preempt_at: float | None = None
    terminating_since: float | None = None
    back_at: float | None = None
    requested: bool = False

    @property
    def name(self) -> str:
        """Vertex's replica name."""
        return self.plan.name


class AttemptRunner:
    """Runs one attempt: install, start replicas, watch them, stop them, record the outcome.

    Args:
        ctx: what the runner uses from the emulator.
        row: the job.
        pb: the job's CustomJob (raw protobuf).
        attempt: the attempt number (1-based).
        needs: simulated VMs per machine type the attempt holds (given back through ``on_done``).
        preempt_after: seconds after RUNNING at which the attempt is preempted, or None.
        vm_delay: ``(replica, life) -> seconds`` after that life of the replica's VM started at
            which it is preempted (None: never); None for a job whose VMs are never preempted
            on their own (not Spot).
        lives: how many times each replica was started in the job's earlier attempts.
        vm_downtime: seconds a preempted worker's VM stays away before its replacement starts.
    """

    def __init__(
        self,
        ctx: AttemptContext,
        row: JobRow,
        pb: Any,
        attempt: int,
        needs: Counter[str],
        preempt_after: float | None = None,
        *,
        vm_delay: Callable[[str, int], float | None] | None = None,
        lives: Mapping[str, int] | None = None,
        vm_downtime: float = 0.0,
    ) -> None:
        self.ctx = ctx
        self.job_id = row.id
        self.project = row.project  # the ID the job was created with
        self.pb = pb
        self.attempt = attempt
        self.needs = needs
        self.preempt_after = preempt_after
        self.vm_delay = vm_delay
        self.lives = dict(lives or {})
        self.vm_downtime = vm_downtime
        scheduling = pb.job_spec.scheduling
        # disableRetries "overrides Scheduling.restart_job_on_worker_restart to false" (v1 API)
        self.restart_job_on_worker_restart = bool(
            scheduling.restart_job_on_worker_restart and not scheduling.disable_retries
        )
        self.vms: list[VM] = []
        self._wakeup = threading.Event()
        # Set by notify(): the job's row may have changed (a request), read it again. Other
        # wake-ups (heartbeat, deadlines, a replica's exit) act on the row last read: with
        # 1000 running attempts, reading it at every heartbeat was 2000 reads a second.
        self._requests = threading.Event()
        self._requests.set()
        self._row: JobRow | None = None
        self._thread = threading.Thread(
            target=self._main, name=f"attempt-{row.id}-{attempt}", daemon=True
        )

    def start(self) -> None:
        """Run the attempt in its own thread."""
        self._thread.start()

    def wake(self) -> None:
        """Make the runner look at its job now (a replica exited, the emulator stops, ...)."""
        self._wakeup.set()

    def notify(self) -> None:
        """A request came for this job (cancel, preempt): read its row again, and act now."""
        self._requests.set()
        self._wakeup.set()

    def join(self) -> None:
        """Wait for the attempt to end (after the emulator began stopping)."""
        self._thread.join()

    @property
    def replicas(self) -> list[replicas.Replica]:
        """The replica processes running now (a VM that is away has none)."""
        return [vm.replica for vm in self.vms if vm.replica is not None]

    def _main(self) -> None:
        try:
            self._run()
        except Exception as err:  # logged; a job must end, never hang in PENDING or RUNNING
            log.exception("job %s attempt %d: internal error", self.job_id, self.attempt)
            replicas.stop(self.replicas, 0.0)
            with contextlib.suppress(sqlite3.Error):
                self._finish(
                    "FAILED",
                    state=FAILED,
                    error=(CODE_INTERNAL, f"internal error in the emulator: {err!r}"),
                )
        finally:
            self.ctx.on_done(self)

    def _job(self) -> JobRow:
        return self.ctx.recorder.job(self.job_id)

    def _finish(self, reason: str, **kwargs: Any) -> None:
        self.ctx.recorder.finish_attempt(self.job_id, self.attempt, reason, **kwargs)

    def _interrupted(self) -> bool:
        """Handle a cancel or emulator stop that arrives before RUNNING; True when handled."""
        if self._job().cancel_requested:
            replicas.stop(self.replicas, self.ctx.grace_period)
            self._finish("CANCELLED", state=CANCELLED, error=(CODE_CANCELLED, "CANCELED"))
            return True
        if self.ctx.stopping.is_set():
            replicas.stop(self.replicas, self.ctx.shutdown_grace)
            self._finish("EMULATOR_RESTARTED", state=QUEUED)
            return True
        return False

    def _commands(self) -> list[tuple[ReplicaPlan, list[str], dict[str, str], dict[str, str]]]:
        """Every replica's command, the job's own variables and the host's its code may not see.

        Installs the packages. The last are variables the job's code reads that only this
        machine sets (:func:`envreads.host_only`): on Vertex AI the job runs without them.
        """
        spec = self.pb.job_spec
        plans = replicas.plan_replicas(self.job_id, self.project, spec)
        for plan in plans:  # the trainer reports (and plans its last save in) the job's own
            plan.env[GRACE_PERIOD_VAR] = repr(float(self.ctx.grace_period))
        pythons: dict[int, str] = {}
        reads: dict[int, dict[str, str]] = {}
        out = []
        for plan in plans:
            pool = spec.worker_pool_specs[plan.pool]
            if pool.HasField("python_package_spec"):
                pps = pool.python_package_spec
                if plan.pool not in pythons:
                    _check_wheels(pps)
                    pythons[plan.pool] = str(
                        envcache.package_env(
                            list(pps.package_uris),
                            self.ctx.env_cache_dir,
                            executor_image_uri=pps.executor_image_uri,
                        )
                    )
                    _check_python(pythons[plan.pool], pps)
                    site = envcache.site_packages_of(pythons[plan.pool])
                    reads[plan.pool] = envreads.reads(site, pps.python_module)
                cmd = [pythons[plan.pool], "-m", pps.python_module, *pps.args]
                user = vmenv.expand_env(pps.env, plan.env)
                hidden = envreads.host_only(reads[plan.pool], os.environ, plan.env, user)
            else:
                cs = pool.container_spec
                runtime = self.ctx.container_runtime()
                if runtime is None:
                    raise OSError(
                        f"no container runtime (docker or podman): {containers.no_runtime()}"
                    )
                user = vmenv.expand_env(cs.env, plan.env)
                cmd = replicas.container_command(runtime, cs, {**plan.env, **user})
                hidden = {}  # a container gets only Vertex's variables and its own
            out.append((plan, cmd, user, hidden))
        return out

    def _start_replicas(
        self, commands: list[tuple[ReplicaPlan, list[str], dict[str, str], dict[str, str]]]
    ) -> None:
        base = replicas.output_base(self.pb.job_spec.base_output_directory.output_uri_prefix)
        local_base = fs.to_local_path(base) if base else None
        if local_base:
            for sub in ("model", "checkpoints", "logs"):
                os.makedirs(os.path.join(local_base, sub), exist_ok=True)
        host_env = dict(os.environ)
        for plan, cmd, user, hidden in commands:
            if hidden:
                _note_hidden(
                    self.ctx.state_dir.attempt_log(self.job_id, self.attempt, plan.name), hidden
                )
            vm = VM(plan, cmd, vmenv.process_env(host_env, plan.env, user, hidden))
            vm.life = self.lives.get(plan.name, 0) + 1
            self.vms.append(vm)
            self._launch(vm)

    def _launch(self, vm: VM) -> Replica:
        """Start the VM's replica process (its first, or a replacement after a preemption)."""
        state_dir = self.ctx.state_dir
        replica = vm.replica = replicas.start(
            vm.name,
            vm.command,
            vm.env,
            state_dir.attempt_log(self.job_id, self.attempt, vm.name),
            state_dir.work_dir(self.job_id, vm.name, vm.life),
            on_exit=self.wake,
            fresh_cwd=True,
        )
        vm.back_at = None
        vm.terminating_since = None
        vm.preempt_at = None
        delay = self.vm_delay(vm.name, vm.life) if self.vm_delay else None
        if delay is not None:
            vm.preempt_at = time.monotonic() + delay
        return replica

    def _run(self) -> None:
        try:
            commands = self._commands()
        except (OSError, envcache.PackageInstallError) as err:
            if self._interrupted():
                return
            self._finish(
                "FAILED",
                state=FAILED,
                error=(CODE_INVALID_ARGUMENT, f"The replicas could not be prepared: {err}"),
            )
            return
        if self._interrupted():
            return
        try:
            self._start_replicas(commands)
        except OSError as err:
            replicas.stop(self.replicas, 0.0)
            self._finish(
                "FAILED",
                state=FAILED,
                error=(CODE_INVALID_ARGUMENT, f"The replicas could not be started: {err}"),
            )
            return
        self.ctx.recorder.mark_running(
            self.job_id,
            self.attempt,
            [{"replica": r.name, "pid": r.pid, "token": r.token} for r in self.replicas],
        )
        self._watch()

    def _watch(self) -> None:
        timeout = None
        if self.pb.job_spec.scheduling.HasField("timeout"):
            timeout = self.pb.job_spec.scheduling.timeout.ToTimedelta().total_seconds() or None
        t0 = time.monotonic()
        next_beat = t0 + HEARTBEAT
        deadlines = [t0 + d for d in (self.preempt_after, timeout) if d is not None]
        while True:
            # Cleared before looking: a wake() that comes after this point is seen next round.
            self._wakeup.clear()
            if self._step(t0, timeout):
                return
            now = time.monotonic()
            if now >= next_beat:
                self.ctx.recorder.heartbeat(self.job_id, self.attempt)
                next_beat = now + HEARTBEAT
            wake_at = min([next_beat, *deadlines, *self._vm_deadlines()])
            self._wakeup.wait(max(0.0, wake_at - time.monotonic()))

    def _vm_deadlines(self) -> list[float]:
        """When a VM needs looking at: its preemption, the end of its grace, its replacement."""
        out = []
        for vm in self.vms:
            if vm.terminating_since is not None:
                out.append(vm.terminating_since + self.ctx.grace_period)
            elif vm.replica is not None and vm.preempt_at is not None:
                out.append(vm.preempt_at)
            elif vm.replica is None and vm.back_at is not None:
                out.append(vm.back_at)
        return out

    def _end(self, grace: float, reason: str, **kwargs: Any) -> bool:
        """Stop every replica still running and record the attempt's end; True (it ended)."""
        replicas.stop(self.replicas, grace)
        self._finish(reason, **kwargs)
        return True

    def _step(self, t0: float, timeout: float | None) -> bool:
        """Act on the job's requests, deadlines and replica exits; True once the attempt ended."""
        ctx = self.ctx
        now = time.monotonic()
        if self._row is None or self._requests.is_set():
            self._requests.clear()  # before reading: a request after this is seen next round
            self._row = self._job()
        row = self._row
        if row.cancel_requested:
            return self._end(
                ctx.grace_period, "CANCELLED", state=CANCELLED, error=(CODE_CANCELLED, "CANCELED")
            )
        if ctx.stopping.is_set():
            return self._end(ctx.shutdown_grace, "EMULATOR_RESTARTED", preempted=True)
        for name in ctx.recorder.take_vm_requests(self.job_id):
            for vm in self.vms:
                vm.requested = vm.requested or vm.name == name
        primary = self.vms[0]
        if (
            row.preempt_requested
            or (self.preempt_after is not None and now - t0 >= self.preempt_after)
            or self._preempt_due(primary, now)
        ):
            log.info("preempting job %s attempt %d", self.job_id, self.attempt)
            return self._end(ctx.grace_period, "PREEMPTED", preempted=True)
        if timeout is not None and now - t0 >= timeout:
            return self._end(
                ctx.grace_period,
                "FAILED",
                state=FAILED,
                error=(
                    CODE_DEADLINE_EXCEEDED,
                    f"The job ran longer than jobSpec.scheduling.timeout ({timeout:g} s)",
                ),
            )
        for vm in self.vms[1:]:
            if self._step_worker(vm, now):
                return True
        for vm in self.vms:
            replica = vm.replica
            if replica is None or vm.terminating_since is not None:
                continue  # away, or being preempted: its exit is expected
            code = replica.returncode()
            if code is None or (code == 0 and vm is not primary):
                continue
            if code == 0:
                return self._end(ctx.grace_period, "SUCCEEDED", state=SUCCEEDED)
            job_name = f"{row.parent}/customJobs/{self.job_id}"
            return self._end(
                ctx.grace_period,
                "FAILED",
                state=FAILED,
                error=(
                    CODE_INVALID_ARGUMENT,
                    f"The replica {replica.name} exited with a non-zero status of "
                    f"{code}. To find out more about why your job exited please check "
                    f"the logs: kfp-spot emulator logs {job_name} --state-dir "
                    f"{shlex.quote(str(ctx.state_dir.path))} (file {replica.log_path})",
                ),
            )
        return False

    def _preempt_due(self, vm: VM, now: float) -> bool:
        """Whether the VM's preemption was asked for or its time has come (while it runs)."""
        if vm.replica is None or vm.terminating_since is not None:
            return False
        return vm.requested or (vm.preempt_at is not None and now >= vm.preempt_at)

    def _step_worker(self, vm: VM, now: float) -> bool:
        """Preempt, finish preempting or replace one worker's VM; True when the attempt ended."""
        ctx = self.ctx
        if self._preempt_due(vm, now):
            vm.requested = False
            if self.restart_job_on_worker_restart:
                log.info(
                    "job %s attempt %d: %s preempted; restartJobOnWorkerRestart restarts the job",
                    self.job_id,
                    self.attempt,
                    vm.name,
                )
                return self._end(ctx.grace_period, "PREEMPTED", preempted=True)
            assert vm.replica is not None
            replicas.terminate(vm.replica)
            vm.terminating_since = now
            log.info("job %s attempt %d: preempting %s's VM", self.job_id, self.attempt, vm.name)
        replica = vm.replica
        if vm.terminating_since is not None and replica is not None:
            if not replica.exited.is_set() and now < vm.terminating_since + ctx.grace_period:
                return False
            replicas.kill(replica)  # the VM is gone: everything it ran goes with it
            gone = time.time()
            if not ctx.recorder.vm_preempted(self.job_id, self.attempt, vm.name, gone):
                return self._end(ctx.grace_period, "PREEMPTED", preempted=True)  # STOCKOUT
            vm.replica = None
            vm.terminating_since = None
            vm.back_at = time.monotonic() + self.vm_downtime
            now = time.monotonic()
        if vm.replica is None and vm.back_at is not None and now >= vm.back_at:
            vm.life += 1
            replica = self._launch(vm)
            ctx.recorder.vm_restarted(
                self.job_id,
                self.attempt,
                vm.name,
                {"pid": replica.pid, "token": replica.token},
                time.time(),
            )
            if vm.requested:  # asked again while it was away: preempt the replacement
                self.wake()
        return False
