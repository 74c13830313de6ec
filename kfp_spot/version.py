"""The package version and the runtime image the components run in."""

from __future__ import annotations

import json
import os
import re
from importlib import metadata, resources


def _installed_version() -> str:
    # The full distribution, or on a training VM the light kfp-spot-trainer wheel
    # (kfp_spot.packaging.trainer_dist), which carries the same version.
    for name in ("kfp-spot", "kfp-spot-trainer"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "0.0.0"  # running from a source tree that is not installed


__version__ = _installed_version()

# The image the committed YAMLs name as every component's base_image: Python, kfp and this
# package, tagged with the package version. The release workflow (.github/workflows/release.yml)
# publishes it here on a version tag; `make image` builds it locally (docs/image.md). No project ID
# is baked in: teams that run from their own registry push it there (`kfp-spot image push`) and
# set RUNTIME_IMAGE_ENV (runtime_image()). ("python" in the name: kfp.local's SubprocessRunner
# warns about every task whose image name lacks it.)
RUNTIME_IMAGE_REPOSITORY = "ghcr.io/kfp-spot/python-runtime"
RUNTIME_IMAGE = f"{RUNTIME_IMAGE_REPOSITORY}:{__version__}"
# The one setting that points components at another image (docs/image.md).
RUNTIME_IMAGE_ENV = "KFP_SPOT_RUNTIME_IMAGE"
_REFERENCE = re.compile(
    r"[a-z0-9.-]+(?::\d+)?(?:/[a-z0-9._-]+)+(?::[A-Za-z0-9._-]{1,128}|@sha256:[0-9a-f]{64})"
)
_EXAMPLE = f"us-central1-docker.pkg.dev/PROJECT/REPO/kfp-spot:{__version__}"


class RuntimeImageError(ValueError):
    """A runtime image reference that is not ``HOST/PATH:TAG`` (the message names the setting)."""


def check_image_reference(reference: str, setting: str) -> str:
    """``reference`` when it is a registry image reference ``HOST/PATH:TAG`` (or ``@sha256:``).

    Raises:
        RuntimeImageError: naming ``setting`` and an example of a valid value.
    """
    if not _REFERENCE.fullmatch(reference):
        raise RuntimeImageError(
            f"{setting}={reference!r} is not an image reference HOST/PATH:TAG in a registry, "
            f"such as {_EXAMPLE!r}"
        )
    problem = image_host_problem(reference)
    if problem is not None:
        raise RuntimeImageError(f"{setting}={reference!r}: {problem}")
    return reference


_ARTIFACT_REGISTRY_SERVER = re.compile(r"[a-z0-9-]+-(?P<format>[a-z0-9]+)\.pkg\.dev")


def artifact_registry_format(server: str) -> str | None:
    """What an Artifact Registry host serves, read from its name ``LOCATION-FORMAT.pkg.dev``.

    ``docker`` (images), ``kfp`` (pipeline templates), ``python``, ...; "" for a ``pkg.dev``
    name not of that form; None for a host of another registry. The one reading of these
    names: the image references' check and the template registry's host check both use it.
    """
    server = server.lower()
    if not server.endswith(".pkg.dev"):
        return None
    match = _ARTIFACT_REGISTRY_SERVER.fullmatch(server)
    return match["format"] if match else ""


def image_host_problem(reference: str) -> str | None:
    """Why the registry ``reference`` names serves no container images; None: it may.

    Artifact Registry serves images from ``LOCATION-docker.pkg.dev`` only; the hosts of its other
    formats (``LOCATION-kfp.pkg.dev``, where pipeline templates go, ``LOCATION-python.pkg.dev``)
    refuse an image's push and pull, so a reference to one fails only when the image is pushed
    or a VM pulls it. Other registries are not judged.
    """
    if "/" not in reference:
        return None  # no registry host: Docker Hub's (Vertex AI pulls from there too)
    server = reference.split("/", 1)[0].split(":", 1)[0].lower()
    if artifact_registry_format(server) in (None, "docker"):
        return None
    return (
        f"{server} serves no container images: Artifact Registry serves them from "
        "LOCATION-docker.pkg.dev/PROJECT/REPO/IMAGE:TAG"
    )


def runtime_image() -> str:
    """The image kfp-spot components are built to run in, read when a component is built.

    ``$KFP_SPOT_RUNTIME_IMAGE`` (the image you pushed, e.g. to your Artifact Registry) when set,
    else :data:`RUNTIME_IMAGE`. Set it before ``kfp_spot.components`` is imported: every
    component, and every pipeline of yours or of ``kfp-spot compile --output-dir``, then names it.

    Raises:
        RuntimeImageError: the variable is set but is not an image reference.
    """
    value = os.environ.get(RUNTIME_IMAGE_ENV, "").strip()
    return check_image_reference(value, RUNTIME_IMAGE_ENV) if value else RUNTIME_IMAGE


# Written into the wheel by the release workflow only, after it pushed RUNTIME_IMAGE: a wheel that
# carries it knows its image exists in the registry; a source checkout does not have it.
RELEASE_FILE = "release.json"


def published_runtime_image() -> str | None:
    """The runtime image the release workflow published with this wheel, or None.

    None for a source checkout or a wheel built by anyone but the release workflow: then the image
    named by :data:`RUNTIME_IMAGE` may not exist, and users build and push their own.
    """
    try:
        text = resources.files("kfp_spot").joinpath(RELEASE_FILE).read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    image = json.loads(text).get("image")
    return image if image == RUNTIME_IMAGE else None
