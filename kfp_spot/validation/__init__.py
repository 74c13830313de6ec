"""The one home of Vertex AI's (and Google Cloud's) rules and limits, for all of kfp-spot.

- :mod:`~kfp_spot.validation.custom_job`: the rules on a whole CustomJob. The emulator enforces
  :func:`validate_custom_job` on create; the launcher runs :func:`validate_for_submission` on the
  job it built, before any API call; :func:`check_machine_spec` holds a DeployedModel's machine
  to the same machine rules.
- :mod:`~kfp_spot.validation.values`: rules on single values (module, variable and label names,
  project IDs, durations, nesting depth) and Vertex's limits (100 package URIs, 4 worker pools,
  ...). Packaging, the launcher's input checks and ``kfp-spot submit`` use these.
- :mod:`~kfp_spot.validation.regions`: Vertex AI's regions, plus ``KFP_SPOT_EXTRA_REGIONS``.

Every pattern is matched whole (``re.fullmatch``), so a trailing newline is never accepted.
"""

from kfp_spot.validation.custom_job import (
    InvalidJobSpecError,
    check_machine_spec,
    validate_custom_job,
    validate_for_submission,
)
from kfp_spot.validation.regions import (
    EXTRA_REGIONS_ENV,
    VERTEX_REGIONS,
    check_region,
    known_regions,
)
from kfp_spot.validation.values import (
    BOOT_DISK_TYPES,
    MAX_BOOT_DISK_GB,
    MAX_DISPLAY_NAME,
    MAX_DURATION_SECONDS,
    MAX_LABELS,
    MAX_NESTING,
    MAX_PACKAGE_URIS,
    MAX_WORKER_POOLS,
    MIN_BOOT_DISK_GB,
    InvalidValueError,
    check_label,
    check_nesting,
    check_project_id,
    check_text,
    is_env_name,
    is_module_name,
    loads_bounded,
    parse_duration,
    show,
)

__all__ = [
    "BOOT_DISK_TYPES",
    "EXTRA_REGIONS_ENV",
    "MAX_BOOT_DISK_GB",
    "MAX_DISPLAY_NAME",
    "MAX_DURATION_SECONDS",
    "MAX_LABELS",
    "MAX_NESTING",
    "MAX_PACKAGE_URIS",
    "MAX_WORKER_POOLS",
    "MIN_BOOT_DISK_GB",
    "VERTEX_REGIONS",
    "InvalidJobSpecError",
    "InvalidValueError",
    "check_label",
    "check_machine_spec",
    "check_nesting",
    "check_project_id",
    "check_region",
    "check_text",
    "is_env_name",
    "is_module_name",
    "known_regions",
    "loads_bounded",
    "parse_duration",
    "show",
    "validate_custom_job",
    "validate_for_submission",
]
