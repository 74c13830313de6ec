"""The floor every component and the emulator stand on: Vertex AI's contract, by resource.

Rules and limits (pure, light to import: no GAPIC client is loaded by them):

- :mod:`~kfp_spot.vertex.custom_job`: the rules on a whole CustomJob. The emulator enforces
  :func:`validate_custom_job` on create; the launcher runs :func:`validate_for_submission` on the
  job it built, before any API call; :func:`check_machine_spec` holds a DeployedModel's machine
  to the same machine rules.
- :mod:`~kfp_spot.vertex.values`: rules on single values (module, variable and label names,
  project IDs, durations, nesting depth) and Vertex's limits (100 package URIs, 4 worker pools,
  ...); :class:`InvalidValueError` (a value breaks a rule) and :class:`InvalidFieldError` (a
  request field does: the floor's neutral error, which each component maps to its own input).
- :mod:`~kfp_spot.vertex.model_endpoint`: the rules on Models, Endpoints and DeployedModels
  (replica counts, traffic splits, serving images, artifact directories, display names, labels),
  checked by ``deploy_spot_endpoint`` before it calls and by the emulator on every request.
- :mod:`~kfp_spot.vertex.regions`: Vertex AI's regions, plus ``KFP_SPOT_EXTRA_REGIONS``.
- :mod:`~kfp_spot.vertex.storage`: where a job writes (``gs://``, ``/gcs/``, and the local
  paths that are the emulator's extension).

Where the local emulator's rules differ from Vertex AI's, a :class:`Target` (:data:`VERTEX_AI`,
:data:`EMULATOR`) says so; nothing outside this package decides what the emulator accepts.

Shared client plumbing (imported by name, never from this package's namespace, so a rule's
import stays light): :mod:`~kfp_spot.vertex.client` (the service endpoint and the GAPIC clients),
:mod:`~kfp_spot.vertex.pipeline_context` (GCPC's pipeline placeholders and the run's system
labels), :mod:`~kfp_spot.vertex.signals` (a task's stop signal cancels what it started) and
:mod:`~kfp_spot.vertex.pipeline_job` (a compiled pipeline submitted to Vertex AI Pipelines).

Every pattern is matched whole (``re.fullmatch``), so a trailing newline is never accepted.

Names are loaded on first use (PEP 562): ``kfp_spot.vertex.client``'s endpoint parsing is what
``kfp-spot jobs list`` needs, and it must not pay for the CustomJob rules' GAPIC types.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kfp_spot.vertex.custom_job import (
        EMULATOR,
        VERTEX_AI,
        InvalidJobSpecError,
        Target,
        check_machine_spec,
        validate_custom_job,
        validate_for_submission,
    )
    from kfp_spot.vertex.regions import (
        EXTRA_REGIONS_ENV,
        VERTEX_REGIONS,
        check_region,
        known_regions,
    )
    from kfp_spot.vertex.storage import (
        check_bucket,
        check_output_uri,
        normalize_output_uri,
    )
    from kfp_spot.vertex.values import (
        BOOT_DISK_TYPES,
        MAX_BOOT_DISK_GB,
        MAX_DISPLAY_NAME,
        MAX_DURATION_SECONDS,
        MAX_LABELS,
        MAX_NESTING,
        MAX_PACKAGE_URIS,
        MAX_WORKER_POOLS,
        MIN_BOOT_DISK_GB,
        InvalidFieldError,
        InvalidValueError,
        check_kms_key_name,
        check_label,
        check_nesting,
        check_persistent_resource_id,
        check_project_id,
        check_reserved_ip_range,
        check_tensorboard_name,
        check_text,
        is_env_name,
        is_module_name,
        loads_bounded,
        parse_duration,
        show,
    )

_HOME = {
    "BOOT_DISK_TYPES": "kfp_spot.vertex.values",
    "EMULATOR": "kfp_spot.vertex.custom_job",
    "EXTRA_REGIONS_ENV": "kfp_spot.vertex.regions",
    "InvalidFieldError": "kfp_spot.vertex.values",
    "InvalidJobSpecError": "kfp_spot.vertex.custom_job",
    "InvalidValueError": "kfp_spot.vertex.values",
    "MAX_BOOT_DISK_GB": "kfp_spot.vertex.values",
    "MAX_DISPLAY_NAME": "kfp_spot.vertex.values",
    "MAX_DURATION_SECONDS": "kfp_spot.vertex.values",
    "MAX_LABELS": "kfp_spot.vertex.values",
    "MAX_NESTING": "kfp_spot.vertex.values",
    "MAX_PACKAGE_URIS": "kfp_spot.vertex.values",
    "MAX_WORKER_POOLS": "kfp_spot.vertex.values",
    "MIN_BOOT_DISK_GB": "kfp_spot.vertex.values",
    "Target": "kfp_spot.vertex.custom_job",
    "VERTEX_AI": "kfp_spot.vertex.custom_job",
    "VERTEX_REGIONS": "kfp_spot.vertex.regions",
    "check_bucket": "kfp_spot.vertex.storage",
    "check_kms_key_name": "kfp_spot.vertex.values",
    "check_label": "kfp_spot.vertex.values",
    "check_machine_spec": "kfp_spot.vertex.custom_job",
    "check_nesting": "kfp_spot.vertex.values",
    "check_output_uri": "kfp_spot.vertex.storage",
    "check_persistent_resource_id": "kfp_spot.vertex.values",
    "check_project_id": "kfp_spot.vertex.values",
    "check_region": "kfp_spot.vertex.regions",
    "check_reserved_ip_range": "kfp_spot.vertex.values",
    "check_tensorboard_name": "kfp_spot.vertex.values",
    "check_text": "kfp_spot.vertex.values",
    "is_env_name": "kfp_spot.vertex.values",
    "is_module_name": "kfp_spot.vertex.values",
    "known_regions": "kfp_spot.vertex.regions",
    "loads_bounded": "kfp_spot.vertex.values",
    "normalize_output_uri": "kfp_spot.vertex.storage",
    "parse_duration": "kfp_spot.vertex.values",
    "show": "kfp_spot.vertex.values",
    "validate_custom_job": "kfp_spot.vertex.custom_job",
    "validate_for_submission": "kfp_spot.vertex.custom_job",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "BOOT_DISK_TYPES",
    "EMULATOR",
    "EXTRA_REGIONS_ENV",
    "MAX_BOOT_DISK_GB",
    "MAX_DISPLAY_NAME",
    "MAX_DURATION_SECONDS",
    "MAX_LABELS",
    "MAX_NESTING",
    "MAX_PACKAGE_URIS",
    "MAX_WORKER_POOLS",
    "MIN_BOOT_DISK_GB",
    "VERTEX_AI",
    "VERTEX_REGIONS",
    "InvalidFieldError",
    "InvalidJobSpecError",
    "InvalidValueError",
    "Target",
    "check_bucket",
    "check_kms_key_name",
    "check_label",
    "check_machine_spec",
    "check_nesting",
    "check_output_uri",
    "check_persistent_resource_id",
    "check_project_id",
    "check_region",
    "check_reserved_ip_range",
    "check_tensorboard_name",
    "check_text",
    "is_env_name",
    "is_module_name",
    "known_regions",
    "loads_bounded",
    "normalize_output_uri",
    "parse_duration",
    "show",
    "validate_custom_job",
    "validate_for_submission",
]
