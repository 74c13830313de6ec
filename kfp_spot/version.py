"""The package version and the runtime image the components run in."""

from __future__ import annotations

import json
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

# The image every component names as base_image: Python, kfp and this package, tagged with the
# package version. The release workflow (.github/workflows/release.yml) publishes it here on a
# version tag; `make image` builds it locally (docs/image.md). No project ID is baked in: teams that
# run from their own registry push it there (`kfp-spot image push`) and recompile with
# `kfp-spot compile --base-image`. ("python" in the name: kfp.local's SubprocessRunner warns about
# every task whose image name lacks it.)
RUNTIME_IMAGE_REPOSITORY = "ghcr.io/kfp-spot/python-runtime"
RUNTIME_IMAGE = f"{RUNTIME_IMAGE_REPOSITORY}:{__version__}"

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
