"""How one serving replica of a deployed model is started: its command line and environment.

A prebuilt prediction image runs :data:`PREDICTOR` in the image's cached serving environment; a
custom container runs under the local container runtime, its port published on this machine's
loopback (:func:`container_command`). Either way the replica gets Vertex's ``AIP_*`` variables
and, when the model has artifacts, a local copy of them (``AIP_STORAGE_URI``), made once per
deployed model.

The stored Model is checked again, by today's rules, before anything of it reaches a replica: a
model stored by an older emulator whose container spec or artifact URI the upload now refuses
(a NUL character in an env value) fails its deployment with the refused field, as its upload
would be refused now, rather than its replica's start.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kfp_spot import executors, fs
from kfp_spot.emulator import containers, vmenv
from kfp_spot.emulator.serving import store as st
from kfp_spot.emulator.serving.env import serving_python
from kfp_spot.emulator.serving.pool import ReplicaLaunch
from kfp_spot.vertex.custom_job import EMULATOR
from kfp_spot.vertex.model_endpoint import check_artifact_uri
from kfp_spot.vertex.serving_container import check_container_spec

PREDICTOR = Path(__file__).resolve().parent / "predictor.py"  # run as a file, never imported


def replica_launch(
    dep: st.DeploymentRow,
    dm: Any,
    model: Any,
    *,
    local_copy: Path,
    env_cache_dir: Path,
    container_runtime: Callable[[], str | None],
) -> ReplicaLaunch:
    """The launch of ``dep``'s replicas (``dm`` its DeployedModel, ``model`` the Model served).

    Args:
        dep: the deployment row.
        dm: its DeployedModel proto.
        model: the Model proto it serves.
        local_copy: where the model's artifacts are copied (kept across emulator restarts).
        env_cache_dir: where the serving environments are cached.
        container_runtime: the container runtime probe (custom serving containers need one).

    Raises:
        OSError: the artifacts could not be copied.
        RuntimeError: the serving environment could not be made, or a custom container and
            no container runtime.
        ValueError: the emulator does not serve the model's prebuilt image, or the stored model
            breaks a rule its upload is checked by now
            (:class:`~kfp_spot.vertex.values.InvalidFieldError`, naming the field).
    """
    check_container_spec(model, "model")
    if model.artifact_uri:
        check_artifact_uri(model.artifact_uri, EMULATOR, "model.artifactUri")
    spec = model.container_spec
    endpoint_id = dep.endpoint_id
    predict_route = spec.predict_route or (
        f"/v1/endpoints/{endpoint_id}/deployedModels/{dep.id}:predict"
    )
    health_route = spec.health_route or f"/v1/endpoints/{endpoint_id}/deployedModels/{dep.id}"
    if model.artifact_uri and not (local_copy / ".complete").exists():
        shutil.rmtree(local_copy, ignore_errors=True)
        filesystem, path = fs.filesystem(fs.to_local_path(model.artifact_uri) or model.artifact_uri)
        filesystem.get(path.rstrip("/") + "/", str(local_copy) + "/", recursive=True)
        (local_copy / ".complete").write_text(model.artifact_uri)
    aip = {
        "AIP_MODE": "PREDICTION",
        "AIP_HEALTH_ROUTE": health_route,
        "AIP_PREDICT_ROUTE": predict_route,
        "AIP_DEPLOYED_MODEL_ID": dep.id,
        "AIP_ENDPOINT_ID": endpoint_id,
        "AIP_MACHINE_TYPE": dm.dedicated_resources.machine_spec.machine_type,
    }
    if model.artifact_uri:
        aip["AIP_STORAGE_URI"] = str(local_copy)
    user = vmenv.expand_env(spec.env, aip)
    image = executors.prediction_image(spec.image_uri)
    if image is not None:
        python = str(serving_python(image, env_cache_dir))
        aip["KFP_SPOT_SERVING_FRAMEWORK"] = image.framework
        env = vmenv.process_env(os.environ, aip, user)
        return ReplicaLaunch(
            lambda _port: [python, str(PREDICTOR)], env, health_route, predict_route
        )
    runtime = container_runtime()
    if runtime is None:
        raise RuntimeError(f"no container runtime (docker or podman): {containers.no_runtime()}")
    env = {**aip, **user}
    mount = local_copy if model.artifact_uri else None

    def container(port: int) -> list[str]:
        return container_command(runtime, spec, env, port, mount)

    return ReplicaLaunch(
        container, vmenv.process_env(os.environ, {}, {}), health_route, predict_route
    )


def container_command(
    runtime: str, spec: Any, env: Mapping[str, str], port: int, artifacts: Path | None
) -> list[str]:
    """The ``docker run`` / ``podman run`` command line of a custom serving container's replica.

    Its ``port`` is published on this machine's ``127.0.0.1`` (``-p``), not shared through the
    host network: on a Mac the engine runs containers in a Linux VM whose host network is the
    VM's (Docker Desktop's, unless its host networking is turned on; podman machine's always), so
    a port opened there never reached the emulator's health checks. Published, the server must
    listen on ``0.0.0.0`` in the container, as Vertex AI requires of a custom container.

    Args:
        runtime: path of ``docker`` or ``podman``.
        spec: the Model's ``ModelContainerSpec``.
        env: the replica's variables (Vertex's ``AIP_*`` and the spec's own).
        port: the port it listens on (``AIP_HTTP_PORT``), in the container and here.
        artifacts: the local copy of the model's artifacts, mounted read-only at the same path.
    """
    cmd = [runtime, "run", "--rm", "-p", f"127.0.0.1:{port}:{port}"]
    if artifacts is not None:
        cmd += ["-v", f"{artifacts}:{artifacts}:ro"]
    for key, value in {**env, "AIP_HTTP_PORT": str(port)}.items():
        cmd += ["-e", f"{key}={value}"]
    if spec.command:
        cmd += ["--entrypoint", spec.command[0], spec.image_uri, *spec.command[1:]]
    else:
        cmd.append(spec.image_uri)
    return cmd + list(spec.args)
