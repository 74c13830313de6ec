"""The tasks of a compiled pipeline that kfp-spot checks before the run, found by a walk.

Every ``launch_spot_job``, ``evaluate_checkpoint`` and ``deploy_spot_endpoint`` task of a
compiled pipeline spec, sub-DAGs (conditions, loops, ...) too, each with its parameter inputs as
far as they are known before the run: constants, the submission's parameter values, defaults.
:mod:`kfp_spot.jobs.template` checks them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kfp_spot.vertex.pipeline_context import number_text

# The line of a component's body that calls its runtime: what makes a task one to check.
LAUNCH_CALL = "from kfp_spot.jobs.entry import launch_spot_job"
EVALUATE_CALL = "from kfp_spot.evaluation import component_entry"
DEPLOY_CALL = "from kfp_spot.serving.entry import deploy_spot_endpoint"
PREPARE_CALL = "from kfp_spot.packaging import component_entry"

# The component each call belongs to, as errors and warnings name it.
COMPONENT_OF = {
    LAUNCH_CALL: "launch_spot_job",
    EVALUATE_CALL: "evaluate_checkpoint",
    DEPLOY_CALL: "deploy_spot_endpoint",
    PREPARE_CALL: "prepare_package",
}

# The components whose outputs a task's artifact input is checked against (PROMOTE: a source only).
PROMOTE_CALL = "from kfp_spot.promotion import component_entry"
MADE_BY = {**COMPONENT_OF, PROMOTE_CALL: "promote_model"}

UNKNOWN = object()  # a value known only at run time
CHANNEL_PREFIX = "pipelinechannel--"  # KFP's name for a task input a channel is passed through


@dataclass(frozen=True)
class ImporterInput:
    """What a ``dsl.importer`` gives a task's artifact input."""

    uri: Any  # the URI it imports, as known before the run, or UNKNOWN
    parameter: str  # the pipeline parameter that URI is passed down from, or ""
    reimport: bool  # a new artifact each run (else the same one, by its URI)
    metadata_keys: frozenset[str] = frozenset()  # the keys of the metadata it gives the artifact


@dataclass(frozen=True)
class ArtifactSource:
    """Another task's output a task's artifact input is given (through sub-DAGs too)."""

    task: str  # the producing task's name, in its DAG
    component: str  # its kfp-spot component (MADE_BY), "" for any other
    output: str  # the output artifact's name


@dataclass(frozen=True)
class TemplateTask:
    """One task to check (a launch, evaluate or deploy): where it is, its inputs, how it runs."""

    path: str  # the task's name, with the names of the sub-DAGs it is in (a/b)
    call: str  # LAUNCH_CALL, EVALUATE_CALL, DEPLOY_CALL or PREPARE_CALL
    parameters: dict[str, Any]  # each input's value (UNKNOWN: known only at run time)
    artifacts: frozenset[str]  # the artifact inputs it is given
    env: dict[str, str]  # the executor's environment (set_env_variable)
    cached: bool
    # input -> the pipeline parameter its value is passed down from (a default of the template,
    # or the submission's), for the inputs that are one
    from_pipeline: dict[str, str] = field(default_factory=dict)
    loop: str = ""  # the innermost dsl.ParallelFor it is in (its path), "" when none
    # its artifact inputs a dsl.importer makes -> what that importer imports
    imports: dict[str, ImporterInput] = field(default_factory=dict)
    # its inputs in each iteration of its loop, where the loop's items are known before the run
    per_item: tuple[dict[str, Any], ...] = ()
    no_items: bool = False  # its loop's items are known before the run, and there are none
    # the task's own container's machine (set_cpu_limit, set_accelerator_type, ...), as compiled
    resources: dict[str, Any] = field(default_factory=dict)
    # its artifact inputs another task's output gives -> that task and output
    sources: dict[str, ArtifactSource] = field(default_factory=dict)

    def iterations(self) -> list[TemplateTask] | None:
        """The task as each iteration of its loop runs it, or None when one is not known now.

        A ``dsl.ParallelFor`` over a list written into the pipeline (or given as a parameter)
        gives each iteration its item: ``machine_type=machine`` is known per iteration.
        """
        tasks = [replace(self, parameters=p, per_item=()) for p in self.per_item]
        if not tasks or any(task.unknown for task in tasks):
            return None
        return tasks

    @property
    def imported(self) -> frozenset[str]:
        """Its artifact inputs a dsl.importer makes without reimport: the same artifact each run."""
        return frozenset(name for name, made in self.imports.items() if not made.reimport)

    @property
    def component(self) -> str:
        """The component the task runs (``launch_spot_job``, ...)."""
        return COMPONENT_OF[self.call]

    @property
    def unknown(self) -> list[str]:
        """The component's inputs known only at run time, sorted (empty: every one is known now).

        KFP's channel inputs (``pipelinechannel--...``, what an f-string or a list holding a loop
        item is built from) are not the component's: the input built from one is named instead.
        """
        return sorted(
            name
            for name, value in self.parameters.items()
            if value is UNKNOWN and not name.startswith(CHANNEL_PREFIX)
        )


def _defaults(component: Mapping[str, Any]) -> dict[str, Any]:
    definitions = (component.get("inputDefinitions") or {}).get("parameters") or {}
    return {name: spec.get("defaultValue", UNKNOWN) for name, spec in definitions.items()}


def _value(given: Mapping[str, Any], env: Mapping[str, Any]) -> Any:
    if "runtimeValue" in given:
        return (given["runtimeValue"] or {}).get("constant", UNKNOWN)
    if "componentInputParameter" in given and "parameterExpressionSelector" not in given:
        return env.get(given["componentInputParameter"], UNKNOWN)
    return UNKNOWN  # another task's output, a loop item's field, ...


# KFP's form of an f-string over pipeline channels in a constant: each channel the task's input.
_INTERPOLATED = re.compile(r"\{\{\$\.inputs\.parameters\['([^'\]]+)'\]\}\}")


def _text(value: Any) -> str:
    """A parameter's value as KFP writes it into a string: text as is, numbers as ``3``, JSON.

    A number is written as the KFP backend writes one (``pipeline_context.number_text``).
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number_text(value)
    return value if isinstance(value, str) else json.dumps(value)


def _interpolated(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each f-string constant filled in from the channels it names (known now).

    ``f"{out}/lr-{lr}"`` (also as an item of a list or a dict's value) compiles to a constant
    naming ``pipelinechannel--out`` and the loop item; it is known when every channel it names
    is, else known only at run time.
    """

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            names = _INTERPOLATED.findall(value)
            if any(values.get(n, UNKNOWN) is UNKNOWN for n in names):
                return UNKNOWN
            return _INTERPOLATED.sub(lambda m: _text(values[m.group(1)]), value)
        items = value if isinstance(value, list) else None
        if isinstance(value, dict):
            items = list(value.values())
        if items is None:
            return value
        filled = [fill(item) for item in items]
        if any(item is UNKNOWN for item in filled):
            return UNKNOWN
        return filled if isinstance(value, list) else dict(zip(value, filled, strict=True))

    return {name: fill(value) for name, value in values.items()}


def template_tasks(spec: Mapping[str, Any], arguments: Mapping[str, Any]) -> Iterator[TemplateTask]:
    """Every launch (evaluate, deploy) task of ``spec``, sub-DAGs (conditions, loops, ...) too.

    Args:
        spec: the compiled pipeline spec.
        arguments: the submission's parameter values (the root's defaults fill in the rest).
    """
    components = spec.get("components") or {}
    executors = (spec.get("deploymentSpec") or {}).get("executors") or {}
    root = spec.get("root") or {}
    env = {**_defaults(root), **arguments}
    origin = {name: name for name in env}
    # A PipelineJob's parameters cannot pass the root's artifact inputs: none is given.
    none: frozenset[str] = frozenset()
    dag = root.get("dag") or {}
    yield from _walk(dag, env, origin, none, {}, {}, "", components, executors, "")


def _given_artifacts(inputs: Mapping[str, Any], available: frozenset[str]) -> frozenset[str]:
    """The artifact inputs a task gets: another task's output, or one its DAG was given."""
    return frozenset(
        name
        for name, source in (inputs.get("artifacts") or {}).items()
        if "taskOutputArtifact" in source or source.get("componentInputArtifact") in available
    )


def _task(
    path: str,
    component: Mapping[str, Any],
    values: dict[str, Any],
    artifacts: frozenset[str],
    cached: bool,
    executors: Mapping[str, Any],
    from_pipeline: dict[str, str],
    loop: str,
    imports: dict[str, ImporterInput],
) -> TemplateTask | None:
    container = (executors.get(component.get("executorLabel", "")) or {}).get("container")
    call = _call(component, executors)
    if not isinstance(container, dict) or call not in COMPONENT_OF:
        return None
    return TemplateTask(
        path=path,
        call=call,
        parameters=values,
        artifacts=artifacts,
        env={str(e.get("name")): str(e.get("value")) for e in container.get("env") or []},
        cached=cached,
        from_pipeline=from_pipeline,
        loop=loop,
        imports=imports,
        resources=dict(container.get("resources") or {}),
    )


def _call(component: Mapping[str, Any], executors: Mapping[str, Any]) -> str | None:
    """The kfp-spot runtime call (MADE_BY) of a component's container, or None."""
    container = (executors.get(component.get("executorLabel", "")) or {}).get("container")
    command = " ".join(str(part) for part in (container or {}).get("command") or [])
    return next((c for c in MADE_BY if c in command), None) if isinstance(container, dict) else None


def _sources(
    inputs: Mapping[str, Any], given: Mapping[str, ArtifactSource], made_by: Mapping[str, str]
) -> dict[str, ArtifactSource]:
    """The artifact inputs another task's output gives (``made_by``: its DAG's task -> call)."""
    out = {}
    for name, source in (inputs.get("artifacts") or {}).items():
        output = source.get("taskOutputArtifact") or {}
        producer = str(output.get("producerTask", ""))
        if producer in made_by:
            component = MADE_BY.get(made_by[producer], "")
            out[name] = ArtifactSource(producer, component, str(output.get("outputArtifactKey")))
        elif source.get("componentInputArtifact") in given:
            out[name] = given[source["componentInputArtifact"]]
    return out


def _importers(
    dag: Mapping[str, Any],
    components: Mapping[str, Any],
    executors: Mapping[str, Any],
    env: Mapping[str, Any],
    origin: Mapping[str, str],
) -> dict[str, ImporterInput]:
    """Each importer task of the DAG -> what it imports."""
    found: dict[str, ImporterInput] = {}
    for name, task in (dag.get("tasks") or {}).items():
        component = components.get((task.get("componentRef") or {}).get("name", "")) or {}
        spec = (executors.get(component.get("executorLabel", "")) or {}).get("importer")
        if not isinstance(spec, dict):
            continue
        reimport = bool(spec.get("reimport"))
        metadata = spec.get("metadata")
        keys = frozenset(metadata) if isinstance(metadata, dict) else frozenset()
        uri = spec.get("artifactUri") or {}
        if "constant" in uri:
            found[name] = ImporterInput(uri["constant"], "", reimport, keys)
            continue
        parameters = (task.get("inputs") or {}).get("parameters") or {}
        given = parameters.get(uri.get("runtimeParameter", ""))
        if not isinstance(given, dict):
            found[name] = ImporterInput(UNKNOWN, "", reimport, keys)
            continue
        parameter = _passed_down({"uri": given}, origin).get("uri", "")
        found[name] = ImporterInput(_value(given, env), parameter, reimport, keys)
    return found


def _imports(
    inputs: Mapping[str, Any],
    given: Mapping[str, ImporterInput],
    importers: Mapping[str, ImporterInput],
) -> dict[str, ImporterInput]:
    """The artifact inputs from an importer (``importers``: its DAG's) or one its DAG was given."""
    out = {}
    for name, source in (inputs.get("artifacts") or {}).items():
        producer = str((source.get("taskOutputArtifact") or {}).get("producerTask", ""))
        passed = str(source.get("componentInputArtifact", ""))
        if producer in importers:
            out[name] = importers[producer]
        elif passed in given:
            out[name] = given[passed]
    return out


def _passed_down(given: Mapping[str, Any], origin: Mapping[str, str]) -> dict[str, str]:
    """The task inputs given one of its DAG's inputs as it is -> that input's pipeline parameter."""
    out = {}
    for name, source in given.items():
        parent = source.get("componentInputParameter")
        if parent in origin and "parameterExpressionSelector" not in source:
            out[name] = origin[parent]
    return out


def _loop_items(task: Mapping[str, Any], values: Mapping[str, Any]) -> tuple[str, list[Any] | None]:
    """A ``dsl.ParallelFor`` task's item channel and its items, when known before the run."""
    iterator = task.get("parameterIterator") or {}
    items = iterator.get("items") or {}
    if "raw" in items:
        try:
            known = json.loads(items["raw"])
        except ValueError:
            known = None
    else:
        known = values.get(items.get("inputParameter", ""), UNKNOWN)
    return str(iterator.get("itemInput", "")), known if isinstance(known, list) else None


def _walk(
    dag: Mapping[str, Any],
    env: Mapping[str, Any],
    origin: Mapping[str, str],
    available: frozenset[str],
    imports: Mapping[str, ImporterInput],
    sources: Mapping[str, ArtifactSource],
    prefix: str,
    components: Mapping[str, Any],
    executors: Mapping[str, Any],
    loop: str,
) -> Iterator[TemplateTask]:
    importers = _importers(dag, components, executors, env, origin)
    tasks = dag.get("tasks") or {}
    component_of = {
        n: components.get((t.get("componentRef") or {}).get("name", "")) or {}
        for n, t in tasks.items()
    }
    made_by = {n: _call(c, executors) or "" for n, c in component_of.items() if "dag" not in c}
    for name, task in tasks.items():
        component = component_of[name]
        inputs = task.get("inputs") or {}
        from_importer = _imports(inputs, imports, importers)
        from_tasks = _sources(inputs, sources, made_by)
        given = {k: _value(v, env) for k, v in (inputs.get("parameters") or {}).items()}
        values = _interpolated({**_defaults(component), **given})
        passed = _passed_down(inputs.get("parameters") or {}, origin)
        path = f"{prefix}{name}"
        artifacts = _given_artifacts(inputs, available)
        if "dag" in component:
            sub = component["dag"]
            iterates = "parameterIterator" in task or "artifactIterator" in task
            inner = path if iterates else loop
            walk = (artifacts, from_importer, from_tasks, f"{path}/", components, executors, inner)
            found_in = list(_walk(sub, values, passed, *walk))
            channel, items = _loop_items(task, values) if iterates else ("", None)
            if items is not None:  # each iteration's inputs, its item known
                runs = [
                    {t.path: t.parameters for t in _walk(sub, {**values, channel: i}, {}, *walk)}
                    for i in items
                ]
                found_in = [
                    replace(t, per_item=tuple(r[t.path] for r in runs), no_items=not items)
                    if t.loop == inner
                    else t
                    for t in found_in
                ]
            yield from found_in
            continue
        found = _task(
            path,
            component,
            values,
            artifacts,
            bool((task.get("cachingOptions") or {}).get("enableCache")),
            executors,
            passed,
            loop,
            from_importer,
        )
        if found is not None:
            yield replace(found, sources=from_tasks)
