"""A compiled pipeline's parameters against a submission's values: names, types, completeness.

Also the PipelineJob's own fields made from the template and the flags: its ID, its labels and
the pipeline root the SDK makes up when none is given.

:mod:`kfp_spot.vertex.pipeline_job` checks every submission with it (and re-exports its names);
a local run reads the same template parameters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kfp_spot.vertex import pipeline_context, regions, storage, values

# The JSON types of a compiled spec's parameter types (parameterType).
_PARAMETER_TYPES: dict[str, tuple[type, ...]] = {
    "STRING": (str,),
    "NUMBER_INTEGER": (int,),
    "NUMBER_DOUBLE": (int, float),
    "BOOLEAN": (bool,),
    "LIST": (list,),
    "STRUCT": (dict,),
}


def set_parameter(name: str, value: str | None = None) -> str:
    """Words telling a caller to set the pipeline parameter ``name`` (to ``value``, a JSON text).

    The one wording of that fix in a message about a pipeline run, true for whoever runs it:
    ``kfp-spot run``/``submit`` set a pipeline parameter with ``--param NAME=VALUE``, a Python
    caller with ``arguments``/``parameters``/``parameter_values``; the message names neither.
    """
    return f"set the pipeline parameter {name}" + ("" if value is None else f" to {value}")


class SubmissionError(ValueError):
    """A submission argument is invalid; the message names it and what would be valid."""


def template_parameters(spec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The template's pipeline parameters: name -> its definition (``parameterType``, ...)."""
    inputs = spec.get("root", {}).get("inputDefinitions") or {}
    return {str(k): dict(v or {}) for k, v in (inputs.get("parameters") or {}).items()}


def check_parameters(
    spec: Mapping[str, Any],
    parameter_values: Mapping[str, Any],
    template: str = "the template",
    complete: bool = False,
) -> list[str]:
    """Check parameter names and value types against the template's inputs.

    Args:
        spec: the compiled spec.
        parameter_values: the submission's parameter values.
        template: how messages name the template.
        complete: a run that is sent: a required input left unset is refused, not a warning
            (Vertex AI would refuse the run after a round trip).

    Returns:
        Warnings: required inputs left unset (Vertex AI refuses such a run).

    Raises:
        SubmissionError: a name the template does not declare, listing the valid ones, a value
            of the wrong type or holding text that is no valid Unicode or a number a protobuf
            ``Value`` cannot carry as it is (:func:`~kfp_spot.vertex.values.number_problem`), a
            ``project`` that is no
            project ID or number or a ``location`` that is no region, or with ``complete`` a
            required input left unset.
    """
    declared = template_parameters(spec)
    for name, value in parameter_values.items():
        if name not in declared:
            valid = ", ".join(sorted(declared)) or "none: it takes no parameters"
            raise SubmissionError(
                f"parameter {values.show(name)} is not an input of {template}; valid names: {valid}"
            )
        kind = str(declared[name].get("parameterType", ""))
        types = _PARAMETER_TYPES.get(kind)
        wrong_bool = isinstance(value, bool) and kind in ("NUMBER_INTEGER", "NUMBER_DOUBLE")
        if types and (not isinstance(value, types) or wrong_bool):
            raise SubmissionError(
                f"parameter {name!r} is a {kind} in {template}, got {values.show(value)}"
            )
        try:  # text that is no UTF-8 (a shell's undecodable byte) failed as protobuf's traceback
            values.check_text(value)
            values.check_numbers(value)  # NaN: protobuf's traceback; 2**53 + 1: changed silently
        except values.InvalidValueError as exc:
            raise SubmissionError(f"parameter {name!r}: {exc}") from None
    for name, rule in (("project", values.check_project_id), ("location", regions.check_region)):
        value = parameter_values.get(name)  # GCPC's ops read them as such, unchecked till the run
        if name in declared and isinstance(value, str):
            try:
                rule(value)
            except values.InvalidValueError as exc:
                raise SubmissionError(f"parameter {name!r}: {exc}") from None
    warnings = []
    missing = [
        name
        for name, definition in sorted(declared.items())
        if "defaultValue" not in definition and not definition.get("isOptional")
        if name not in parameter_values
    ]
    if missing:
        warnings.append(
            f"{template} needs {', '.join(missing)} (pipeline parameters without a default: "
            "--param NAME=VALUE, or parameter_values from Python); Vertex AI refuses the run "
            "without them"
        )
    artifacts = (spec.get("root", {}).get("inputDefinitions") or {}).get("artifacts") or {}
    required_artifacts = sorted(n for n, a in artifacts.items() if not (a or {}).get("isOptional"))
    if required_artifacts:
        warnings.append(
            f"{template} takes input artifacts ({', '.join(required_artifacts)}), which a "
            "submission cannot pass: use it as a step of a pipeline"
        )
    if complete and (missing or required_artifacts):
        raise SubmissionError(f"{warnings[0]}; nothing was sent")
    return warnings


# The PipelineJob ID the SDK makes: the pipeline name, '-', a %Y%m%d%H%M%S timestamp; Vertex AI
# takes IDs of [a-z][-a-z0-9]{0,127} (aiplatform's _VALID_NAME_PATTERN).
_JOB_ID = re.compile(r"[a-z][-a-z0-9]{0,127}")
_TIMESTAMP = "-YYYYMMDDHHMMSS"


def job_id_problem(name: str) -> str | None:
    """Why the SDK's PipelineJob ID for pipeline ``name`` is one Vertex AI refuses, or None.

    KFP takes names of up to 128 characters starting with a digit or letter; the SDK adds 15
    characters (``-YYYYMMDDHHMMSS``) and needs a letter first.
    """
    sanitized = re.sub("[^-0-9a-z]+", "-", name.lower()).strip("-")
    if not name or _JOB_ID.fullmatch(sanitized + "0" * len(_TIMESTAMP)) is not None:
        return None
    limit = 128 - len(_TIMESTAMP)
    return (
        f"pipeline name {name!r} ({len(name)} characters) makes a PipelineJob ID "
        f"'{sanitized}{_TIMESTAMP}' Vertex AI refuses: the name must start with a letter and "
        f"hold at most {limit} characters; rename it with @dsl.pipeline(name=...)"
    )


def check_job_id(name: str, template: str) -> None:
    """Refuse a pipeline name the SDK would turn into an ID Vertex AI refuses.

    The SDK raised ValueError (a traceback) inside ``PipelineJob()``, for a dry run too.

    Raises:
        SubmissionError: naming the template, the name and what would be valid.
    """
    problem = job_id_problem(name)
    if problem:
        raise SubmissionError(f"template {template}: {problem}")


# PipelineJob.labels (the API reference): "Note there is some reserved label key for Vertex AI
# Pipelines. - vertex-ai-pipelines-run-billing-id, user set value will get overrided."
RESERVED_LABELS = (pipeline_context.RUN_BILLING_LABEL,)


def check_job_settings(
    *,
    parameter_values: Any = None,
    display_name: Any = None,
    enable_caching: Any = None,
    labels: Any = None,
) -> None:
    """The PipelineJob's settings of the Python API's types, and its display name's length.

    What the command line's options give as text and flags, Python may give as anything: a
    string ``enable_caching="no"`` (truthy) cached every task, prepare-package and launch too;
    a list of labels or a display name over 128 characters failed inside the SDK, a traceback.

    Raises:
        SubmissionError: naming the argument, what it was and what would be valid.
    """
    for name, value, form in (
        ("parameter_values", parameter_values, "a mapping of parameter name to value"),
        ("labels", labels, "a mapping of KEY to VALUE"),
    ):
        if value is not None and not isinstance(value, Mapping):
            raise SubmissionError(f"{name}: expected {form}, got {values.show(value)}")
    if enable_caching is not None and not isinstance(enable_caching, bool):
        raise SubmissionError(
            f"enable_caching: expected True, False or None (each task's compiled setting), got "
            f"{values.show(enable_caching)}"
        )
    if display_name is not None and not isinstance(display_name, str):
        raise SubmissionError(f"display_name: expected text, got {values.show(display_name)}")
    if display_name and len(display_name) > values.MAX_DISPLAY_NAME:  # PipelineJob.displayName
        raise SubmissionError(
            f"display_name: is {len(display_name)} characters long; at most "
            f"{values.MAX_DISPLAY_NAME} are allowed"
        )


def check_job_labels(labels: Mapping[str, str]) -> None:
    """Refuse PipelineJob labels Vertex AI refuses, or replaces: a label given is a label kept.

    Raises:
        SubmissionError: ``labels``/``labels.KEY``: too many, a malformed one, or a reserved key.
    """
    try:  # as each CustomJob's, Model's and Endpoint's
        values.check_labels(labels)
    except values.InvalidFieldError as exc:
        raise SubmissionError(str(exc)) from None
    for key in RESERVED_LABELS:
        if key in labels:
            raise SubmissionError(
                f"labels.{key}: is reserved by Vertex AI Pipelines, which sets it on every run "
                f"and replaces the value given ({values.show(labels[key])}): use another key"
            )


def sdk_default_root(project: str, location: str, salt: str = "<random>") -> str:
    """The pipeline root the SDK makes up for a run given none, with ``salt`` for its random part.

    aiplatform's ``gcs_utils.generate_gcs_directory_for_pipeline_artifacts``: the bucket
    ``PROJECT-vertex-pipelines-REGION-SALT`` cut to 63 characters, ``SALT`` a UUID drawn once per
    process (``_DEFAULT_STAGING_BUCKET_SALT``); ``PipelineJob.submit`` creates the bucket when it
    does not exist and grants the run's service account access to it.
    """
    bucket = f"{project}-vertex-pipelines-{location}-{salt}"[:63].rstrip("-")
    return f"gs://{bucket}/output_artifacts/"


def check_default_root(project: str, location: str) -> str:
    """A warning for a submission without a pipeline root: where the SDK would put the run.

    Raises:
        SubmissionError: the bucket the SDK would make for ``project`` is no bucket name (a
            domain-scoped project's ``example.com:`` prefix), so the run could not be written.
    """
    sample = sdk_default_root(project, location, salt="0" * 36)  # a UUID's length and characters
    try:
        storage.check_gcs_uri(sample)
    except values.InvalidValueError:
        raise SubmissionError(
            f"pipeline_root: none given (no --pipeline-root, and the template has none of its "
            f"own), and the one the Vertex AI SDK makes up for project {project!r}, "
            f"{sdk_default_root(project, location)}, names no valid Cloud Storage bucket (3-63 "
            "lowercase letters, digits, '-', '_' or '.'); pass --pipeline-root gs://BUCKET/PATH"
        ) from None
    return (
        "no pipeline root (no --pipeline-root, and the template has none of its own): the Vertex "
        f"AI SDK makes one up, {sdk_default_root(project, location)}, and creates that bucket, "
        "its random part drawn anew by each process that submits (another bucket for each "
        "`kfp-spot submit`); pass --pipeline-root gs://BUCKET/PATH to keep the runs' artifacts "
        "in one place"
    )
