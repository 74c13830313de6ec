"""A pipeline to run locally and its arguments: a compiled template loaded, ``NAME=VALUE`` parsed.

What :mod:`kfp_spot.pipelines.local` (and ``kfp-spot run``/``submit``'s ``--param``) read before
anything starts; every error is a :class:`LocalRunError` naming the template or the parameter.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kfp_spot.pipelines.local_values import together, value_problems
from kfp_spot.vertex.pipeline_parameters import set_parameter
from kfp_spot.vertex.values import show


class LocalRunError(ValueError):
    """A local run cannot start as asked: a bad pipeline, argument or parameter value."""


def load(pipeline: Any) -> Any:
    """The pipeline to run: a ``@dsl.pipeline`` function as is, a compiled YAML path loaded.

    Raises:
        LocalRunError: the path is not a file or not a compiled pipeline KFP can load, or
            ``pipeline`` is neither.
    """
    if isinstance(pipeline, (str, Path)):
        from kfp_spot.registry import template_url_refusal
        from kfp_spot.vertex import pipeline_job

        refusal = template_url_refusal(str(pipeline))
        if refusal is not None:
            raise LocalRunError(refusal)
        if not Path(pipeline).is_file():
            what = pipeline_job.missing_file_reason(pipeline)
            raise LocalRunError(f"pipeline template {pipeline} {what}; give a compiled YAML file")
        try:  # the first document a compiled spec; before KFP is imported: a bad one fails fast
            documents, text = pipeline_job.read_template_documents(pipeline)
        except pipeline_job.SubmissionError as exc:
            raise LocalRunError(str(exc)) from None
        from google.protobuf import json_format
        from kfp.pipeline_spec import pipeline_spec_pb2

        from kfp_spot.pipelines.template_component import load_template_component

        try:  # what the loaded component's pipeline_spec is made of, checked once here
            json_format.ParseDict(documents[0], pipeline_spec_pb2.PipelineSpec())
            return _with_inputs(load_template_component(documents, text))
        except json_format.ParseError as exc:  # a field the spec's schema does not have
            reason = " ".join(str(exc).split())
            raise LocalRunError(
                f"template {pipeline}: not a compiled pipeline KFP can load ({reason}); "
                "`kfp-spot compile` writes them"
            ) from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # what KFP's loader raises on a spec missing or mistyping a section it needs
            raise LocalRunError(
                f"template {pipeline}: not a compiled pipeline KFP can load ({type(exc).__name__}: "
                f"{exc}); `kfp-spot compile` writes them"
            ) from None
    if getattr(pipeline, "pipeline_spec", None) is None or not hasattr(pipeline, "component_spec"):
        raise LocalRunError(
            f"expected a @dsl.pipeline function or a compiled pipeline YAML path, got "
            f"{type(pipeline).__name__}"
        )
    return _with_inputs(pipeline)


def _with_inputs(pipeline: Any) -> Any:
    """``pipeline`` with ``component_spec.inputs`` a dict: KFP leaves None for no parameters."""
    if pipeline.component_spec.inputs is None:  # the same to KFP as {}
        pipeline.component_spec.inputs = {}
    return pipeline


def parameters(pipeline: Any) -> dict[str, str]:
    """The pipeline's parameters (artifact inputs left out) and their declared KFP types."""
    return {
        name: str(spec.type)
        for name, spec in load(pipeline).component_spec.inputs.items()
        if str(spec.type) in _PARSERS
    }


def _not_a_parameter(pipeline: Any, name: str) -> LocalRunError:
    """The error for ``name``: an artifact input (no run is given one), or no input at all."""
    declared = parameters(pipeline)
    artifacts = sorted(set(load(pipeline).component_spec.inputs) - set(declared))
    valid = ", ".join(sorted(declared))
    return LocalRunError(  # a component's YAML run alone: `kfp-spot submit` refuses it too
        f"the pipeline takes input artifacts ({', '.join(artifacts)}), which a run cannot be "
        f"given: use it as a step of a pipeline of yours that makes them (its parameters: "
        f"{valid or 'none'})"
        if name in artifacts
        else f"the pipeline has no parameter {show(name)}; valid: {valid or 'none: it takes none'}"
    )


def _boolean(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError("expected true or false")
    return text.lower() == "true"


def _json(kind: type) -> Callable[[str], Any]:
    form = (
        """a JSON list such as '["--steps", "40"]'"""
        if kind is list
        else """a JSON object such as '{"mse": "<=0.01"}'"""
    )

    def parse(text: str) -> Any:
        from kfp_spot.vertex.values import check_nesting, loads_unique_keys

        check_nesting(text)  # [[[[...: json's RecursionError otherwise
        try:
            value = loads_unique_keys(text)  # a key twice: ValueError
        except json.JSONDecodeError as exc:  # often the shell ate the quotes: say what to write
            written = _as_json(text) if kind is list else ""
            raise ValueError(
                f"{exc}; write {written or form}, quoted as a whole for the shell"
            ) from None
        if not isinstance(value, kind):
            raise ValueError(f"expected {form}")
        return value

    return parse


def _as_json(text: str) -> str:
    """``it as a JSON list: '["a", "b"]'`` for a list written as ``a,b`` (or one bare item)."""
    if text.lstrip().startswith(("[", "{")):
        return ""
    items = [item.strip() for item in text.split(",")]
    if not all(items) or any(set(item) & set("\"' \t\n") for item in items):
        return ""  # `--steps 40` is two arguments, not one: the general example says how
    return f"it as a JSON list: '{json.dumps(items)}'"


_PARSERS: dict[str, Callable[[str], Any]] = {
    "String": str,
    "Integer": lambda text: int(text.strip()),
    "Float": float,
    "Boolean": _boolean,
    "List": _json(list),
    "Dict": _json(dict),
}


def parse_arguments(
    pipeline: Any, texts: Mapping[str, str], *, check: bool = True
) -> dict[str, Any]:
    """Command-line ``NAME=VALUE`` texts as pipeline arguments, each parsed per its declared type.

    ``String`` keeps the text as it is; ``Integer``, ``Float``, ``Boolean`` (``true``/``false``),
    ``List`` and ``Dict`` (JSON) are parsed. ``check``: also refuse what :func:`check_values`
    refuses (``False`` for a local run, which reports it with the source's problems).

    Raises:
        LocalRunError: every unknown name (each error lists the valid ones) and every value
            that is not of its parameter's type (with ``check``, every value
            :func:`check_values` refuses too), one refusal a line each.
    """
    declared = parameters(pipeline)
    values: dict[str, Any] = {}
    problems: list[str] = []  # every name and value at fault, one refusal
    for name, text in texts.items():
        if name not in declared:
            problems.append(str(_not_a_parameter(pipeline, name)))
            continue
        kind = declared[name]
        try:
            values[name] = _PARSERS[kind](text)
        except ValueError as exc:
            reason = str(exc).splitlines()[0] if str(exc) else "not valid"
            from kfp_spot.vertex.values import show

            problems.append(
                f"parameter {name} is of type {kind}; {show(text)} is not one ({reason})"
            )
    if check:
        problems.extend(value_problems(values))
    if problems:
        raise LocalRunError(together(problems))
    return values


def check_values(values: Mapping[str, Any]) -> None:
    """Refuse, before anything starts, argument values a run would only fail on later.

    Raises:
        LocalRunError: naming each parameter at fault and what would be valid
            (:func:`kfp_spot.pipelines.local_values.value_problems`, one refusal).
    """
    problems = value_problems(values)
    if problems:
        raise LocalRunError(together(problems))


def check_types(inputs: Mapping[str, Any], values: Mapping[str, Any]) -> None:
    """Refuse, before anything starts, a value that is not of its parameter's declared type.

    ``inputs``: the pipeline's ``component_spec.inputs``. The rule is KFP's own, which it
    otherwise applies only as the run starts, with a traceback (a list for a ``Dict``, the text
    of a list for a ``List``, ``2.0`` or ``True`` for an ``Integer``).

    Raises:
        LocalRunError: naming the parameter, its type and the value.
    """
    import reprlib

    from kfp.dsl.types import type_utils

    for name, value in values.items():
        spec = inputs.get(name)
        if spec is None or str(spec.type) not in _PARSERS:  # an artifact: KFP says it
            continue
        try:
            type_utils.verify_type_compatibility(value, spec, "")
        except (type_utils.InconsistentTypeException, ValueError):
            raise LocalRunError(
                f"parameter {name} is of type {spec.type}; {reprlib.repr(value)} ("
                f"{type(value).__name__}) is not one"
            ) from None


# Where the emulator will listen, for the checks made before it starts (never contacted).
ENDPOINT_STAND_IN = "http://127.0.0.1:8080"


def check_tasks(pipeline: Any, arguments: Mapping[str, Any]) -> None:
    """The launch, evaluate and deploy tasks, checked with ``arguments`` as the run would.

    Before anything starts: an input the launcher, the deployer or the emulator would refuse, or
    an evaluation input read only after the training, fails here, not after packaging.

    Raises:
        LocalRunError: naming the task and the input.
    """
    from google.protobuf import json_format

    from kfp_spot.jobs.template import TemplateTaskError, check_local_launches

    try:
        check_local_launches(json_format.MessageToDict(pipeline.pipeline_spec), arguments)
    except TemplateTaskError as exc:
        raise LocalRunError(str(exc)) from None


ENDPOINT_PARAMETER = "api_endpoint"
"""The pipeline parameter a local run sets to the emulator's endpoint."""


def vertex_callers(pipeline: Any) -> list[str]:
    """The tasks that call Vertex AI's API (launch, deploy), sub-DAGs too, as ``path (component)``.

    Only they need the emulator's endpoint: an evaluate-only pipeline talks to no API.
    """
    from google.protobuf import json_format

    from kfp_spot.jobs.template_walk import DEPLOY_CALL, LAUNCH_CALL, template_tasks

    spec = json_format.MessageToDict(pipeline.pipeline_spec)
    return [
        f"{task.path} ({task.component})"
        for task in template_tasks(spec, {})
        if task.call in (LAUNCH_CALL, DEPLOY_CALL)
    ]


def _loop_shared(pipeline: Any) -> set[str]:
    """Parameters a ``dsl.ParallelFor``'s launch takes as ``base_output_directory`` (one each)."""
    from google.protobuf import json_format

    from kfp_spot.jobs.template_walk import LAUNCH_CALL, template_tasks

    tasks = template_tasks(json_format.MessageToDict(pipeline.pipeline_spec), {})
    return {
        task.from_pipeline["base_output_directory"]
        for task in tasks
        if task.call == LAUNCH_CALL and task.loop and "base_output_directory" in task.from_pipeline
    }


def given_arguments(arguments: Any) -> dict[str, Any]:
    """A run's ``arguments`` as a dict (None: none), or a refusal naming what was given.

    Text such as ``"code=x"`` was a ValueError from inside ``dict()``, and a list of pairs ran:
    a submission's ``parameter_values`` takes a mapping only (``check_job_settings``).
    """
    if arguments is None:
        return {}
    if not isinstance(arguments, Mapping):
        raise LocalRunError(
            f"arguments: expected a mapping of parameter name to value, got {show(arguments)}"
        )
    return dict(arguments)


def run_arguments(
    pipeline: Any, arguments: Mapping[str, Any], run_dir: Path, endpoint: str
) -> dict[str, Any]:
    """``arguments`` checked against the pipeline's inputs, with what a local run fills in.

    ``project``, ``location``, ``base_output_directory`` (unless a launch in a ``dsl.ParallelFor``
    takes it: one directory would serve every iteration, which ``check_tasks`` refuses, where an
    empty one lets each write next to its own outputs) and ``staging_uri`` when declared and not
    given; ``api_endpoint`` always set to ``endpoint`` when declared.

    Raises:
        LocalRunError: an unknown parameter, a required one not given (no default and not
            filled in), a value of the wrong type or form, or a pipeline
            that launches or deploys without an ``api_endpoint`` parameter to point at the
            emulator (naming those tasks).
    """
    from kfp_spot.vertex.pipeline_context import LOCAL_LOCATION, LOCAL_PROJECT

    inputs = pipeline.component_spec.inputs
    declared = parameters(pipeline)
    for name in sorted(set(arguments) - set(declared)):  # the first, in order
        raise _not_a_parameter(pipeline, name)
    callers = [] if ENDPOINT_PARAMETER in inputs else vertex_callers(pipeline)
    if callers:
        raise LocalRunError(
            f"the pipeline has no {ENDPOINT_PARAMETER!r} parameter, so its tasks that call Vertex "
            f"AI ({', '.join(callers)}) cannot be pointed at the local emulator: declare "
            f'`{ENDPOINT_PARAMETER}: str = ""` and pass it to them ({ENDPOINT_PARAMETER}='
            f"{ENDPOINT_PARAMETER})"
        )
    filled: dict[str, Any] = {
        "project": LOCAL_PROJECT,
        "location": LOCAL_LOCATION,
        "base_output_directory": str(run_dir / "job"),
        "staging_uri": str(run_dir / "staging"),
    }
    for name in ("project", "location"):  # the team's own default, where it names one
        default = getattr(inputs.get(name), "default", None)
        if isinstance(default, str) and default.strip() and not default.startswith("{{$."):
            del filled[name]
    out = {k: v for k, v in filled.items() if k in inputs and k not in _loop_shared(pipeline)}
    out.update(arguments)
    if ENDPOINT_PARAMETER in inputs:
        out[ENDPOINT_PARAMETER] = endpoint
    missing = [name for name in pipeline.required_inputs if name not in out]
    for name in (name for name in missing if name not in declared):  # no run is given one
        raise _not_a_parameter(pipeline, name)
    if missing:  # KFP would raise a TypeError from inside the run
        others = "" if len(missing) == 1 else ", and the others alike"
        raise LocalRunError(
            f"the pipeline needs {', '.join(repr(m) for m in missing)}, which "
            f"{'has' if len(missing) == 1 else 'have'} no default: "
            f"{set_parameter(missing[0], 'VALUE')}{others}"
        )
    check_values(out)
    check_types(inputs, out)
    return out
