"""Build the CustomJob the launcher submits, from the launch's job inputs.

The result is a ``google.cloud.aiplatform_v1.types.CustomJob``: the same message the GAPIC client
sends to Vertex AI and to the local emulator. The layout follows GCPC's
``create_custom_training_job_from_component`` (one pool with one replica, a second pool with the
other ``replica_count - 1`` replicas; ``max_wait_duration`` only for FLEX_START), so a job built
here and one built by GCPC for the same inputs agree field for field.

The inputs themselves (how each is read, its default, the field it sets, its rule) are the rows of
:mod:`kfp_spot.jobs.inputs`; the simple fields of the job and of its pools come from those rows
(:func:`~kfp_spot.jobs.inputs.direct_fields`), and this module writes only what is more than a
copy: the pools' layout and code (or the user's own pools), scheduling and strategy, the
environment and the labels. GAPIC's types load here, when a job is built, not when the launcher
is imported.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from google.protobuf import duration_pb2, json_format

from kfp_spot import fs, vertex
from kfp_spot.executors import warn_executor_image
from kfp_spot.jobs.inputs import (
    DEFAULT_MAX_WAIT,
    POOL,
    JobInputs,
    LaunchInputError,
    check_inputs,
    direct_fields,
    input_for_field,
    parse_duration,
    parse_strategy,
)
from kfp_spot.jobs.strategy import Strategy
from kfp_spot.vertex import pipeline_context

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1.types.custom_job import CustomJob, WorkerPoolSpec
    from google.cloud.aiplatform_v1.types.service_networking import PscInterfaceConfig

# The environment variable that tells training code where a previous run's checkpoint is.
RESUME_ENV = "KFP_SPOT_RESUME_FROM"


def _duration_json(seconds: float) -> str:
    text = f"{seconds:.9f}".rstrip("0").rstrip(".")
    return f"{text}s"


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def check_job(job: CustomJob, inputs: JobInputs, target: vertex.Target = vertex.VERTEX_AI) -> None:
    """The rules of ``target`` on ``job`` (:func:`kfp_spot.vertex.validate_for_submission`).

    An executor image the rules accept with a reservation (not in kfp-spot's table, past its end
    of availability) is announced on stderr, the task's console.

    Raises:
        LaunchInputError: naming the input that set the offending field, the rule, and the field.
    """
    try:
        vertex.validate_for_submission(job, target)
    except vertex.InvalidJobSpecError as exc:
        raise LaunchInputError(
            input_for_field(exc.field, inputs), f"{exc.message} (CustomJob field {exc.field})"
        ) from None
    if not inputs.container_image_uri:
        warn_executor_image(inputs.executor_image_uri)


def _code_spec(inputs: JobInputs, env: list[dict[str, str]]) -> dict[str, Any]:
    if inputs.container_image_uri:
        return {
            "container_spec": {
                "image_uri": inputs.container_image_uri,
                "command": list(inputs.command),
                "args": list(inputs.args),
                "env": env,
            }
        }
    return {
        "python_package_spec": {
            "executor_image_uri": inputs.executor_image_uri,
            "package_uris": list(inputs.package_uris),
            "python_module": inputs.python_module,
            "args": list(inputs.args),
            "env": env,
        }
    }


def _parse_pool(index: int, pool: Any) -> WorkerPoolSpec:
    from google.cloud.aiplatform_v1.types.custom_job import WorkerPoolSpec

    if not isinstance(pool, Mapping):
        raise LaunchInputError(f"worker_pool_specs[{index}]", f"expected a dict, got {pool!r}")
    if not pool:
        return WorkerPoolSpec()  # an empty pool keeps the index of later pools (Vertex allows it)
    message = WorkerPoolSpec.pb(WorkerPoolSpec())
    try:
        json_format.ParseDict(dict(pool), message)
    except json_format.ParseError as exc:
        raise LaunchInputError(
            f"worker_pool_specs[{index}]",
            f"not a WorkerPoolSpec (camelCase or snake_case fields of the Vertex API): "
            f"{_one_line(exc)}",
        ) from exc
    return WorkerPoolSpec(message)


def _psc_interface_config(value: Mapping[str, Any]) -> PscInterfaceConfig:
    from google.cloud.aiplatform_v1.types.service_networking import PscInterfaceConfig

    message = PscInterfaceConfig.pb(PscInterfaceConfig())
    try:
        json_format.ParseDict(dict(value), message)
    except json_format.ParseError as exc:
        raise LaunchInputError(
            "psc_interface_config",
            "not a PscInterfaceConfig (networkAttachment, dnsPeeringConfigs: [{domain, "
            f"targetProject, targetNetwork}}]; camelCase or snake_case): {_one_line(exc)}",
        ) from exc
    return PscInterfaceConfig(message)


def _pools(inputs: JobInputs, env: list[dict[str, str]]) -> list[WorkerPoolSpec]:
    from google.cloud.aiplatform_v1.types.custom_job import WorkerPoolSpec
    from google.cloud.aiplatform_v1.types.env_var import EnvVar

    if inputs.worker_pool_specs:
        pools = [_parse_pool(i, p) for i, p in enumerate(inputs.worker_pool_specs)]
        for i, pool in enumerate(pools):
            if not pool.replica_count and not pool.machine_spec.machine_type:
                continue
            has_code = "container_spec" in pool or "python_package_spec" in pool
            if not has_code:
                if not inputs.container_image_uri and not inputs.package_uris:
                    raise LaunchInputError(
                        f"worker_pool_specs[{i}]",
                        "has neither containerSpec nor pythonPackageSpec, and no package or "
                        "container_image_uri input to fill it from",
                    )
                if inputs.container_image_uri and inputs.package_uris:
                    raise LaunchInputError(
                        "container_image_uri",
                        "set either container_image_uri or a package, not both",
                    )
                code = _code_spec(inputs, env)
                key, value = next(iter(code.items()))
                setattr(pool, key, value)
            else:
                # Pools that bring their own code still see the launcher's environment.
                spec = pool.container_spec if "container_spec" in pool else pool.python_package_spec
                names = {e.name for e in spec.env}
                spec.env.extend(EnvVar(e) for e in env if e["name"] not in names)
        return pools
    # The machine and disk inputs, from the table; one primary replica, then the workers.
    first = {**direct_fields(inputs, POOL), "replica_count": 1, **_code_spec(inputs, env)}
    pools = [WorkerPoolSpec(first)]
    if inputs.replica_count > 1:
        rest = copy.deepcopy(first)
        rest["replica_count"] = inputs.replica_count - 1
        pools.append(WorkerPoolSpec(rest))
    return pools


def build_custom_job(
    inputs: JobInputs,
    *,
    strategy: Strategy = Strategy.SPOT,
    extra_env: Mapping[str, str] | None = None,
    target: vertex.Target = vertex.VERTEX_AI,
) -> CustomJob:
    """Build the CustomJob for ``inputs`` with ``jobSpec.scheduling.strategy = strategy``.

    Args:
        inputs: the launch inputs.
        strategy: SPOT, STANDARD or FLEX_START.
        extra_env: environment the launcher adds for every replica (user ``env`` wins on a clash).
        target: whose rules the job must pass (:data:`kfp_spot.vertex.VERTEX_AI`, or
            :data:`~kfp_spot.vertex.EMULATOR` for the local emulator).

    Returns:
        The CustomJob, ready for ``JobServiceClient.create_custom_job``.

    Raises:
        LaunchInputError: naming the first bad input; a rule of the service the built job breaks
            is reported against the input that set the field (:func:`input_for_field`).
    """
    from google.cloud.aiplatform_v1.types.custom_job import CustomJob

    check_inputs(inputs)
    strategy = parse_strategy("strategy", strategy)
    # GCPC's placeholder reaches a direct caller unsettled: on Vertex AI it means "none".
    inputs = dataclasses.replace(
        inputs,
        persistent_resource_id=pipeline_context.resolve(
            "persistent_resource_id", inputs.persistent_resource_id, emulator=False
        ),
    )
    merged = {**(extra_env or {}), **{str(k): str(v) for k, v in inputs.env.items()}}
    env = [{"name": k, "value": v} for k, v in merged.items()]
    job_fields = direct_fields(inputs)
    job_spec: dict[str, Any] = job_fields.setdefault("job_spec", {})
    job_spec["worker_pool_specs"] = _pools(inputs, env)
    job_spec["scheduling"] = {
        "timeout": _duration_json(parse_duration("timeout", inputs.timeout)),
        "restart_job_on_worker_restart": bool(inputs.restart_job_on_worker_restart),
        "disable_retries": bool(inputs.disable_retries),
        "strategy": strategy.value,
    }
    if strategy is Strategy.FLEX_START:
        job_spec["scheduling"]["max_wait_duration"] = _duration_json(
            parse_duration("max_wait_duration", inputs.max_wait_duration)
        )
    if inputs.psc_interface_config:
        job_spec["psc_interface_config"] = _psc_interface_config(inputs.psc_interface_config)
    job = CustomJob(
        **job_fields,
        labels={str(k): str(v) for k, v in inputs.labels.items()},
    )
    vertex.to_service_uris(job)  # /gcs/B/P package URIs as gs://B/P (kfp_spot.vertex.storage)
    check_job(job, inputs, target)
    return job


def with_strategy(
    job: CustomJob, strategy: Strategy, max_wait_duration: str = DEFAULT_MAX_WAIT
) -> CustomJob:
    """A copy of ``job`` scheduled with ``strategy`` (as GCPC: max_wait only for FLEX_START)."""
    strategy = parse_strategy("strategy", strategy)
    out = type(job)(job)  # a deep copy
    out.job_spec.scheduling.strategy = strategy.api
    if strategy is Strategy.FLEX_START:
        wait = duration_pb2.Duration()
        wait.FromJsonString(_duration_json(parse_duration("max_wait_duration", max_wait_duration)))
        out.job_spec.scheduling.max_wait_duration = wait
    else:
        del out.job_spec.scheduling.max_wait_duration
    return out


def output_dirs(base_output_directory: str) -> dict[str, str]:
    """Where Vertex tells the training code to write (AIP_* under the base output directory)."""
    return {
        "model": fs.join(base_output_directory, "model"),
        "checkpoints": fs.join(base_output_directory, "checkpoints"),
        "logs": fs.join(base_output_directory, "logs"),
    }
