"""What this machine built and pushed, and the check that a template only names images that exist.

Vertex AI Pipelines pulls every task's image from a registry when the task starts; a template whose
image was never pushed fails there, task after task, long after submission. So before a template is
submitted, every image that runs kfp-spot code must be one of:

- the runtime image the release workflow published with the installed wheel
  (:func:`kfp_spot.version.published_runtime_image`), or
- an image ``kfp-spot image push`` pushed from this machine, built from this kfp-spot version
  (recorded in ``images.json`` under :func:`records_path`'s directory), for linux/amd64: Vertex
  AI runs no other platform (a record from before platforms were recorded has none and passes).

``kfp-spot image build`` records what it built too, so the refusal can tell "built but never
pushed" from "never built".
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import os
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kfp_spot import fs
from kfp_spot.image.lock import IMAGE_PLATFORM
from kfp_spot.version import RUNTIME_IMAGE, __version__, published_runtime_image


class ImageKind(str, enum.Enum):
    """How an image came to be recorded (its value is what ``images.json`` holds)."""

    BUILT = "built"  # kfp-spot image build
    PUSHED = "pushed"  # kfp-spot image push

    def __str__(self) -> str:
        return self.value


# Where a team's image usually goes; the fix in every refusal names it.
EXAMPLE_DESTINATION = "REGION-docker.pkg.dev/PROJECT/REPO/kfp-spot"


class UnpublishedImageError(ValueError):
    """A template names an image Vertex AI could not pull; the message says how to fix it."""


class ImageRecordsError(ValueError):
    """The records file exists but cannot be read as one (the message names it)."""


@dataclass(frozen=True)
class ImageRecord:
    """One image this machine built or pushed.

    Attributes:
        reference: the image reference (``REPOSITORY:TAG``).
        kind: built (``kfp-spot image build``) or pushed (``kfp-spot image push``); a string
            (the records file's form) is accepted and converted.
        version: the kfp-spot version inside the image.
        image_id: the engine's image ID.
        digest: the manifest digest the registry answered (pushed images only).
        time: when, in seconds since the epoch.
        platform: the image's ``OS/ARCHITECTURE`` (``linux/amd64``); empty in records written
            before kfp-spot recorded it.
    """

    reference: str
    kind: ImageKind
    version: str
    image_id: str
    digest: str = ""
    time: float = field(default_factory=time.time)
    platform: str = ""

    def __post_init__(self) -> None:
        # Raises ValueError for a kind no kfp-spot writes (a damaged records file).
        object.__setattr__(self, "kind", ImageKind(self.kind))

    def to_json(self) -> dict[str, Any]:
        """The record as ``images.json`` holds it."""
        return {**asdict(self), "kind": self.kind.value}


def records_path() -> Path:
    """Where the records live (read at call time).

    ``images.json`` in ``$KFP_SPOT_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/kfp-spot``, else
    ``~/.config/kfp-spot``.
    """
    explicit = os.environ.get("KFP_SPOT_CONFIG_DIR")
    if explicit:
        return Path(explicit) / "images.json"
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "kfp-spot" / "images.json"


def load_records(path: str | os.PathLike[str] | None = None) -> dict[str, ImageRecord]:
    """Every recorded image by reference (empty when nothing was recorded).

    Raises:
        ImageRecordsError: the file exists but is not a records file (names it).
    """
    path = Path(path) if path else records_path()
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO or /dev/zero: the read never ended
            raise ImageRecordsError(
                f"{path} is not a kfp-spot image records file: not a regular file; "
                "$KFP_SPOT_CONFIG_DIR (else $XDG_CONFIG_HOME/kfp-spot) must hold a JSON file there"
            )
        data = json.loads(path.read_text())
        return {ref: ImageRecord(**entry) for ref, entry in data["images"].items()}
    except FileNotFoundError:
        return {}
    except ImageRecordsError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSON of another shape
        raise ImageRecordsError(f"{path} is not a kfp-spot image records file: {exc}") from exc
    except OSError as exc:  # e.g. $KFP_SPOT_CONFIG_DIR names a file, or it is unreadable
        raise ImageRecordsError(
            f"cannot read the image records {path}: {exc.strerror or exc}; $KFP_SPOT_CONFIG_DIR "
            "(else $XDG_CONFIG_HOME/kfp-spot) must be a directory"
        ) from exc


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def remember(record: ImageRecord, path: str | os.PathLike[str] | None = None) -> None:
    """Add or replace the record of ``record.reference`` (safe from several processes)."""
    path = Path(path) if path else records_path()
    with _locked(path):
        records = load_records(path)
        records[record.reference] = record
        data = {"images": {ref: r.to_json() for ref, r in sorted(records.items())}}
        fs.atomic_write(str(path), json.dumps(data, indent=1).encode())


def template_images(template: Mapping[str, Any]) -> dict[str, list[str]]:
    """The images of a compiled pipeline or component spec that run kfp-spot code.

    Args:
        template: the spec as loaded from its YAML (the first document).

    Returns:
        image -> the executors (tasks' implementations) that run in it. Executors of other
        components (which do not import kfp_spot) are left out: their images are their authors'.
    """
    executors = (template.get("deploymentSpec") or {}).get("executors") or {}
    images: dict[str, list[str]] = {}
    for label, executor in sorted(executors.items()):
        container = executor.get("container") if isinstance(executor, dict) else None
        if not container or "image" not in container:
            continue  # importers, GCPC system ops
        code = json.dumps([container.get("command", []), container.get("args", [])])
        if "kfp_spot" in code:
            images.setdefault(container["image"], []).append(label)
    return images


def _repository(reference: str) -> str:
    """``HOST[:PORT]/PATH`` of ``HOST[:PORT]/PATH:TAG`` or ``HOST[:PORT]/PATH@sha256:...``."""
    name = reference.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else name


def _record_of(image: str, records: Mapping[str, ImageRecord]) -> ImageRecord | None:
    """The record of ``image``: by its reference, or a pushed one by repository and digest.

    ``kfp-spot image push`` records ``HOST/PATH:TAG`` with the digest the registry answered, so a
    template pinned to that digest (``HOST/PATH@sha256:...``, docs/image.md) names the same image.
    """
    record = records.get(image)
    if record is not None or "@" not in image:
        return record
    digest = image.split("@", 1)[1]
    for candidate in records.values():
        if (
            candidate.kind is ImageKind.PUSHED
            and candidate.digest == digest
            and _repository(candidate.reference) == _repository(image)
        ):
            return candidate
    return None


def _problem(image: str, records: Mapping[str, ImageRecord]) -> str | None:
    record = _record_of(image, records)
    if record is not None and record.kind is ImageKind.PUSHED:
        if record.platform and record.platform != IMAGE_PLATFORM:
            return (
                f"it is a {record.platform} image and Vertex AI runs {IMAGE_PLATFORM} only "
                "(`kfp-spot image build` makes one from any host)"
            )
        if record.version == __version__:
            return None
        pushed = time.strftime("%Y-%m-%d", time.localtime(record.time))
        return f"it holds kfp-spot {record.version} (pushed {pushed}) but this is {__version__}"
    if image == published_runtime_image():
        return None
    if record is not None:
        return "it was built on this machine but never pushed to a registry"
    if image == RUNTIME_IMAGE:
        return (
            f"this kfp-spot {__version__} is not a release wheel, so nothing published that image"
        )
    return "this machine never pushed it (`kfp-spot image push` records what it pushes)"


def fix_line() -> str:
    """The one-line fix every refusal ends with."""
    dest = f"{EXAMPLE_DESTINATION}:{__version__}"
    # A team's own pipeline is not among what `kfp-spot compile` writes: it names the image
    # when kfp_spot.components is imported, and loaded YAMLs name the image they were compiled in.
    return (
        f"fix: `make image && kfp-spot image push {dest}`, then submit a template compiled with "
        f"`kfp-spot compile --base-image {dest} --output-dir build/templates`; for a pipeline of "
        f"your own, compile it with KFP_SPOT_RUNTIME_IMAGE={dest} set (component YAMLs to load: "
        "build/templates/components/)"
    )


def check_template_images(
    template_path: str | os.PathLike[str], records: Mapping[str, ImageRecord] | None = None
) -> dict[str, list[str]]:
    """Refuse a template that names an image Vertex AI could not pull (see the module docstring).

    Args:
        template_path: a compiled pipeline or component YAML.
        records: the image records (default: :func:`load_records`).

    Returns:
        The checked images and their executors (:func:`template_images`).

    Raises:
        UnpublishedImageError: naming the image, the tasks that run in it, why it is refused and
            the one-line fix.
    """
    from kfp_spot import yamldocs

    with open(template_path, encoding="utf-8") as handle:
        documents = yamldocs.documents(handle.read(), str(template_path))
    template = (documents[0] if documents else None) or {}
    images = template_images(template)
    records = load_records() if records is None else records
    for image, executors in images.items():
        problem = _problem(image, records)
        if problem:
            raise UnpublishedImageError(
                f"{template_path}: {', '.join(executors)} run in {image}, which Vertex AI could "
                f"not pull: {problem}. {fix_line()}"
            )
    return images
