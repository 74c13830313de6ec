"""How every kfp-spot component is built: lightweight, and stopped by SIGTERM.

KFP runs a lightweight component as ``sh -ec SCRIPT SOURCE ARGS...``; SCRIPT writes SOURCE to a
file and starts ``python3 -m kfp.dsl.executor_main`` as the shell's *child*. When the task is
stopped, the container runtime signals PID 1, the shell; a shell that is PID 1 ignores SIGTERM (the
kernel drops signals PID 1 has no handler for) and a shell that is not PID 1 dies without passing
the signal on. Either way Python never hears of it, so the launcher cannot cancel its CustomJob and
the Spot VMs keep running (and billing) after the pipeline was cancelled.

:func:`component` is ``dsl.component`` with the executor started by ``exec``: Python replaces the
shell and becomes whatever process the task's stop signal reaches (PID 1 when the command is the
container's entrypoint), while the command keeps the shape kfp.local's SubprocessRunner and Vertex
AI Pipelines run. The transformation accepts only the exact script of the KFP versions it knows
and fails loudly otherwise, so a KFP that changes it is noticed here (and by
tests/image/test_signals_in_container.py), never silently left uncancellable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kfp import dsl
from kfp.dsl import component_factory, pipeline_task
from kfp.dsl.python_component import PythonComponent

from kfp_spot.version import runtime_image

# The script of KFP's lightweight command (kfp/dsl/component_factory.py,
# _get_command_and_args_for_lightweight_component) as of kfp 2.17, and ours: the same with `exec`.
_EXECUTOR_LINE = f"_KFP_RUNTIME=true python3 -m {component_factory.EXECUTOR_MODULE}"
KFP_SCRIPT = (
    "program_path=$(mktemp -d)\n"
    "\n"
    'printf "%s" "$0" > "$program_path/ephemeral_component.py"\n'
    f"{_EXECUTOR_LINE}"
    "                         --component_module_path                         "
    '"$program_path/ephemeral_component.py"                         "$@"\n'
)
EXEC_SCRIPT = KFP_SCRIPT.replace(
    _EXECUTOR_LINE, f"_KFP_RUNTIME=true exec python3 -m {component_factory.EXECUTOR_MODULE}"
)


class UnexpectedKfpCommandError(RuntimeError):
    """The installed KFP builds lightweight components with a command kfp-spot does not know."""


def exec_executor(command: list[str]) -> list[str]:
    """KFP's lightweight-component ``command`` with the executor started by ``exec``.

    Raises:
        UnexpectedKfpCommandError: ``command`` is not ``["sh", "-ec", KFP_SCRIPT, SOURCE]``.
    """
    if len(command) != 4 or command[:2] != ["sh", "-ec"] or command[2] != KFP_SCRIPT:
        import kfp

        raise UnexpectedKfpCommandError(
            f"kfp {kfp.__version__} builds lightweight components with a command kfp-spot does "
            "not know, so it cannot make the task receive SIGTERM (cancellation would leave "
            "CustomJobs running); install the kfp version kfp-spot pins in pyproject.toml. "
            f"Command: {command[:3]!r}"
        )
    return [command[0], command[1], EXEC_SCRIPT, command[3]]


class NeverCachedComponent(PythonComponent):  # type: ignore[misc]
    """A component whose tasks are not cached unless a pipeline asks for it.

    Vertex AI Pipelines caches every task by default: a task with the same inputs as an earlier
    run is skipped and its outputs replayed. For a task that acts on the world (stages the
    source as it is now, trains, deploys) that replay is wrong: a launch would report a training
    that never ran. So each task this component makes starts with caching off, in the user's own
    pipelines too, as does the compiled component YAML's own task;
    ``.set_caching_options(True)`` still turns it on. (A component loaded from YAML cannot carry
    this: KFP gives every loaded task the compiler's default.)
    """

    def __call__(self, *args: Any, **kwargs: Any) -> pipeline_task.PipelineTask:
        """A task of this component, with caching off (``.set_caching_options(True)`` to cache)."""
        task = super().__call__(*args, **kwargs)
        if task.state == pipeline_task.TaskState.FUTURE:  # in a pipeline, not run by kfp.local
            task.set_caching_options(False)
        return task

    @property
    def pipeline_spec(self) -> Any:
        """The component compiled alone (its YAML): a pipeline of one task, not cached."""
        spec = super().pipeline_spec
        for task in spec.root.dag.tasks.values():
            task.caching_options.enable_cache = False
        return spec


def component(func: Callable[..., Any] | None = None, *, cacheable: bool = True) -> Any:
    """``@dsl.component`` for kfp-spot components (``@component(cacheable=False)``: see below).

    They run in the runtime image (:func:`kfp_spot.version.runtime_image`: this version's, or
    ``$KFP_SPOT_RUNTIME_IMAGE``, read as each component is built), install nothing when they
    start, and their Python process receives the task's SIGTERM (see the module docstring).
    With ``cacheable=False`` their tasks start with caching off (:class:`NeverCachedComponent`).
    """
    if func is None:
        return lambda f: component(f, cacheable=cacheable)
    built = dsl.component(func, base_image=runtime_image(), install_kfp_package=False)
    container = built.component_spec.implementation.container
    container.command = exec_executor(list(container.command))
    if not cacheable:
        built = NeverCachedComponent(built.component_spec, built.python_func)
    return built
