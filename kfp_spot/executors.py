"""Vertex AI's prebuilt training images: which ``executorImageUri`` values exist and what they hold.

A ``pythonPackageSpec`` job runs in one of Google's prebuilt containers for custom training; the
service refuses any other image. The list, with each image's Python version and documented PyPI
packages, is ``kfp_spot/data/executor_images.csv`` (its header names the source page and date).
The validator refuses an image outside it (as Vertex AI does); the emulator and prepare_package's
import check give a package job exactly what its image profile holds (see docs/packaging.md).

An image is written ``{us,europe,asia}-docker.pkg.dev/vertex-ai/training/IMAGE:latest``. Without a
tag a reference means ``:latest`` (the registry default); any other tag or a digest is refused:
Google documents only ``latest`` as supported.
"""

from __future__ import annotations

import csv
import datetime
import functools
import io
import re
from dataclasses import dataclass
from importlib import resources

__all__ = [
    "DEFAULT_EXECUTOR_IMAGE",
    "ExecutorImageError",
    "ExecutorProfile",
    "executor_image_problem",
    "profile",
    "profiles",
]

DEFAULT_EXECUTOR_IMAGE = "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest"
REGISTRY_HOSTS = ("us-docker.pkg.dev", "europe-docker.pkg.dev", "asia-docker.pkg.dev")
REPOSITORY = "vertex-ai/training"
# Not part of any image's documented list, but in every image: the installer and build tools pip
# needs to install the package URIs (a source distribution is built on the VM).
BASE_PACKAGES = ("pip", "setuptools", "wheel")

_URI = re.compile(
    r"(?P<host>[a-z0-9.-]+)/(?P<repo>[a-z0-9._-]+/[a-z0-9._-]+)/(?P<image>[a-z0-9._-]+)"
    r"(?::(?P<tag>[A-Za-z0-9._-]+))?(?:@(?P<digest>\S+))?"
)


class ExecutorImageError(ValueError):
    """An ``executorImageUri`` that is not one of Vertex AI's prebuilt training images."""


@dataclass(frozen=True)
class ExecutorProfile:
    """What one prebuilt training image holds, as Google documents it.

    Attributes:
        image: the image name, e.g. ``sklearn-cpu.1-6``.
        framework: ``TensorFlow``, ``PyTorch``, ``scikit-learn`` or ``XGBoost``.
        version: the framework version, e.g. ``1.6``.
        python: the image's Python version, e.g. ``3.10``.
        accelerator: ``CPU``, ``GPU (CUDA 12.x)``, ``TPU``, ...
        end_of_availability: the documented date after which Vertex AI stops serving it.
        packages: the documented PyPI packages, as PEP 508 requirements (``numpy==1.26.4``).
    """

    image: str
    framework: str
    version: str
    python: str
    accelerator: str
    end_of_availability: datetime.date
    packages: tuple[str, ...]

    @property
    def uri(self) -> str:
        """The image's canonical URI (the us registry)."""
        return f"{REGISTRY_HOSTS[0]}/{REPOSITORY}/{self.image}:latest"

    @property
    def package_names(self) -> tuple[str, ...]:
        """The distribution names the image provides (documented packages and the base tools)."""
        names = [re.split(r"[=<>!~ ;\[]", p, maxsplit=1)[0] for p in self.packages]
        return tuple(dict.fromkeys([*names, *BASE_PACKAGES]))

    def past_availability(self, today: datetime.date | None = None) -> bool:
        """Whether the documented end of availability has passed (Vertex may then refuse it)."""
        return (today or datetime.date.today()) > self.end_of_availability


@functools.cache
def profiles() -> dict[str, ExecutorProfile]:
    """Every prebuilt training image by name, in the order Google lists them."""
    text = resources.files("kfp_spot").joinpath("data/executor_images.csv").read_text("utf-8")
    rows = csv.DictReader(io.StringIO("".join(ln for ln in text.splitlines(True) if ln[:1] != "#")))
    out = {}
    for row in rows:
        out[row["image"]] = ExecutorProfile(
            image=row["image"],
            framework=row["framework"],
            version=row["version"],
            python=row["python"],
            accelerator=row["accelerator"],
            end_of_availability=datetime.date.fromisoformat(row["end_of_availability"]),
            packages=tuple(row["packages"].split()),
        )
    return out


def _suggest(image: str) -> str:
    family = image.split(".", 1)[0]
    close = [name for name in profiles() if name.split(".", 1)[0] == family]
    shown = close[:6] or ["sklearn-cpu.1-6", "tf-cpu.2-17.py310", "pytorch-xla.2-4.py310"]
    return ", ".join(shown)


def profile(uri: str) -> ExecutorProfile:
    """The profile of the prebuilt training image ``uri`` names.

    Raises:
        ExecutorImageError: ``uri`` is not a prebuilt training image; the message says what is
            wrong and what would be valid.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise ExecutorImageError(
            f"is required: a prebuilt training image such as {DEFAULT_EXECUTOR_IMAGE!r}"
        )
    match = _URI.fullmatch(uri)
    valid = (
        f"use one of Vertex AI's prebuilt training images, "
        f"REGION-docker.pkg.dev/{REPOSITORY}/IMAGE:latest with REGION us, europe or asia"
    )
    if match is None and (not uri.isprintable() or any(c.isspace() for c in uri)):
        raise ExecutorImageError(f"{uri!r} is not an image reference; {valid}")
    if match is None or match["host"] not in REGISTRY_HOSTS or match["repo"] != REPOSITORY:
        raise ExecutorImageError(
            f"{uri!r} is not a prebuilt training image (a package job cannot run a custom "
            f"image: use containerSpec for that); {valid}"
        )
    found = profiles().get(match["image"])
    if found is None:
        raise ExecutorImageError(
            f"{match['image']!r} is not a prebuilt training image; images of that kind: "
            f"{_suggest(match['image'])} (the full list: docs/packaging.md)"
        )
    if match["digest"] or (match["tag"] or "latest") != "latest":
        raise ExecutorImageError(
            f"{uri!r}: prebuilt training images are served only with the 'latest' tag; use "
            f"{match['host']}/{REPOSITORY}/{found.image}:latest"
        )
    return found


def executor_image_problem(uri: str) -> str | None:
    """Why ``uri`` is not a valid ``executorImageUri``, or None when it is one."""
    try:
        profile(uri)
    except ExecutorImageError as exc:
        return str(exc)
    return None
