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
- :mod:`~kfp_spot.vertex.storage`: where Vertex AI reads and writes (``gs://``, ``/gcs/``
  rewritten by :func:`service_uri`, and the local paths that are the emulator's extension).

Where the local emulator's rules differ from Vertex AI's, a :class:`Target` (:data:`VERTEX_AI`,
:data:`EMULATOR`) says so; nothing outside this package decides what the emulator accepts.

Shared client plumbing (imported by name, never from this package's namespace, so a rule's
import stays light): :mod:`~kfp_spot.vertex.client` (the service endpoint and the GAPIC clients),
:mod:`~kfp_spot.vertex.pipeline_context` (GCPC's pipeline placeholders and the run's system
labels), :mod:`~kfp_spot.vertex.signals` (a task's stop signal cancels what it started) and
:mod:`~kfp_spot.vertex.pipeline_job` (a compiled pipeline submitted to Vertex AI Pipelines).

Every pattern is matched whole (``re.fullmatch``), so a trailing newline is never accepted.
"""

from kfp_spot.vertex.custom_job import (
    EMULATOR,
    VERTEX_AI,
    InvalidJobSpecError,
    Target,
    check_accelerator_type,
    check_machine_spec,
    to_service_uris,
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
    bucket_serves,
    check_bucket,
    check_checkpoint_uri,
    check_output_uri,
    check_package_uri,
    directory_placeholders,
    normalize_output_uri,
    service_uri,
)
from kfp_spot.vertex.values import (
    BOOT_DISK_TYPES,
    MAX_BOOT_DISK_GB,
    MAX_DISPLAY_NAME,
    MAX_DURATION_SECONDS,
    MAX_ENV_VARS,
    MAX_LABELS,
    MAX_NESTING,
    MAX_PACKAGE_URIS,
    MAX_WORKER_POOLS,
    MIN_BOOT_DISK_GB,
    InvalidFieldError,
    InvalidValueError,
    check_kms_key_name,
    check_label,
    check_labels,
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

__all__ = [
    "BOOT_DISK_TYPES",
    "EMULATOR",
    "EXTRA_REGIONS_ENV",
    "MAX_BOOT_DISK_GB",
    "MAX_DISPLAY_NAME",
    "MAX_DURATION_SECONDS",
    "MAX_ENV_VARS",
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
    "bucket_serves",
    "check_accelerator_type",
    "check_bucket",
    "check_checkpoint_uri",
    "check_kms_key_name",
    "check_label",
    "check_labels",
    "check_machine_spec",
    "check_nesting",
    "check_output_uri",
    "check_package_uri",
    "check_persistent_resource_id",
    "check_project_id",
    "check_region",
    "check_reserved_ip_range",
    "check_tensorboard_name",
    "check_text",
    "directory_placeholders",
    "is_env_name",
    "is_module_name",
    "known_regions",
    "loads_bounded",
    "normalize_output_uri",
    "parse_duration",
    "service_uri",
    "show",
    "to_service_uris",
    "validate_custom_job",
    "validate_for_submission",
]
