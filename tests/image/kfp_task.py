"""What the KFP driver does around a task's container, for a committed component YAML.

kfp.local's SubprocessRunner cannot run a container, so the container tests do the driver's part
here with kfp.local's own functions: build the ExecutorInput (the JSON the driver passes as
``--executor_input``), resolve the placeholders of the component's compiled ``command``/``args``,
and read the task's outputs back from its executor output file afterwards. What runs in between
(in a container, or as PID 1 of a PID namespace) is exactly the committed command.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kfp import components
from kfp.local import executor_input_utils, executor_output_utils, placeholder_utils, utils
from kfp.pipeline_spec import pipeline_spec_pb2

from kfp_spot.pipelines import catalog


@dataclass
class Task:
    """One task of a committed component: its image and its resolved command line."""

    name: str
    image: str
    command: list[str]  # the compiled command + args, placeholders resolved
    executor_input: pipeline_spec_pb2.ExecutorInput
    component_spec: pipeline_spec_pb2.ComponentSpec

    def outputs(self) -> dict[str, Any]:
        """The task's outputs (parameters and dsl.Artifacts), as kfp.local reads them."""
        return executor_output_utils.get_outputs_for_task(self.executor_input, self.component_spec)


def component_yaml(name: str) -> Path:
    """The committed YAML of component ``name``."""
    (entry,) = [e for e in catalog.COMPONENTS if e.name == name]
    return entry.default_path()


def prepare(name: str, arguments: dict[str, Any], pipeline_root: Path) -> Task:
    """The task of committed component ``name`` with ``arguments`` (dsl.Artifacts for artifacts).

    Outputs go under ``pipeline_root``, as kfp.local lays them out.
    """
    pipeline_spec = components.load_component_from_file(str(component_yaml(name))).pipeline_spec
    (component_name, component_spec), *_ = pipeline_spec.components.items()
    executor = pipeline_spec.deployment_spec["executors"][component_spec.executor_label]
    container = utils.struct_to_executor_spec(executor).container
    pipeline_resource = executor_input_utils.get_local_pipeline_resource_name(
        pipeline_spec.pipeline_info.name
    )
    task_resource = executor_input_utils.get_local_task_resource_name(component_name)
    task_root = executor_input_utils.construct_local_task_root(
        str(pipeline_root), pipeline_resource, task_resource
    )
    executor_input = executor_input_utils.construct_executor_input(
        component_spec=component_spec,
        arguments=arguments,
        task_root=task_root,
        block_input_artifact=False,
    )
    command = placeholder_utils.replace_placeholders(
        full_command=[*container.command, *container.args],
        executor_input_dict=executor_input_utils.executor_input_to_dict(
            executor_input, component_spec
        ),
        pipeline_resource_name=pipeline_resource,
        task_resource_name=task_resource,
        pipeline_root=str(pipeline_root),
        unique_pipeline_id=placeholder_utils.make_random_id(),
    )
    Path(task_root).mkdir(parents=True, exist_ok=True)
    return Task(name, container.image, command, executor_input, component_spec)
