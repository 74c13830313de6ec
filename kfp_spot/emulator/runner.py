"""One attempt of a job: install its packages, start its replicas, watch them, stop them.

The runner records the outcome through :class:`~kfp_spot.emulator.service.Service`, which decides
what happens to the job next (restart after a preemption, STOCKOUT after the sixth restart, ...).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from google.cloud.aiplatform_v1.types import Scheduling

from kfp_spot import envcache, fs
from kfp_spot.emulator import replicas
from kfp_spot.emulator.states import (
    CANCELLED,
    CANCELLING,
    CODE_CANCELLED,
    CODE_DEADLINE_EXCEEDED,
    CODE_INTERNAL,
    CODE_INVALID_ARGUMENT,
    FAILED,
    HEARTBEAT,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    TICK,
)
from kfp_spot.emulator.store import JobRow

if TYPE_CHECKING:
    from kfp_spot.emulator.service import Service

log = logging.getLogger(__name__)

_SPOT = int(Scheduling.Strategy.SPOT)


class AttemptRunner:
    """Runs one attempt: install, start replicas, watch them, stop them, record the outcome."""

    def __init__(
        self, service: Service, row: JobRow, pb: Any, attempt: int, needs: Counter[str]
    ) -> None:
        self.service = service
        self.job_id = row.id
        self.job_seq = row.seq
        self.project = row.parent.split("/")[1]
        self.pb = pb
        self.attempt = attempt
        self.needs = needs
        self.replicas: list[replicas.Replica] = []
        self._thread = threading.Thread(
            target=self._main, name=f"attempt-{row.id}-{attempt}", daemon=True
        )

    def start(self) -> None:
        """Run the attempt in its own thread."""
        self._thread.start()

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
            self.service._release(self)

    def _job(self) -> JobRow:
        row = self.service.store.job(self.job_id)
        assert row is not None
        return row

    def _finish(self, reason: str, **kwargs: Any) -> None:
        self.service._finish_attempt(self.job_id, self.attempt, reason, **kwargs)

    def _interrupted(self) -> bool:
        """Handle a cancel or emulator stop that arrives before RUNNING; True when handled."""
        if self._job().cancel_requested:
            replicas.stop(self.replicas, self.service.grace_period)
            self._finish("CANCELLED", state=CANCELLED, error=(CODE_CANCELLED, "CANCELED"))
            return True
        if self.service._stopping.is_set():
            replicas.stop(self.replicas, self.service.shutdown_grace)
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
                            self.service.env_cache_dir,
                            executor_image_uri=pps.executor_image_uri,
                        )
                    )
                cmd = [pythons[plan.pool], "-m", pps.python_module, *pps.args]
                user = {e.name: e.value for e in pps.env}
            else:
                cs = pool.container_spec
                runtime = self.service._container_runtime()
                if runtime is None:
                    raise OSError("no container runtime (docker or podman) answers")
                user = {e.name: e.value for e in cs.env}
                cmd = replicas.container_command(runtime, cs, {**plan.env, **user})
            out.append((plan, cmd, user))
        return out

    def _start_replicas(
        self, commands: list[tuple[replicas.ReplicaPlan, list[str], dict[str, str]]]
    ) -> None:
        service = self.service
        base = replicas.output_base(self.pb.job_spec.base_output_directory.output_uri_prefix)
        local_base = fs.to_local_path(base) if base else None
        if local_base:
            for sub in ("model", "checkpoints", "logs"):
                os.makedirs(os.path.join(local_base, sub), exist_ok=True)
        log_dir = service.log_dir(self.job_id) / f"attempt-{self.attempt}"
        host_env = dict(os.environ)
        for plan, cmd, user in commands:
            env = replicas.process_env(host_env, plan.env, user)
            cwd = service.state_dir / "work" / self.job_id / plan.name
            self.replicas.append(
                replicas.start(plan.name, cmd, env, log_dir / f"{plan.name}.log", cwd)
            )

    def _run(self) -> None:
        service = self.service
        try:
            commands = self._commands()
        except (OSError, envcache.PackageInstallError) as err:
            if self._interrupted():
                return
            self._finish(
                "FAILED",
                state=FAILED,
                error=(
                    CODE_INVALID_ARGUMENT,
                    f"The replicas could not be prepared: {err}",
                ),
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
        started = time.time()
        row = self._job()
        service.store.end_attempt(
            self.job_id,
            self.attempt,
            {
                "start_time": started,
                "last_seen": started,
                "queued_seconds": max(0.0, started - (row.queued_since or row.create_time)),
                "processes": json.dumps(
                    [{"replica": r.name, "pid": r.pid, "token": r.token} for r in self.replicas]
                ),
            },
            {
                "state": RUNNING if not row.cancel_requested else CANCELLING,
                "update_time": started,
                **({"start_time": started} if row.start_time is None else {}),
            },
        )
        self._watch(started)

    def _watch(self, started: float) -> None:
        service = self.service
        delay = None
        if self.pb.job_spec.scheduling.strategy == _SPOT:
            delay = service.policy.delay(self.job_seq, self.attempt)
        timeout = None
        if self.pb.job_spec.scheduling.HasField("timeout"):
            timeout = self.pb.job_spec.scheduling.timeout.ToTimedelta().total_seconds() or None
        t0 = time.monotonic()
        last_beat = t0
        while True:
            now = time.monotonic()
            row = self._job()
            if row.cancel_requested:
                replicas.stop(self.replicas, service.grace_period)
                self._finish("CANCELLED", state=CANCELLED, error=(CODE_CANCELLED, "CANCELED"))
                return
            if service._stopping.is_set():
                replicas.stop(self.replicas, service.shutdown_grace)
                self._finish("EMULATOR_RESTARTED", preempted=True)
                return
            if row.preempt_requested or (delay is not None and now - t0 >= delay):
                log.info("preempting job %s attempt %d", self.job_id, self.attempt)
                replicas.stop(self.replicas, service.grace_period)
                self._finish("PREEMPTED", preempted=True)
                return
            if timeout is not None and now - t0 >= timeout:
                replicas.stop(self.replicas, service.grace_period)
                self._finish(
                    "FAILED",
                    state=FAILED,
                    error=(
                        CODE_DEADLINE_EXCEEDED,
                        f"The job ran longer than jobSpec.scheduling.timeout ({timeout:g} s)",
                    ),
                )
                return
            for replica in self.replicas:
                code = replica.returncode()
                if code is None or (code == 0 and replica is not self.replicas[0]):
                    continue
                others = [r for r in self.replicas if r is not replica]
                replicas.stop(others, service.grace_period)
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
                return
            if now - last_beat >= HEARTBEAT:
                service.store.update_attempt(self.job_id, self.attempt, last_seen=time.time())
                last_beat = now
            time.sleep(TICK)
