"""Vertex AI's prebuilt images: which training and prediction images exist and what they hold.

**Training** (``executorImageUri``). A ``pythonPackageSpec`` job runs in one of Google's prebuilt
containers for custom training; the service refuses any other image. The list kfp-spot knows, with
each image's Python version, documented PyPI packages and end of availability, is
``kfp_spot/data/executor_images.csv`` (its header names the source page and when it was read).
Google adds images faster than a table can follow, so the rule is open: an image of Google's
repository whose name follows Google's naming (``FRAMEWORK-{cpu,gpu,tpu,xla}.X-Y[.pyXYZ]``, e.g.
``sklearn-cpu.1-7`` or ``tf-cpu.2-18.py311``) but is not in the table is accepted with a warning,
with a profile inferred from its name (:func:`inferred_profile`); with
``KFP_SPOT_ALLOW_UNKNOWN_EXECUTOR_IMAGE=1`` any name in Google's training repository is. The
service judges such an image. The emulator and prepare_package's import check give a package job
exactly what its image profile holds (see docs/packaging.md).

:func:`executor_image_notice` says what a user must know about an accepted image (not in the
table, past or near its end of availability); :func:`warn_executor_image` prints it on stderr,
which is the console of a task (the launcher and prepare_package call it).

An image is written ``{us,europe,asia}-docker.pkg.dev/vertex-ai/training/IMAGE:latest``. Without a
tag a reference means ``:latest`` (the registry default); any other tag or a digest is refused:
Google documents only ``latest`` as supported.

**Prediction** (a Model's ``containerSpec.imageUri``). A model uploaded with one of Google's
prebuilt prediction images, ``{us,europe,asia}-docker.pkg.dev/vertex-ai/prediction/IMAGE:latest``,
is served by that image's HTTP server, which loads the model file from the artifact directory;
any other image is the user's own container. The list (:data:`PREDICTION_IMAGES`) is the
scikit-learn and XGBoost images of the Vertex AI SDK's ``aiplatform.constants.prediction``
(google-cloud-aiplatform 1.165) with the files each loads (the "exporting model artifacts" page)
and each one's documented end of availability (``kfp_spot/data/prediction_images.csv``, whose
header names the source page and when it was read; :func:`warn_prediction_image` shows an image
past or near it on the console when a model is uploaded with it);
TensorFlow and PyTorch images are known by name, but the local emulator does not serve them. Each
served image has a profile (:attr:`PredictionImage.profile`) like a training image's, so a
serving replica's environment is made the way a package job's is
(``kfp_spot.emulator.serving.env``).

Why one module: it is the one table of Google's prebuilt images, training and prediction, which
share the URI grammar, the registry hosts and the profile type; a split would leave either half
reaching into the other for them.
"""

from __future__ import annotations

import csv
import datetime
import functools
import io
import os
import re
import sys
from dataclasses import dataclass
from importlib import resources
from typing import TextIO

__all__ = [
    "DEFAULT_EXECUTOR_IMAGE",
    "DEFAULT_PREDICTION_IMAGE",
    "PREDICTION_IMAGES",
    "ExecutorImageError",
    "ExecutorProfile",
    "PredictionImage",
    "PredictionImageError",
    "executor_image_notice",
    "executor_image_problem",
    "inferred_profile",
    "prediction_image",
    "prediction_image_notice",
    "profile",
    "profiles",
    "table_reviewed",
    "warn_executor_image",
    "warn_prediction_image",
]

# No image Google documents as available today could be confirmed where this table was updated
# (kfp_spot/data/executor_images.csv says so): this is the newest scikit-learn image it lists, and
# warn_executor_image shows its end of availability on the console.
DEFAULT_EXECUTOR_IMAGE = "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest"
# Say this (any non-empty value but 0/false/no) to accept any image name in Google's repository.
ALLOW_UNKNOWN_ENV = "KFP_SPOT_ALLOW_UNKNOWN_EXECUTOR_IMAGE"
# How far ahead the end of an image's availability is announced.
EXPIRY_NOTICE_DAYS = 60
TABLE = "kfp_spot/data/executor_images.csv"
"""The table of prebuilt training images, as messages name it."""
PREDICTION_TABLE = "kfp_spot/data/prediction_images.csv"
"""The table of the prebuilt prediction images the emulator serves, with their dates."""
IMAGES_PAGE = "https://cloud.google.com/vertex-ai/docs/training/pre-built-containers"
"""Google's list of prebuilt training images, where the table was read."""
PREDICTION_IMAGES_PAGE = "https://cloud.google.com/vertex-ai/docs/predictions/pre-built-containers"
"""Google's list of prebuilt prediction images."""
REGISTRY_HOSTS = ("us-docker.pkg.dev", "europe-docker.pkg.dev", "asia-docker.pkg.dev")
REPOSITORY = "vertex-ai/training"
PREDICTION_REPOSITORY = "vertex-ai/prediction"
DEFAULT_PREDICTION_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-6:latest"
# Not part of any image's documented list, but in every image: the installer and build tools pip
# needs to install the package URIs (a source distribution is built on the VM).
BASE_PACKAGES = ("pip", "setuptools", "wheel")

# Google's naming of prebuilt training images: FRAMEWORK-KIND.MAJOR-MINOR[.pyXYZ | .cpXYZ].
_GOOGLE_NAME = re.compile(
    r"(?P<family>(?P<framework>[a-z][a-z0-9]*(?:-[a-z][a-z0-9]*)*?)-(?P<kind>cpu|gpu|tpu|xla))"
    r"\.(?P<major>\d+)-(?P<minor>\d+)(?:\.(?:py|cp)(?P<py>3\d{1,2}))?"
)
_FRAMEWORKS = {  # name prefix -> (framework, its PyPI distribution)
    "tf": ("TensorFlow", "tensorflow"),
    "tf2": ("TensorFlow", "tensorflow"),
    "pytorch": ("PyTorch", "torch"),
    "sklearn": ("scikit-learn", "scikit-learn"),
    "scikit-learn": ("scikit-learn", "scikit-learn"),
    "xgboost": ("XGBoost", "xgboost"),
}
_LAST_OF_FAMILY = {  # image family -> (its last version, the family Google publishes after it)
    "pytorch-cpu": ((1, 4), "pytorch-xla"),
}
"""Families Google stopped publishing: a newer version's name is no image, not a newer image."""
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
        repository: ``vertex-ai/training``, or ``vertex-ai/prediction`` for the profile of a
            prediction image (:attr:`PredictionImage.profile`).
    """

    image: str
    framework: str
    version: str
    python: str
    accelerator: str
    end_of_availability: datetime.date
    packages: tuple[str, ...]
    repository: str = REPOSITORY

    @property
    def uri(self) -> str:
        """The image's canonical URI (the us registry)."""
        return f"{REGISTRY_HOSTS[0]}/{self.repository}/{self.image}:latest"

    @property
    def package_names(self) -> tuple[str, ...]:
        """The distribution names the image provides (documented packages and the base tools)."""
        names = [re.split(r"[=<>!~ ;\[]", p, maxsplit=1)[0] for p in self.packages]
        return tuple(dict.fromkeys([*names, *BASE_PACKAGES]))

    @property
    def documented(self) -> bool:
        """Whether the image is in kfp-spot's table (else its profile is inferred from its name)."""
        return profiles().get(self.image) == self

    def past_availability(self, today: datetime.date | None = None) -> bool:
        """Whether the documented end of availability has passed (Vertex may then refuse it)."""
        return (today or datetime.date.today()) > self.end_of_availability


@functools.cache
def _table_text(table: str) -> str:
    return resources.files("kfp_spot").joinpath(table.removeprefix("kfp_spot/")).read_text("utf-8")


def _table_rows(table: str) -> csv.DictReader[str]:
    text = _table_text(table)
    return csv.DictReader(io.StringIO("".join(ln for ln in text.splitlines(True) if ln[:1] != "#")))


def table_reviewed(table: str = TABLE) -> datetime.date:
    """The day ``table`` was last compared with Google's list (its ``# reviewed:`` line).

    ``table``: :data:`TABLE` (training) or :data:`PREDICTION_TABLE`. An end of availability is
    a fact as of that review: a default image must be available then unless no image of its
    framework was (the tests hold the defaults to that).
    """
    found = re.search(r"^# reviewed: (\d{4}-\d{2}-\d{2})$", _table_text(table), re.MULTILINE)
    if found is None:
        raise ValueError(f"{table} has no '# reviewed: YYYY-MM-DD' line")
    return datetime.date.fromisoformat(found[1])


@functools.cache
def profiles() -> dict[str, ExecutorProfile]:
    """Every prebuilt training image by name, in the order Google lists them."""
    out = {}
    for row in _table_rows(TABLE):
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


def _allow_unknown() -> bool:
    value = os.environ.get(ALLOW_UNKNOWN_ENV, "").strip().lower()
    return value not in ("", "0", "false", "no")


def inferred_profile(name: str, allow_unknown: bool = False) -> ExecutorProfile | None:
    """A profile for an image the table does not list, inferred from its name; None if it can't be.

    A name of Google's naming gets the framework and version its name says, the Python of its
    ``.pyXYZ`` suffix (else of the newest listed image of its framework, else 3.10), the packages
    of that listed image with the framework at the named version, and no known end of
    availability.
    With ``allow_unknown`` any other name gets an empty profile (Python 3.10, no packages).
    """
    match = _GOOGLE_NAME.fullmatch(name)
    if match is None or _past_its_family(name):
        if not allow_unknown:
            return None
        return ExecutorProfile(name, "unknown", "", "3.10", "unknown", datetime.date.max, ())
    framework, dist = _FRAMEWORKS.get(match["framework"], (match["framework"], ""))
    version = f"{match['major']}.{match['minor']}"
    kin = [p for p in profiles().values() if p.image.startswith(match["framework"] + "-")]
    newest = max(
        kin,
        key=lambda p: (tuple(map(int, p.version.split("."))), p.image.startswith(match["family"])),
        default=None,
    )
    python = (
        f"{match['py'][0]}.{match['py'][1:]}"
        if match["py"]
        else (newest.python if newest else "3.10")
    )
    packages = [p for p in (newest.packages if newest else ()) if _dist(p) != dist]
    if dist:
        packages.insert(0, f"{dist}=={version}.*")
    accelerator = newest.accelerator if newest else match["kind"].upper()
    return ExecutorProfile(
        name, framework, version, python, accelerator, datetime.date.max, tuple(packages)
    )


def _past_its_family(name: str) -> str:
    """What Google publishes instead, when ``name`` is a version after its family's last; else "".

    ``pytorch-cpu.2-4`` reads as a newer PyTorch image but names none: Vertex AI fails the job
    when it pulls the image, after the package was staged.
    """
    match = _GOOGLE_NAME.fullmatch(name)
    last = _LAST_OF_FAMILY.get(match["family"]) if match else None
    if match is None or last is None:
        return ""
    (major, minor), successor = last
    if (int(match["major"]), int(match["minor"])) <= (major, minor):
        return ""
    return (
        f"there is no {match['family']} image after {major}.{minor}: its successors are "
        f"{successor}.X-Y images ({_suggest(successor + '.')})"
    )


def _dist(requirement: str) -> str:
    return re.split(r"[=<>!~ ;\[]", requirement, maxsplit=1)[0].lower()


def profile(uri: str, *, allow_unknown: bool | None = None) -> ExecutorProfile:
    """The profile of the prebuilt training image ``uri`` names.

    An image of Google's training repository that the table does not list is accepted when its
    name follows Google's naming, or any name with ``allow_unknown`` (default: the
    ``KFP_SPOT_ALLOW_UNKNOWN_EXECUTOR_IMAGE`` setting, read now); its profile is then
    :func:`inferred_profile`'s (and :func:`executor_image_notice` says so).

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
    found = profiles().get(match["image"]) or inferred_profile(
        match["image"], _allow_unknown() if allow_unknown is None else allow_unknown
    )
    if found is None and (instead := _past_its_family(match["image"])):
        raise ExecutorImageError(
            f"{match['image']!r} is not a prebuilt training image; {instead} (the full list: "
            "docs/packaging.md)"
        )
    if found is None:
        raise ExecutorImageError(
            f"{match['image']!r} is not a prebuilt training image; images of that kind: "
            f"{_suggest(match['image'])} (the full list: docs/packaging.md). A newer image of "
            f"Google's naming (FRAMEWORK-cpu.X-Y[.pyXYZ]) is accepted; for any other name set "
            f"{ALLOW_UNKNOWN_ENV}=1"
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


def executor_image_notice(uri: str, today: datetime.date | None = None) -> str | None:
    """What a user must know about the accepted image ``uri``, or None.

    An image the table does not list (accepted by the open rule: Vertex AI will judge it, and the
    emulator gives it an inferred profile), or one past or within :data:`EXPIRY_NOTICE_DAYS` of
    its documented end of availability. None also for an image :func:`profile` refuses (its error
    says why).
    """
    try:
        found = profile(uri)
    except ExecutorImageError:
        return None
    if not found.documented:
        return (
            f"executor image {found.image} is not in kfp-spot's table of prebuilt training images "
            f"({TABLE}); accepted as a name of Google's, so Vertex AI "
            f"will judge it. Locally it runs with Python {found.python} and "
            f"{', '.join(found.packages[:1]) or 'no documented packages'} (inferred from its name)"
        )
    today = today or datetime.date.today()
    days = (found.end_of_availability - today).days
    if days < 0:
        return (
            f"executor image {found.image} reached its documented end of availability on "
            f"{found.end_of_availability}: Vertex AI may refuse it or stop updating it; pick a "
            f"current image from {IMAGES_PAGE} (one kfp-spot does not list is accepted with a "
            "warning)"
        )
    if days <= EXPIRY_NOTICE_DAYS:
        return (
            f"executor image {found.image} reaches its documented end of availability on "
            f"{found.end_of_availability} ({days} days): move to a newer one ({IMAGES_PAGE})"
        )
    return None


_WARNED: set[str] = set()


def warn_executor_image(uri: str, stream: TextIO | None = None) -> str | None:
    """Print :func:`executor_image_notice` of ``uri`` once per process on ``stream`` (stderr).

    stderr is what a KFP task's console shows (Vertex AI Pipelines' task logs, ``kfp.local``'s
    output). Returns the notice, or None when there is nothing to say.
    """
    return _warn(executor_image_notice(uri), stream)


def _warn(notice: str | None, stream: TextIO | None) -> str | None:
    if notice and notice not in _WARNED:
        _WARNED.add(notice)
        print(f"kfp-spot: warning: {notice}", file=stream or sys.stderr, flush=True)
    return notice


# ---------------------------------------------------------------------------------------------
# Prediction images


class PredictionImageError(ValueError):
    """A prebuilt prediction image reference that Vertex AI does not offer."""


# What each served framework's image holds besides Python: the libraries a model file may need
# when it is loaded (``{version}``: the image's framework version).
_PREDICTION_PACKAGES = {
    "sklearn": ("scikit-learn=={version}.*", "numpy", "scipy", "joblib", "threadpoolctl"),
    "xgboost": (
        "xgboost=={version}.*",
        "scikit-learn",
        "numpy",
        "scipy",
        "joblib",
        "threadpoolctl",
    ),
}
# The model files each served image loads; exactly one must be in the artifact directory.
_PREDICTION_ARTIFACTS = {
    "sklearn": ("model.joblib", "model.pkl"),
    "xgboost": ("model.bst", "model.joblib", "model.pkl"),
}
_OTHER_PREDICTION = re.compile(r"(tf2|tf|pytorch)-(cpu|gpu|tpu)\.\d+-\d+(\.py3\d+)?")


@dataclass(frozen=True)
class PredictionImage:
    """One prebuilt prediction image.

    Attributes:
        name: the image name, e.g. ``sklearn-cpu.1-6``.
        framework: ``sklearn`` or ``xgboost`` (the images the emulator serves), else ``tf2``,
            ``tf`` or ``pytorch``.
        version: the framework version, e.g. ``1.6``.
        packages: the libraries the image holds (what a model file may import when loaded), as
            PEP 508 requirements; empty for the images the emulator does not serve.
        artifacts: the model files it loads, exactly one of which must be in the directory.
        end_of_availability: the documented date after which Vertex AI creates no new endpoint
            with it (``date.max`` when the table does not list the image).
    """

    name: str
    framework: str
    version: str
    packages: tuple[str, ...]
    artifacts: tuple[str, ...]
    end_of_availability: datetime.date = datetime.date.max

    @property
    def uri(self) -> str:
        """The canonical URI (us registry)."""
        return f"{REGISTRY_HOSTS[0]}/{PREDICTION_REPOSITORY}/{self.name}:latest"

    @property
    def served_locally(self) -> bool:
        """Whether the local emulator runs this image's prediction server."""
        return self.framework in _PREDICTION_ARTIFACTS

    @property
    def profile(self) -> ExecutorProfile:
        """What the image holds, as a profile ``kfp_spot.envcache.create_image_env`` takes.

        The profile leaves the Python version empty (a serving environment installs no packages
        that could ask for one) and carries the documented end of availability.
        """
        return ExecutorProfile(
            image=self.name,
            framework=self.framework,
            version=self.version,
            python="",
            accelerator=self.name.split("-", 1)[1].split(".", 1)[0].upper(),
            end_of_availability=self.end_of_availability,
            packages=self.packages,
            repository=PREDICTION_REPOSITORY,
        )


def _prediction_images() -> dict[str, PredictionImage]:
    out = {}
    for row in _table_rows(PREDICTION_TABLE):
        framework, version = row["framework"], row["version"]
        packages = tuple(p.format(version=version) for p in _PREDICTION_PACKAGES[framework])
        out[row["image"]] = PredictionImage(
            row["image"],
            framework,
            version,
            packages,
            _PREDICTION_ARTIFACTS[framework],
            datetime.date.fromisoformat(row["end_of_availability"]),
        )
    return out


PREDICTION_IMAGES: dict[str, PredictionImage] = _prediction_images()


def prediction_image(uri: str) -> PredictionImage | None:
    """The prebuilt prediction image ``uri`` names; None for a custom container.

    Raises:
        PredictionImageError: ``uri`` is in Google's prediction repository but names no image
            Vertex AI offers, or has a tag other than ``latest`` (Vertex supports only that).
    """
    text = (uri or "").strip()
    match = _URI.fullmatch(text)
    if (
        match is None
        or match["host"] not in REGISTRY_HOSTS
        or match["repo"] != PREDICTION_REPOSITORY
    ):
        return None
    name, tag = match["image"], match["tag"]
    if match["digest"] or (tag and tag != "latest"):
        raise PredictionImageError(
            f"{text!r}: prebuilt prediction images are used with the tag 'latest' only "
            f"(e.g. {DEFAULT_PREDICTION_IMAGE})"
        )
    image = PREDICTION_IMAGES.get(name)
    if image is not None:
        return image
    if _OTHER_PREDICTION.fullmatch(name):
        framework = name.split("-", 1)[0]
        version = name.split(".", 1)[1].split(".py", 1)[0].replace("-", ".")
        return PredictionImage(name, framework, version, (), ())
    family = name.split(".", 1)[0]
    close = [n for n in PREDICTION_IMAGES if n.split(".", 1)[0] == family]
    shown = close[:4] or list(PREDICTION_IMAGES)[:4]
    raise PredictionImageError(
        f"{text!r} is not a prebuilt prediction image; Vertex AI offers e.g. "
        + ", ".join(PREDICTION_IMAGES[n].uri for n in shown)
        + " (or give your own container image)"
    )


def prediction_image_notice(uri: str, today: datetime.date | None = None) -> str | None:
    """What a user must know about the prediction image ``uri``, or None.

    A prebuilt prediction image past or within :data:`EXPIRY_NOTICE_DAYS` of its documented end
    of availability, after which "you can no longer create new endpoints using this version"
    and Vertex AI "might delete existing endpoints that use this version"
    (https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/framework-support-policy).
    None for a custom container, an image without a documented date, or one
    :func:`prediction_image` refuses (its error says why).
    """
    try:
        image = prediction_image(uri)
    except PredictionImageError:
        return None
    if image is None or image.end_of_availability == datetime.date.max:
        return None
    days = (image.end_of_availability - (today or datetime.date.today())).days
    if days < 0:
        return (
            f"prediction image {image.name} reached its documented end of availability on "
            f"{image.end_of_availability}: Vertex AI creates no new endpoint with it and may "
            f"delete endpoints that use it; pick a current image from {PREDICTION_IMAGES_PAGE}"
        )
    if days <= EXPIRY_NOTICE_DAYS:
        return (
            f"prediction image {image.name} reaches its documented end of availability on "
            f"{image.end_of_availability} ({days} days): move to a newer one "
            f"({PREDICTION_IMAGES_PAGE})"
        )
    return None


def warn_prediction_image(uri: str, stream: TextIO | None = None) -> str | None:
    """Print :func:`prediction_image_notice` of ``uri`` once per process on ``stream`` (stderr)."""
    return _warn(prediction_image_notice(uri), stream)
