"""The runtime image: build it, push it, and refuse templates whose image Vertex could not pull.

Building is ``kfp-spot image build`` (behind ``make image``: a linux/amd64 image of the packages
``requirements-image.lock`` pins, which ``kfp-spot image lock`` regenerates), pushing to a
registry Vertex AI can pull from is ``kfp-spot image push``, and :func:`check_template_images`
refuses to submit a template whose image was neither published nor pushed. See docs/image.md.
"""

from kfp_spot.image.build import (
    DEBIAN_BASE,
    EXAMPLES_IMAGE,
    Engine,
    build_image,
    detect_engine,
    push_image,
)
from kfp_spot.image.lock import IMAGE_PLATFORM, LOCK_FILE, LockError, check_lock, write_lock
from kfp_spot.image.records import (
    ImageKind,
    ImageRecord,
    ImageRecordsError,
    UnpublishedImageError,
    check_template_images,
    load_records,
    records_path,
    remember,
    template_images,
)
from kfp_spot.image.wheels import ImageBuildError

__all__ = [
    "DEBIAN_BASE",
    "EXAMPLES_IMAGE",
    "IMAGE_PLATFORM",
    "LOCK_FILE",
    "Engine",
    "ImageBuildError",
    "ImageKind",
    "ImageRecord",
    "ImageRecordsError",
    "LockError",
    "UnpublishedImageError",
    "build_image",
    "check_lock",
    "check_template_images",
    "detect_engine",
    "load_records",
    "push_image",
    "records_path",
    "remember",
    "template_images",
    "write_lock",
]
