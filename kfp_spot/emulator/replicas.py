"""Replica processes of one attempt: their Vertex environment, start and (graceful) stop.

Each replica is its own process in its own process group, so a preemption reaches the training
process and everything it started (data loaders, shells): SIGTERM to the group, a grace period,
then SIGKILL -- as Compute Engine does when it reclaims a Spot VM.

A reaper thread per replica waits for its exit and reports it (``Replica.exited`` and an
``on_exit`` callback), so the emulator learns of an exit at once instead of polling for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from kfp_spot import fs

# Vertex's names for the worker pools in TF_CONFIG, by pool index.
TF_TASK_TYPES = ("chief", "worker", "ps", "evaluator")
# Marks a replica process as ours, so a restarted emulator kills only its own orphans.
TOKEN_VAR = "KFP_SPOT_EMULATOR_PROCESS"


@dataclass
class ReplicaPlan:
    """What one replica runs and sees, before it is started.

    Attributes:
        name: ``workerpool{pool}-{index}``, Vertex's replica name.
        pool: worker pool index.
        index: replica index within the pool.
        address: ``host:port`` this replica would serve on (for cluster specs).
        env: the Vertex variables of this replica.
    """

    name: str
    pool: int
    index: int
    address: str
    env: dict[str, str] = field(default_factory=dict)


def output_base(uri: str) -> str:
    """The base output directory as the replicas see it.

    ``gs:///abs/path`` (an empty bucket name, which GCS cannot have) is what the aiplatform SDK
    makes of a local ``staging_bucket``; the emulator takes it as the local path ``/abs/path``.
    """
    if uri.startswith("gs:///"):
        return uri[len("gs://") :]
    return uri


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports on ``host`` that nothing listens on right now.

    The sockets stay bound until all are picked: a port released and picked again would give two
    replicas of one job the same address in their cluster spec.
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def replica_names(job_spec: Any) -> list[tuple[str, int, int]]:
    """``(name, pool, index)`` of every replica of a ``CustomJobSpec``, primary replica first.

    Empty placeholder pools have no replicas (Vertex's ``workerpool{pool}-{index}`` names keep
    the pool's position, so a job with pools 0 and 2 has no ``workerpool1-*``).
    """
    return [
        (f"workerpool{pool_index}-{index}", pool_index, index)
        for pool_index, pool in enumerate(job_spec.worker_pool_specs)
        if pool.ByteSize()
        for index in range(pool.replica_count)
    ]


def plan_replicas(
    job_id: str, project: str, job_spec: Any, ports: Sequence[int] | None = None
) -> list[ReplicaPlan]:
    """The replicas of a job and the environment Vertex gives each of them.

    Args:
        job_id: numeric job id (``CLOUD_ML_JOB_ID``).
        project: the project of the job.
        job_spec: the job's ``CustomJobSpec`` (raw protobuf).
        ports: one port per replica in pool order; free ports are picked when omitted.

    Returns:
        One plan per replica, primary replica first.
    """
    names = replica_names(job_spec)
    total = len(names)
    port_iter = iter(ports if ports is not None else free_ports(total))
    plans: list[ReplicaPlan] = []
    for name, pool_index, index in names:
        port = next(port_iter)
        plans.append(ReplicaPlan(name, pool_index, index, f"127.0.0.1:{port}"))
    base = output_base(job_spec.base_output_directory.output_uri_prefix)
    common: dict[str, str] = {"CLOUD_ML_JOB_ID": job_id, "CLOUD_ML_PROJECT_ID": project}
    if base:  # with the trailing "/" CustomJobSpec.base_output_directory documents
        common["AIP_MODEL_DIR"] = fs.join(base, "model") + "/"
        common["AIP_CHECKPOINT_DIR"] = fs.join(base, "checkpoints") + "/"
        common["AIP_TENSORBOARD_LOG_DIR"] = fs.join(base, "logs") + "/"
    for plan in plans:
        plan.env.update(common)
    if total <= 1:
        return plans
    cluster: dict[str, list[str]] = {}
    tf_cluster: dict[str, list[str]] = {}
    for plan in plans:
        cluster.setdefault(f"workerpool{plan.pool}", []).append(plan.address)
        task_type = TF_TASK_TYPES[plan.pool]
        if task_type != "evaluator":  # TensorFlow keeps evaluators out of the cluster
            tf_cluster.setdefault(task_type, []).append(plan.address)
    job_json = json_format.MessageToJson(job_spec, indent=None)
    primary = plans[0]
    world = [p for p in plans if p.pool in (0, 1)]
    for plan in plans:
        plan.env["CLUSTER_SPEC"] = json.dumps(
            {
                "cluster": cluster,
                "environment": "cloud",
                "task": {"type": f"workerpool{plan.pool}", "index": plan.index, "trial": ""},
                "job": job_json,
            }
        )
        plan.env["TF_CONFIG"] = json.dumps(
            {
                "cluster": tf_cluster,
                "task": {"type": TF_TASK_TYPES[plan.pool], "index": plan.index, "trial": ""},
                "job": job_json,
                "environment": "cloud",
            }
        )
        master_host, master_port = primary.address.rsplit(":", 1)
        plan.env["MASTER_ADDR"] = master_host
        plan.env["MASTER_PORT"] = master_port
        plan.env["WORLD_SIZE"] = str(len(world))
        if plan in world:
            plan.env["RANK"] = str(world.index(plan))
    return plans


def container_command(runtime: str, container_spec: Any, env: Mapping[str, str]) -> list[str]:
    """The ``docker run`` / ``podman run`` command line of a containerSpec replica.

    The container shares the host network (cluster addresses are 127.0.0.1 ports) and gets the
    Vertex variables; a local ``AIP_*`` directory is mounted at the same path so it is writable.

    Args:
        runtime: path of ``docker`` or ``podman``.
        container_spec: the pool's ``ContainerSpec`` (raw protobuf).
        env: the replica's variables (Vertex's and the spec's own).
    """
    cmd = [runtime, "run", "--rm", "--network=host"]
    mounts = set()
    for key in ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"):
        local = fs.to_local_path(env[key]) if env.get(key) else None
        if local and local not in mounts:
            mounts.add(local)
            cmd += ["-v", f"{local}:{local}"]
    for key, value in env.items():
        cmd += ["-e", f"{key}={value}"]
    if container_spec.command:
        cmd += ["--entrypoint", container_spec.command[0], container_spec.image_uri]
        cmd += list(container_spec.command[1:])
    else:
        cmd.append(container_spec.image_uri)
    return cmd + list(container_spec.args)


@dataclass
class Replica:
    """A started replica process.

    Attributes:
        name: Vertex's replica name (``workerpool0-0``).
        process: the process (leader of its own process group).
        token: the value of ``KFP_SPOT_EMULATOR_PROCESS`` in its environment.
        log_path: where its output goes.
        exited: set by the reaper thread once the process has exited and been reaped.
    """

    name: str
    process: subprocess.Popen[bytes]
    token: str
    log_path: Path
    exited: threading.Event = field(default_factory=threading.Event)

    @property
    def pid(self) -> int:
        """The process id (also its process group id)."""
        return self.process.pid

    def returncode(self) -> int | None:
        """The exit status, ``128 + signal`` when a signal ended it, None while it runs."""
        code = self.process.poll()
        if code is None:
            return None
        return 128 - code if code < 0 else code


def start(
    name: str,
    command: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    cwd: Path,
    on_exit: Callable[[], None] | None = None,
    *,
    fresh_cwd: bool = False,
) -> Replica:
    """Start one replica in a new process group, its output appended to ``log_path``.

    It gets a temporary directory (``TMPDIR``) of its own, as a VM has its own ``/tmp``, and
    ``fresh_cwd`` makes ``cwd`` its own too (emptied first): both are removed when it ends, as a
    preempted VM's disk is, so what a replica leaves there never reaches the next attempt.
    ``on_exit`` is called (from the replica's reaper thread) as soon as the process has exited.
    """
    token = uuid.uuid4().hex
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if fresh_cwd:
        shutil.rmtree(cwd, ignore_errors=True)  # left by an emulator that died
    cwd.mkdir(parents=True, exist_ok=True)
    # Beside the user's own temp dir, not in the state dir: a socket made below it must fit
    # AF_UNIX's 104 bytes (macOS), as below a VM's /tmp.
    scratch = [Path(tempfile.mkdtemp(prefix="kfp-vm-"))]
    if fresh_cwd:
        scratch.append(cwd)
    try:
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**env, TOKEN_VAR: token, "TMPDIR": str(scratch[0])},
                cwd=str(cwd),
                start_new_session=True,
            )
    except BaseException:
        _remove(scratch)
        raise
    replica = Replica(name, process, token, log_path)
    threading.Thread(
        target=_reap,
        args=(replica, on_exit, scratch),
        name=f"reap-{name}-{process.pid}",
        daemon=True,
    ).start()
    return replica


def _remove(directories: Sequence[Path]) -> None:
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)


def _reap(replica: Replica, on_exit: Callable[[], None] | None, scratch: Sequence[Path]) -> None:
    replica.process.wait()
    replica.exited.set()
    if on_exit is not None:
        on_exit()
    _remove(scratch)  # the VM's disk goes with it


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to a process group; one that is gone (or not ours to signal) is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def terminate(replica: Replica) -> None:
    """SIGTERM a replica's process group (the start of one VM's preemption); returns at once."""
    if not replica.exited.is_set():
        signal_group(replica.pid, signal.SIGTERM)


def kill(replica: Replica) -> None:
    """SIGKILL a replica's whole process group (its VM is gone) and reap the leader."""
    signal_group(replica.pid, signal.SIGKILL)
    replica.exited.wait()


def stop(replicas: Sequence[Replica], grace_period: float) -> None:
    """SIGTERM every replica's process group, wait up to ``grace_period`` s, then SIGKILL."""
    for replica in replicas:
        terminate(replica)
    deadline = time.monotonic() + grace_period
    for replica in replicas:  # woken by each exit, not by a polling interval
        replica.exited.wait(max(0.0, deadline - time.monotonic()))
    for replica in replicas:
        # SIGKILL the whole group even when the leader has exited: its children may linger.
        kill(replica)
