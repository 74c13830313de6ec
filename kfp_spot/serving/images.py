"""Vertex AI's prebuilt prediction images: which ``containerSpec.imageUri`` values exist.

A Model uploaded with one of Google's prebuilt prediction images
(``{us,europe,asia}-docker.pkg.dev/vertex-ai/prediction/IMAGE:latest``) is served by that image's
HTTP server, which loads the model file from the artifact directory. Any other image is the
user's own container (a custom container), which must answer Vertex's prediction protocol itself.

The list below is the scikit-learn and XGBoost images of the Vertex AI SDK's
``aiplatform.constants.prediction`` (google-cloud-aiplatform 1.165) with the artifact files each
loads (the "exporting model artifacts" page); TensorFlow and PyTorch images are known by name
(Vertex offers them) but the local emulator does not serve them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REGISTRY_HOSTS = ("us-docker.pkg.dev", "europe-docker.pkg.dev", "asia-docker.pkg.dev")
REPOSITORY = "vertex-ai/prediction"
DEFAULT_SERVING_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-6:latest"

SKLEARN_VERSIONS = ("1.6", "1.5", "1.4", "1.3", "1.2", "1.0", "0.24", "0.23", "0.22", "0.20")
XGBOOST_VERSIONS = ("2.1", "2.0", "1.7", "1.6", "1.5", "1.4", "1.3", "1.2", "1.1", "0.90", "0.82")
# What each framework's image holds besides Python (the libraries a model file may need).
FRAMEWORK_PACKAGES = {
    "sklearn": ("scikit-learn", "numpy", "scipy", "joblib", "threadpoolctl"),
    "xgboost": ("xgboost", "scikit-learn", "numpy", "scipy", "joblib", "threadpoolctl"),
}
ARTIFACT_FILES = {
    "sklearn": ("model.joblib", "model.pkl"),
    "xgboost": ("model.bst", "model.joblib", "model.pkl"),
}
_OTHER_FRAMEWORKS = re.compile(r"^(tf2|tf|pytorch)-(cpu|gpu|tpu)\.\d+-\d+(\.py3\d+)?$")
_URI = re.compile(
    r"^(?P<host>[a-z0-9.-]+)/(?P<repo>[a-z0-9._-]+/[a-z0-9._-]+)/(?P<image>[a-z0-9._-]+)"
    r"(?::(?P<tag>[A-Za-z0-9._-]+))?(?:@(?P<digest>\S+))?$"
)


class ServingImageError(ValueError):
    """A prebuilt prediction image reference that Vertex AI does not offer."""


@dataclass(frozen=True)
class PredictionImage:
    """One prebuilt prediction image.

    Attributes:
        name: the image name, e.g. ``sklearn-cpu.1-6``.
        framework: ``sklearn`` or ``xgboost`` (the images the emulator serves), else ``tf2``,
            ``tf`` or ``pytorch``.
        version: the framework version, e.g. ``1.6``.
        packages: the libraries the image holds (what a model file may import when loaded).
        artifacts: the model files it loads, exactly one of which must be in the directory.
    """

    name: str
    framework: str
    version: str
    packages: tuple[str, ...]
    artifacts: tuple[str, ...]

    @property
    def uri(self) -> str:
        """The canonical URI (us registry)."""
        return f"{REGISTRY_HOSTS[0]}/{REPOSITORY}/{self.name}:latest"

    @property
    def served_locally(self) -> bool:
        """Whether the local emulator runs this image's prediction server."""
        return self.framework in ARTIFACT_FILES


def _known() -> dict[str, PredictionImage]:
    images = {}
    for framework, versions in (("sklearn", SKLEARN_VERSIONS), ("xgboost", XGBOOST_VERSIONS)):
        for version in versions:
            name = f"{framework}-cpu.{version.replace('.', '-')}"
            images[name] = PredictionImage(
                name, framework, version, FRAMEWORK_PACKAGES[framework], ARTIFACT_FILES[framework]
            )
    return images


KNOWN = _known()


def is_prebuilt(uri: str) -> bool:
    """Whether ``uri`` points into Google's prebuilt prediction repository."""
    match = _URI.match((uri or "").strip())
    return bool(match and match["host"] in REGISTRY_HOSTS and match["repo"] == REPOSITORY)


def prediction_image(uri: str) -> PredictionImage | None:
    """The prebuilt image ``uri`` names; None for a custom container.

    Raises:
        ServingImageError: ``uri`` is in Google's prediction repository but names no image
            Vertex AI offers, or has a tag other than ``latest`` (Vertex supports only that).
    """
    text = (uri or "").strip()
    if not is_prebuilt(text):
        return None
    match = _URI.match(text)
    assert match is not None
    name, tag = match["image"], match["tag"]
    if match["digest"] or (tag and tag != "latest"):
        raise ServingImageError(
            f"{text!r}: prebuilt prediction images are used with the tag 'latest' only "
            f"(e.g. {DEFAULT_SERVING_IMAGE})"
        )
    image = KNOWN.get(name)
    if image is not None:
        return image
    if _OTHER_FRAMEWORKS.match(name):
        framework = name.split("-", 1)[0]
        version = name.split(".", 1)[1].replace("-", ".")
        return PredictionImage(name, framework, version, (), ())
    close = [n for n in KNOWN if n.split(".")[0] == name.split(".")[0]] or list(KNOWN)[:4]
    raise ServingImageError(
        f"{text!r} is not a prebuilt prediction image; Vertex AI offers e.g. "
        + ", ".join(f"{REGISTRY_HOSTS[0]}/{REPOSITORY}/{n}:latest" for n in close[:4])
        + " (or give your own container image)"
    )
