"""One attempt of a job: install its packages, start its replicas, watch them, stop them.

The runner knows nothing of the scheduler or the API: it gets an :class:`AttemptContext` (the
settings it needs, the :class:`AttemptRecorder` that records its transitions, and callbacks) and
reports its end through ``on_done``. It sleeps until something happens: a request (``wake()``,
called for a preempt or cancel request and when the emulator stops), a replica's exit (its reaper
thread calls ``wake()``), or the next deadline (automatic preemption, timeout, heartbeat).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kfp_spot import envcache, fs
from kfp_spot.emulator import replicas
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

log = logging.getLogger(__name__)


class AttemptRecorder(Protocol):
    """Where an attempt's transitions are recorded (:class:`~.lifecycle.Lifecycle` is one)."""

    def job(self, job_id: str) -> JobRow:
        """The job's current row."""
        ...

    def mark_running(
        self, job_id: str, attempt: int, processes: Sequence[Mapping[str, Any]]
    ) -> None:
        """The replicas are started: the attempt is RUNNING."""
        ...

    def heartbeat(self, job_id: str, attempt: int) -> None:
        """The attempt still runs."""
        ...

    def finish_attempt(self, job_id: str, attempt: int, reason: str, **kwargs: Any) -> None:
        """The attempt ended (see ``Lifecycle.finish_attempt`` for the keywords)."""
        ...


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

    recorder: AttemptRecorder
    state_dir: StateDir
    env_cache_dir: Path
    grace_period: float
    shutdown_grace: float
    stopping: threading.Event
    container_runtime: Callable[[], str | None]
    on_done: Callable[[AttemptRunner], None]


class AttemptRunner:
    """Runs one attempt: install, start replicas, watch them, stop them, record the outcome.

    Args:
        ctx: what the runner uses from the emulator.
        row: the job.
        pb: the job's CustomJob (raw protobuf).
        attempt: the attempt number (1-based).
        needs: simulated VMs per machine type the attempt holds (given back through ``on_done``).
        preempt_after: seconds after RUNNING at which the attempt is preempted, or None.
    """

    def __init__(
        self,
        ctx: AttemptContext,
        row: JobRow,
        pb: Any,
        attempt: int,
        needs: Counter[str],
        preempt_after: float | None = None,
    ) -> None:
        self.ctx = ctx
        self.job_id = row.id
        self.project = row.project  # the ID the job was created with
        self.pb = pb
        self.attempt = attempt
        self.needs = needs
        self.preempt_after = preempt_after
        self.replicas: list[replicas.Replica] = []
        self._wakeup = threading.Event()
        self._thread = threading.Thread(
            target=self._main, name=f"attempt-{row.id}-{attempt}", daemon=True
        )

    def start(self) -> None:
        """Run the attempt in its own thread."""
        self._thread.start()

    def wake(self) -> None:
        """Make the runner look at its job now (a request came, a replica exited, ...)."""
        self._wakeup.set()

    def join(self) -> None:
        """Wait for the attempt to end (after the emulator began stopping)."""
        self._thread.join()

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

    def _commands(self) -> list[tuple[replicas.ReplicaPlan, list[str], dict[str, str]]]:
        """The command and the job's own variables of every replica (installs packages)."""
        spec = self.pb.job_spec
        plans = replicas.plan_replicas(self.job_id, self.project, spec)
        pythons: dict[int, str] = {}
        out = []
        for plan in plans:
            pool = spec.worker_pool_specs[plan.pool]
            if pool.HasField("python_package_spec"):
                pps = pool.python_package_spec
                if plan.pool not in pythons:
                    pythons[plan.pool] = str(
                        envcache.package_env(
                            list(pps.package_uris),
                            self.ctx.env_cache_dir,
                            executor_image_uri=pps.executor_image_uri,
                        )
                    )
                cmd = [pythons[plan.pool], "-m", pps.python_module, *pps.args]
                user = {e.name: e.value for e in pps.env}
            else:
                cs = pool.container_spec
                runtime = self.ctx.container_runtime()
                if runtime is None:
                    raise OSError("no container runtime (docker or podman) answers")
                user = {e.name: e.value for e in cs.env}
                cmd = replicas.container_command(runtime, cs, {**plan.env, **user})
            out.append((plan, cmd, user))
        return out

    def _start_replicas(
        self, commands: list[tuple[replicas.ReplicaPlan, list[str], dict[str, str]]]
    ) -> None:
        base = replicas.output_base(self.pb.job_spec.base_output_directory.output_uri_prefix)
        local_base = fs.to_local_path(base) if base else None
        if local_base:
            for sub in ("model", "checkpoints", "logs"):
                os.makedirs(os.path.join(local_base, sub), exist_ok=True)
        host_env = dict(os.environ)
        state_dir = self.ctx.state_dir
        for plan, cmd, user in commands:
            env = replicas.process_env(host_env, plan.env, user)
            log_path = state_dir.attempt_log(self.job_id, self.attempt, plan.name)
            cwd = state_dir.work_dir(self.job_id, plan.name)
            self.replicas.append(
                replicas.start(plan.name, cmd, env, log_path, cwd, on_exit=self.wake)
            )

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
            self._wakeup.wait(max(0.0, min([next_beat, *deadlines]) - time.monotonic()))

    def _step(self, t0: float, timeout: float | None) -> bool:
        """Act on the job's requests, deadlines and replica exits; True once the attempt ended."""
        ctx = self.ctx
        now = time.monotonic()
        row = self._job()
        if row.cancel_requested:
            replicas.stop(self.replicas, ctx.grace_period)
            self._finish("CANCELLED", state=CANCELLED, error=(CODE_CANCELLED, "CANCELED"))
            return True
        if ctx.stopping.is_set():
            replicas.stop(self.replicas, ctx.shutdown_grace)
            self._finish("EMULATOR_RESTARTED", preempted=True)
            return True
        if row.preempt_requested or (
            self.preempt_after is not None and now - t0 >= self.preempt_after
        ):
            log.info("preempting job %s attempt %d", self.job_id, self.attempt)
            replicas.stop(self.replicas, ctx.grace_period)
            self._finish("PREEMPTED", preempted=True)
            return True
        if timeout is not None and now - t0 >= timeout:
            replicas.stop(self.replicas, ctx.grace_period)
            self._finish(
                "FAILED",
                state=FAILED,
                error=(
                    CODE_DEADLINE_EXCEEDED,
                    f"The job ran longer than jobSpec.scheduling.timeout ({timeout:g} s)",
                ),
            )
            return True
        for replica in self.replicas:
            code = replica.returncode()
            if code is None or (code == 0 and replica is not self.replicas[0]):
                continue
            others = [r for r in self.replicas if r is not replica]
            replicas.stop(others, ctx.grace_period)
            if code == 0:
                self._finish("SUCCEEDED", state=SUCCEEDED)
            else:
                job_name = f"{row.parent}/customJobs/{self.job_id}"
                self._finish(
                    "FAILED",
                    state=FAILED,
                    error=(
                        CODE_INVALID_ARGUMENT,
                        f"The replica {replica.name} exited with a non-zero status of "
                        f"{code}. To find out more about why your job exited please check "
                        f"the logs: kfp-spot emulator logs {job_name} "
                        f"(file {replica.log_path})",
                    ),
                )
            return True
        return False
