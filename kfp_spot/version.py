"""The package version and the runtime image the components run in."""

from importlib import metadata

try:
    __version__ = metadata.version("kfp-spot")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

# The image every component names as base_image: a Python base plus this package, tagged with the
# package version (see Dockerfile and `make image`). Users push it to their own registry and
# recompile with `kfp-spot compile --base-image`; no project ID is baked in here.
RUNTIME_IMAGE_REPOSITORY = "ghcr.io/kfp-spot/python-runtime"
RUNTIME_IMAGE = f"{RUNTIME_IMAGE_REPOSITORY}:{__version__}"
