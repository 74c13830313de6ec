"""Whether a pipeline runs locally at all: every task a Python component kfp.local can start."""

from __future__ import annotations

from typing import Any

from kfp_spot.pipelines.local_arguments import LocalRunError


def check_runs_locally(pipeline: Any) -> Any:
    """Return a loaded pipeline, refusing one with a task kfp.local's SubprocessRunner cannot start.

    A local run starts each task as a Python process on this machine, which only a lightweight
    Python component (``@dsl.component``) is; a container component, such as GCPC's ops, needs
    its own image. KFP finds out only when it reaches that task, with a traceback.

    Raises:
        LocalRunError: naming those tasks and their images.
    """
    from google.protobuf import json_format
    from kfp.dsl import component_factory

    spec = json_format.MessageToDict(pipeline.pipeline_spec)
    executors = (spec.get("deploymentSpec") or {}).get("executors") or {}
    containers = []
    for label, executor in sorted(executors.items()):
        container = executor.get("container")
        if container is None:  # an importer: kfp.local runs it itself
            continue
        command = [*container.get("command", []), *container.get("args", [])]
        if not any(component_factory.EXECUTOR_MODULE in str(part) for part in command):
            name = label.removeprefix("exec-")
            containers.append(f"{name} ({container.get('image', 'no image')})")
    if containers:
        raise LocalRunError(
            f"the pipeline has tasks that run in their own container: {', '.join(containers)}; "
            "a local run starts Python components (@dsl.component) only: run it on Vertex AI "
            "(`kfp-spot submit`), or leave those steps out of the pipeline you run locally"
        )
    return pipeline
