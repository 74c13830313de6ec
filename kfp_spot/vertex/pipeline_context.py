"""What the pipeline run gives the launch task: GCPC's placeholders and the run's system labels.

**Placeholders.** Like GCPC's ``CustomTrainingJobOp``, the launch component defaults ``project``,
``location`` and ``persistent_resource_id`` to GCPC's pipeline placeholders
(``google_cloud_pipeline_components._placeholders``). Vertex AI Pipelines replaces them with the
PipelineJob's project, region and persistent resource (empty when it has none) before the task
starts. Elsewhere nothing replaces them (kfp.local cannot even parse them: see
``kfp_spot.pipelines.local_placeholders``), so the launcher sees the text itself and decides:

======================== =================================== ====================================
input                    sent to the local emulator          sent to Vertex AI
======================== =================================== ====================================
project                  ``local-project``                   refused: give a project
location                 ``us-central1``                     refused: give a region
persistent_resource_id   ``""`` (none)                       ``""`` (none), as Vertex does
service_account          ``""`` (the emulator has none)      refused: give one, or empty
network                  ``""`` (likewise)                   refused: give one, or empty
encryption_spec_key_name ``""`` (likewise)                   refused: give one, or empty
======================== =================================== ====================================

A team may pass the last three (GCPC's ``SERVICE_ACCOUNT_PLACEHOLDER``, ``NETWORK_PLACEHOLDER``,
``ENCRYPTION_SPEC_KMS_KEY_NAME_PLACEHOLDER``) to run the job as, in and encrypted like the
PipelineJob; Vertex AI Pipelines fills them in (empty where the PipelineJob sets none).

A launch that reaches Vertex AI from outside Vertex AI Pipelines never guesses a project or a
region: a silent ``us-central1`` is how an EU pipeline ended up training in the US.

**System labels.** Vertex AI Pipelines puts the run's labels in the task's environment variable
``VERTEX_AI_PIPELINES_RUN_LABELS`` (a JSON object). GCPC merges them into every job it creates so
the job's cost is attributed to the run (``gcp_labels_util.attach_system_labels``); so do we, the
same way: the user's labels win on a clash, and a variable that is not a JSON object is ignored
with a warning. The merge counts the labels its caller adds afterwards (the launcher's
``kfp_spot_submission`` and ``kfp_spot_output``), so the job that is finally created never
has more than Google Cloud's 64.

**Numbers in text.** A pipeline parameter put into text (an f-string, a list holding it) is
written as the KFP backend writes a protobuf number: ``number_text`` (``3``, not ``3.0``).
"""

from __future__ import annotations

import decimal
import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from kfp_spot.vertex import InvalidValueError
from kfp_spot.vertex.values import MAX_LABELS

log = logging.getLogger(__name__)

# GCPC's placeholders (google_cloud_pipeline_components._placeholders), spelled out because
# runtime code never imports KFP or GCPC; tests/jobs/test_gcpc_parity.py checks they are the same.
PROJECT_ID_PLACEHOLDER = "{{$.pipeline_google_cloud_project_id}}"
LOCATION_PLACEHOLDER = "{{$.pipeline_google_cloud_location}}"
PERSISTENT_RESOURCE_ID_PLACEHOLDER = "{{$.pipeline_persistent_resource_id}}"
SERVICE_ACCOUNT_PLACEHOLDER = "{{$.pipeline_service_account}}"
NETWORK_PLACEHOLDER = "{{$.pipeline_network}}"
ENCRYPTION_SPEC_KMS_KEY_NAME_PLACEHOLDER = "{{$.pipeline_encryption_key_name}}"
GCPC_PLACEHOLDERS = (
    PROJECT_ID_PLACEHOLDER,
    LOCATION_PLACEHOLDER,
    PERSISTENT_RESOURCE_ID_PLACEHOLDER,
    SERVICE_ACCOUNT_PLACEHOLDER,
    NETWORK_PLACEHOLDER,
    ENCRYPTION_SPEC_KMS_KEY_NAME_PLACEHOLDER,
)

# What an unresolved placeholder becomes when the job goes to the local emulator.
LOCAL_PROJECT = "local-project"
LOCAL_LOCATION = "us-central1"

# input -> (its placeholder, local default, default on Vertex AI or None to refuse, what it is)
_RESOLUTION = {
    "project": (PROJECT_ID_PLACEHOLDER, LOCAL_PROJECT, None, "the pipeline's project"),
    "location": (LOCATION_PLACEHOLDER, LOCAL_LOCATION, None, "the pipeline's region"),
    "persistent_resource_id": (
        PERSISTENT_RESOURCE_ID_PLACEHOLDER,
        "",
        "",
        "the pipeline's persistent resource",
    ),
    "service_account": (SERVICE_ACCOUNT_PLACEHOLDER, "", None, "the pipeline's service account"),
    "network": (NETWORK_PLACEHOLDER, "", None, "the pipeline's VPC network"),
    "encryption_spec_key_name": (
        ENCRYPTION_SPEC_KMS_KEY_NAME_PLACEHOLDER,
        "",
        None,
        "the pipeline's Cloud KMS key",
    ),
}
RESOLVED_INPUTS = tuple(_RESOLUTION)  # the inputs whose GCPC placeholder :func:`resolve` settles
_EXAMPLES = {
    "project": "'my-project'",
    "location": "'europe-west4'",
    "service_account": "'trainer@my-project.iam.gserviceaccount.com', or empty for the default",
    "network": "'projects/123456789012/global/networks/my-vpc', or empty for none",
    "encryption_spec_key_name": "'projects/P/locations/REGION/keyRings/R/cryptoKeys/K', or empty",
}

SYSTEM_LABELS_ENV = "VERTEX_AI_PIPELINES_RUN_LABELS"
# The label Vertex AI Pipelines puts on every run (PipelineJob.labels reserves its key and
# overrides a value given) and hands each task in SYSTEM_LABELS_ENV, e.g.
# {"vertex-ai-pipelines-run-billing-id": "8717761889699889152"}.
RUN_BILLING_LABEL = "vertex-ai-pipelines-run-billing-id"


def run_environment(env: Mapping[str, str]) -> dict[str, str]:
    """A task's environment ``env`` as Vertex AI Pipelines gives it, with the run's system labels.

    What a check before the run sees in place of the run's own: the billing label with a
    stand-in ID (a task's own ``SYSTEM_LABELS_ENV`` wins), so the labels it counts are the run's.
    """
    return {SYSTEM_LABELS_ENV: json.dumps({RUN_BILLING_LABEL: "1234567890123456789"}), **env}


def is_placeholder(value: object) -> bool:
    """Whether ``value`` is one of GCPC's pipeline placeholders, unresolved."""
    return isinstance(value, str) and value in GCPC_PLACEHOLDERS


def resolve(name: str, value: str, *, emulator: bool) -> str:
    """The value of input ``name`` once its unresolved GCPC placeholder (if any) is settled.

    Args:
        name: one of :data:`RESOLVED_INPUTS` (``project``, ``location``, ...).
        value: what the task received (resolved by Vertex AI Pipelines, or the placeholder text).
        emulator: whether the job goes to the local emulator (see the module's table).

    Raises:
        InvalidValueError: the placeholder of ``project``, ``location``, ``service_account``,
            ``network`` or ``encryption_spec_key_name`` reached a call bound for Vertex AI: only
            Vertex AI Pipelines knows what it stands for.
    """
    placeholder, local, on_vertex, meaning = _RESOLUTION[name]
    if value != placeholder:
        return value
    if emulator:
        return local
    if on_vertex is not None:
        return on_vertex
    raise InvalidValueError(
        f"is empty or still {value!r}, the placeholder for {meaning} that only Vertex AI "
        f"Pipelines fills in: give it explicitly (e.g. {_EXAMPLES[name]})"
    )


def template_location(
    declared: Mapping[str, Mapping[str, Any]], values: Mapping[str, Any]
) -> str | None:
    """The region a template names for itself: where a submission without a region goes.

    Args:
        declared: the template's pipeline parameters (name -> definition, ``defaultValue``).
        values: the parameter values the submission sets.

    Returns:
        ``values["location"]``, else the ``location`` parameter's declared default unless it is
        the placeholder (a team's ``location: str = "europe-west4"``), else None. Filling the
        parameter with another region over the template's default would move an EU pipeline's
        jobs elsewhere without a word.
    """
    given = values.get("location")
    if isinstance(given, str) and given:
        return given
    default = (declared.get("location") or {}).get("defaultValue")
    if isinstance(default, str) and default and not is_placeholder(default):
        return default
    return None


def merge_system_labels(
    labels: Mapping[str, str], environ: Mapping[str, str], *, added: int = 0, what: str = "job"
) -> dict[str, str]:
    """``labels`` with the pipeline run's system labels added, as GCPC's launcher merges them.

    Args:
        labels: the user's labels (they win on a clash).
        environ: the task's environment (``VERTEX_AI_PIPELINES_RUN_LABELS`` is read from it).
        added: how many labels the caller puts on the job after this merge (the launcher's
            submission and output labels): counted against the limit of :data:`MAX_LABELS`.
        what: what carries the labels, for the message (the launcher's job, the deployer's
            Model).

    Returns:
        The system labels updated with ``labels``; ``labels`` alone when the variable is unset or
        is not a JSON object (logged, as GCPC does, and never failing the launch).

    Raises:
        InvalidValueError: the merged labels and the ``added`` ones would be more than
            :data:`MAX_LABELS`.
    """
    merged = _merged(labels, environ.get(SYSTEM_LABELS_ENV))
    total = len(merged) + added
    if total > MAX_LABELS:
        system = len(merged) - len(labels)
        own = f", {added} kfp-spot's own" if added else ""
        raise InvalidValueError(
            f"the {what} would carry {total} labels ({len(labels)} given, {system} of the pipeline "
            f"run's {SYSTEM_LABELS_ENV}{own}); Google Cloud allows at most "
            f"{MAX_LABELS}: give at most {max(MAX_LABELS - system - added, 0)}"
        )
    return merged


def _merged(labels: Mapping[str, str], text: str | None) -> dict[str, str]:
    if text is None:
        return dict(labels)
    try:
        system = json.loads(text)
    except ValueError:
        log.warning("ignoring %s: not JSON: %r", SYSTEM_LABELS_ENV, text[:200])
        return dict(labels)
    if not isinstance(system, dict):
        log.warning("ignoring %s: not a JSON object: %r", SYSTEM_LABELS_ENV, text[:200])
        return dict(labels)
    merged = {str(k): str(v) for k, v in system.items()}
    merged.update(labels)
    return merged


def number_text(value: float) -> str:
    """``value`` as the KFP backend puts a number into text: Go's ``FormatFloat(v, 'f', -1, 64)``.

    The shortest decimal that reads back as the same double, never in exponent form: ``3.0``
    -> ``"3"``, ``0.1`` -> ``"0.1"``, ``1e-05`` -> ``"0.00001"``.
    """
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = format(decimal.Decimal(repr(value)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text
