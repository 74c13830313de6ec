"""The package version and the runtime image the components run in."""

from importlib import metadata


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

# The image every component names as base_image: a Python base plus this package, tagged with the
# package version (see Dockerfile and `make image`). Users push it to their own registry and
# recompile with `kfp-spot compile --base-image`; no project ID is baked in here.
RUNTIME_IMAGE_REPOSITORY = "ghcr.io/kfp-spot/python-runtime"
RUNTIME_IMAGE = f"{RUNTIME_IMAGE_REPOSITORY}:{__version__}"
