"""The regions Vertex AI runs CustomJobs in, and how to allow a new one without a release.

The list is the Vertex AI SDK's own (``google.cloud.aiplatform.constants.base.SUPPORTED_REGIONS``
in google-cloud-aiplatform 1.165.1, checked against the "Vertex AI locations" page) without
``global``, which runs no CustomJobs. A region Google opens later is allowed by naming it in the
environment variable ``KFP_SPOT_EXTRA_REGIONS`` (comma-separated), read at every check: set it on
the machine that runs the launcher (for a pipeline task, ``task.set_env_variable(...)``).
"""

from __future__ import annotations

import difflib
import os
import re

from kfp_spot.vertex.values import InvalidFieldError, InvalidValueError, check_project_id, show

EXTRA_REGIONS_ENV = "KFP_SPOT_EXTRA_REGIONS"

VERTEX_REGIONS = frozenset(
    {
        "africa-south1",
        "asia-east1",
        "asia-east2",
        "asia-northeast1",
        "asia-northeast2",
        "asia-northeast3",
        "asia-south1",
        "asia-south2",
        "asia-southeast1",
        "asia-southeast2",
        "australia-southeast1",
        "australia-southeast2",
        "europe-central2",
        "europe-north1",
        "europe-north2",
        "europe-southwest1",
        "europe-west1",
        "europe-west2",
        "europe-west3",
        "europe-west4",
        "europe-west6",
        "europe-west8",
        "europe-west9",
        "europe-west12",
        "me-central1",
        "me-central2",
        "me-west1",
        "northamerica-northeast1",
        "northamerica-northeast2",
        "southamerica-east1",
        "southamerica-west1",
        "us-central1",
        "us-east1",
        "us-east4",
        "us-east5",
        "us-east7",
        "us-south1",
        "us-west1",
        "us-west2",
        "us-west3",
        "us-west4",
        "us-west8",
    }
)

# The shape of every Google Cloud region name: what an extra region must look like.
REGION_NAME = re.compile(r"[a-z]+(?:-[a-z]+)+[0-9]+")


def extra_regions() -> frozenset[str]:
    """Regions allowed through ``KFP_SPOT_EXTRA_REGIONS`` (read now, not at import).

    Raises:
        InvalidValueError: when an entry is not shaped like a region name.
    """
    names = {n.strip() for n in os.environ.get(EXTRA_REGIONS_ENV, "").split(",") if n.strip()}
    for name in names:
        if REGION_NAME.fullmatch(name) is None:
            raise InvalidValueError(
                f"{EXTRA_REGIONS_ENV} lists {show(name)}, which is not a region name "
                "(lowercase words joined by '-' ending in a number, e.g. 'us-central1')"
            )
    return frozenset(names)


def known_regions() -> frozenset[str]:
    """Every region a CustomJob may be submitted to: Vertex AI's list plus the extra ones."""
    return VERTEX_REGIONS | extra_regions()


LOCATIONS_PAGE = "https://cloud.google.com/vertex-ai/docs/general/locations"
_SUGGESTED = 3  # close names offered when a region is unknown
_EXAMPLES = ("us-central1", "europe-west4", "asia-southeast1")


def check_region(value: object) -> str:
    """Return ``value`` when it is a Vertex AI region.

    Raises:
        InvalidValueError: one line: the value is not a region, the closest names (or a few
            examples), and how to allow a region newer than this list.
    """
    regions = known_regions()
    if isinstance(value, str) and value in regions:
        return value
    text = value.strip().lower() if isinstance(value, str) else ""
    close = difflib.get_close_matches(text, sorted(regions), n=_SUGGESTED, cutoff=0.6)
    shown = [repr(name) for name in close]
    hint = (
        "did you mean " + " or ".join([", ".join(shown[:-1]), shown[-1]] if shown[1:] else shown)
        if shown
        else "e.g. " + ", ".join(_EXAMPLES)
    )
    raise InvalidValueError(
        f"{show(value)} is not a Vertex AI region ({hint}; see {LOCATIONS_PAGE}); a region newer "
        f"than kfp-spot's list can be allowed with {EXTRA_REGIONS_ENV}=REGION[,REGION]"
    )


def check_parent(project: object, location: object) -> str:
    """``projects/PROJECT/locations/LOCATION`` once both are checked: the one rule for both.

    ``kfp-spot submit`` and the ``kfp-spot jobs|endpoint`` commands check what a request is sent
    to with it, before any request (the emulator refuses the same, as Vertex AI does).

    Raises:
        InvalidFieldError: naming ``project`` (not a project ID or number) or ``location`` (not a
            region).
    """
    for name, check, value in (
        ("project", check_project_id, project),
        ("location", check_region, location),
    ):
        try:
            check(value)
        except InvalidValueError as exc:
            raise InvalidFieldError(name, str(exc)) from None
    return f"projects/{project}/locations/{location}"


def check_sdk_region(location: str) -> None:
    """Refuse a region the installed Vertex AI SDK cannot submit to (one only extras allow).

    The SDK keeps its own list of regions and refuses any other with a bare ``ValueError``; a
    region :data:`EXTRA_REGIONS_ENV` adds passes kfp-spot's own checks but not the SDK's.

    Raises:
        InvalidFieldError: naming ``location`` and the way out.
    """
    if location in VERTEX_REGIONS:
        return
    from google.cloud.aiplatform import utils, version

    try:
        utils.validate_region(location)
    except ValueError:
        raise InvalidFieldError(
            "location",
            f"google-cloud-aiplatform {version.__version__} submits to no region {location!r} "
            f"({EXTRA_REGIONS_ENV} lets kfp-spot's own checks take it): upgrade "
            "google-cloud-aiplatform, or give another --location",
        ) from None
