"""Task options of a pipeline that a run on Vertex AI Pipelines applies, and no local run shows.

KFP's task options size and configure the task's own container: on a launch or deploy task, that
is the process that submits and watches the CustomJob or the deployment, not the training or the
serving replicas, whose machine and environment are the task's inputs. And a task left cacheable
is replayed on a rerun (:func:`cached_task_warning`). ``kfp-spot submit`` (per task,
:mod:`kfp_spot.jobs.template`), ``kfp-spot push`` and a local run's notes
(:func:`run_warnings`) warn of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kfp_spot.jobs.template_walk import (
    DEPLOY_CALL,
    EVALUATE_CALL,
    LAUNCH_CALL,
    PREPARE_CALL,
    TemplateTask,
    template_tasks,
)

# The compiled forms of a task's own machine (KFP 2.17 writes both), as a warning shows them.
_RESOURCES = (
    ("resourceCpuLimit", "cpuLimit", "CPU limit"),
    ("resourceCpuRequest", "cpuRequest", "CPU request"),
    ("resourceMemoryLimit", "memoryLimit", "memory limit"),
    ("resourceMemoryRequest", "memoryRequest", "memory request"),
)


def task_machine_warning(task: TemplateTask) -> str | None:
    """A launch or deploy task given a machine of its own, which the training never gets.

    ``.set_accelerator_type("NVIDIA_TESLA_T4")``, ``.set_cpu_limit("8")``, ... on the task size
    the container that submits and watches the CustomJob (or the deployment) on Vertex AI
    Pipelines: it pays for a machine it does not use, while the training runs on the task's
    ``machine_type``/``accelerator_type``/``accelerator_count`` inputs (the serving replicas,
    on the deploy's). None for any other task (an evaluation runs in its task: its machine is
    the evaluation's) or a task that sets none.
    """
    resources = task.resources
    if task.call not in (LAUNCH_CALL, DEPLOY_CALL) or not resources:
        return None
    shown = []
    accelerator = resources.get("accelerator") or {}
    kind = accelerator.get("resourceType") or accelerator.get("type")
    if kind:
        count = accelerator.get("resourceCount") or accelerator.get("count") or 1
        shown.append(f"accelerator {kind} x{count}")
    for key, fallback, label in _RESOURCES:
        value = resources.get(key) or resources.get(fallback)
        if value:
            shown.append(f"{label} {value}")
    what = "the training" if task.call == LAUNCH_CALL else "the serving replicas"
    return (
        f"task {task.path!r} ({task.component}) sets its own container's machine "
        f"({', '.join(shown) or 'resources'}): on Vertex AI Pipelines that sizes the task that "
        f"submits and watches the {'CustomJob' if task.call == LAUNCH_CALL else 'deployment'}, "
        f"which uses none of it, not {what}; set the task's machine_type, accelerator_type and "
        "accelerator_count inputs instead"
    )


# What a launch task's own process reads from its environment (kfp-spot's settings, Google's
# client libraries, the network and Python): set on the task, these do what they say.
_TASK_ENV = re.compile(
    r"(KFP_SPOT_|GOOGLE_|GCE_|CLOUDSDK_|GRPC_|PYTHON|SSL_|LC_).*|(HTTPS?|NO|ALL)_PROXY|"
    r"REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|STORAGE_EMULATOR_HOST|TZ|LANG|HOME|PATH|TMPDIR",
    re.IGNORECASE,
)


def task_env_warning(task: TemplateTask) -> str | None:
    """A launch task given environment variables its training would need, on its own container.

    ``.set_env_variable("WANDB_API_KEY", ...)`` on a launch task sets it for the task's process
    (which submits and watches the CustomJob), never for the training: the CustomJob's
    environment is the task's ``env`` input. Names the task itself reads (``KFP_SPOT_*``,
    Google's client libraries', proxies, ...) are left out.
    """
    names = sorted(name for name in task.env if not _TASK_ENV.fullmatch(name))
    if task.call != LAUNCH_CALL or not names:
        return None
    listed = ", ".join(names)
    return (
        f"task {task.path!r} ({task.component}) sets {listed} on its own container "
        "(set_env_variable): the task that submits and watches the CustomJob gets "
        f"{'it' if len(names) == 1 else 'them'}, the training does not; pass the training's "
        f"variables in the task's env input (env={{{names[0]!r}: ...}})"
    )


def task_setting_warnings(task: TemplateTask) -> list[str]:
    """KFP task options that do not reach a launch's training or a deploy's replicas."""
    return [w for w in (task_machine_warning(task), task_env_warning(task)) if w]


def run_warnings(spec: Mapping[str, Any]) -> list[str]:
    """What a run of ``spec`` on Vertex AI Pipelines does that no local run shows, per task.

    A prepare-package, launch or deploy task left cacheable (``cached_task_warning``), and task
    options that never reach the training (:func:`task_setting_warnings`): what
    ``kfp-spot push`` warns of (a console run goes through no submit) and a local run notes.
    """
    found = (
        warning
        for task in template_tasks(spec, {})
        for warning in (cached_task_warning(task), *task_setting_warnings(task))
    )
    return [warning for warning in found if warning]


def cached_task_warning(task: TemplateTask, forced: bool = False) -> str | None:
    """What a cached prepare-package, launch, deploy or imported evaluation would replay, or None.

    On Vertex AI Pipelines a task left cacheable with the same inputs as an earlier run is
    skipped and its outputs replayed: the package of a source changed under the same URI, a
    launch's outcome without training, an endpoint that may be gone, the metrics of a checkpoint
    directory imported by its URI (the same artifact each run) before it gained steps.
    ``forced``: the submission's ``--enable-caching`` caches it, whatever it was compiled with.
    """
    if not (task.cached or forced):
        return None
    if task.call == EVALUATE_CALL:
        if "checkpoint" not in task.imported:
            return None  # a launch's checkpoint is a new artifact each run
        replay = (
            "its checkpoint comes from a dsl.importer (the same artifact each run, though the "
            "directory gains steps), so a rerun replays the earlier metrics"
        )
    elif task.call == PREPARE_CALL:
        replay = (
            "a rerun with the same source URI replays the earlier package, though the source "
            "changed under it"
        )
    elif task.call == DEPLOY_CALL:
        replay = (
            "a rerun with the same inputs replays the endpoint of the earlier run, which may have "
            "been undeployed or deleted since"
        )
    else:
        replay = "a rerun with the same inputs replays the earlier outcome without training"
    if forced:
        return (
            f"task {task.path!r} ({task.component}) is cached by --enable-caching: {replay}; "
            "submit without --enable-caching"
        )
    return (
        f"task {task.path!r} ({task.component}) is cached: {replay}; compile it with "
        ".set_caching_options(False), or submit with --disable-caching"
    )


def launch_notices(inputs: Any, policy: Any) -> list[str]:
    """What the launch task will warn of on its console: its executor image, idle settings.

    The executor image (``executor_image_uri`` with a package): not in kfp-spot's table, or past
    or near its documented end of availability; ``region_policy``/``region_wait_seconds`` given
    to a launch of one region.
    """
    from kfp_spot.executors import executor_image_notice
    from kfp_spot.jobs.entry import idle_region_settings

    image = None if inputs.container_image_uri else executor_image_notice(inputs.executor_image_uri)
    return [*([image] if image else []), *idle_region_settings(policy, inputs.location)]


def deploy_notices(request: Any) -> list[str]:
    """What the deploy task will warn of on its console: its prediction image's end of life.

    The prebuilt prediction image of a model it uploads, past or near its documented end of
    availability (after which Vertex AI creates no new endpoint with it).
    """
    from kfp_spot.executors import prediction_image_notice

    notice = request.artifact_uri and prediction_image_notice(request.serving_container_image_uri)
    return [notice] if notice else []
