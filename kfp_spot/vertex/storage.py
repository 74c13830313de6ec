"""Where Vertex AI reads and writes: ``gs://``, the ``/gcs/`` FUSE form, the emulator's paths.

Vertex AI takes every storage location it reads or writes as a Cloud Storage URI only
(``gs://BUCKET/PATH``): a CustomJob's ``baseOutputDirectory.outputUriPrefix`` and
``pythonPackageSpec.packageUris``, a Model's ``artifactUri``, and the staging root packages are
uploaded to; anything else comes back as a 400 (or, for a package, as a job that fails to
install it). Two other forms are common in pipelines and are handled before submission:

- ``/gcs/BUCKET/PATH``, the Cloud Storage FUSE mount of a Vertex AI Pipelines task (what a KFP
  artifact's ``.path`` looks like there), names the same objects as ``gs://BUCKET/PATH`` and is
  rewritten to it (:func:`service_uri`, which every caller runs on a URI before the service sees
  it; :func:`normalize_output_uri` also refuses what can never be valid);
- an absolute local path (or ``file:///...``) is **the local emulator's extension**: its jobs run on
  this machine, so it accepts one (and ``gs:///ABS/PATH``, the aiplatform SDK's form of a local
  staging bucket). :func:`check_output_uri` and :func:`check_package_uri` accept those only when
  asked for the emulator's rules (``local_paths=True``, which :data:`kfp_spot.vertex.EMULATOR`
  sets); sent to Vertex AI, a local path is refused before submission.

A relative path is refused everywhere: the job runs in another process (or on another machine),
where "relative to what" has no answer.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from kfp_spot import fs
from kfp_spot.vertex.values import InvalidValueError, show

GCS_FUSE_ROOT = "/gcs/"
# Cloud Storage bucket names: 3-63 characters of lowercase letters, digits, '-', '_' and '.'
# (up to 222 with dots, each dot-separated part at most 63), starting and ending with a letter or
# digit; not an IP address, not starting with "goog".
_BUCKET = re.compile(r"[a-z0-9](?:[a-z0-9_.-]{1,220})[a-z0-9]")
_IP_ADDRESS = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")
OUTPUT_URI_FORM = "gs://BUCKET/PATH (or /gcs/BUCKET/PATH, the Cloud Storage FUSE form)"
EMULATOR_OUTPUT_FORM = "an absolute local path or file:///PATH (the local emulator's extension)"


def check_bucket(bucket: str) -> None:
    """Refuse a string that is not a Cloud Storage bucket name.

    Raises:
        InvalidValueError: naming the rule.
    """
    parts = bucket.split(".")
    if (
        _BUCKET.fullmatch(bucket) is None
        or any(not 1 <= len(p) <= 63 for p in parts)
        or (len(bucket) > 63 and "." not in bucket)
        or bucket.startswith("goog")
        or _IP_ADDRESS.fullmatch(bucket) is not None
    ):
        raise InvalidValueError(
            f"{show(bucket)} is not a Cloud Storage bucket name: 3-63 lowercase letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit"
        )


def gcs_uri_of_fuse_path(path: str) -> str | None:
    """``gs://BUCKET/PATH`` for ``/gcs/BUCKET/PATH``; None when ``path`` is not under ``/gcs/``."""
    if not path.startswith(GCS_FUSE_ROOT):
        return None
    return "gs://" + path[len(GCS_FUSE_ROOT) :]


def service_uri(value: str) -> str:
    """``value`` in the form the service reads: never refuses, only rewrites.

    ``/gcs/BUCKET/PATH`` becomes ``gs://BUCKET/PATH`` (the same objects through the FUSE mount)
    and ``file:///PATH`` becomes ``/PATH``; anything else is returned as it is, for the rules
    (:func:`check_output_uri`, :func:`check_package_uri`) to judge against their target. The
    launcher runs it on every package URI and the base output directory of the job it built, the
    packaging on its staging root, and the deployer on a Model's ``artifactUri``.
    """
    uri = gcs_uri_of_fuse_path(value)
    if uri is not None:
        return uri
    if value.startswith("file:///"):
        return value[len("file://") :]
    return value


def directory_placeholders(file_uris: Iterable[str]) -> list[str]:
    """The directory placeholder objects a ``/gcs`` mount needs to show ``file_uris``' directories.

    Cloud Storage has no directories: ``gs://B/run/ckpt/step-5/a.bin`` is one object. Cloud
    Storage FUSE shows ``/gcs/B/run/ckpt/step-5/`` as a directory when an object named
    ``run/ckpt/step-5/`` (empty, the name ending with ``/``) exists, or, only when mounted with
    ``--implicit-dirs``, when some object's name starts with that prefix. Vertex AI does not
    document which way it mounts ``/gcs``, and writing through FUSE (``mkdir``) makes the
    placeholders while client libraries (gcsfs, google-cloud-storage) do not; so whoever writes
    for a trainer to list through the mount writes them too.

    Args:
        file_uris: ``gs://`` URIs of files (anything else is ignored).

    Returns:
        ``gs://BUCKET/DIR/`` for every directory between the bucket and each file, once each,
        parents before children.
    """
    found: set[str] = set()
    for uri in file_uris:
        if not uri.startswith("gs://"):
            continue
        bucket, _, key = uri[len("gs://") :].partition("/")
        parts = [p for p in key.split("/") if p][:-1]  # the file's own name is not a directory
        for depth in range(1, len(parts) + 1):
            found.add(f"gs://{bucket}/" + "/".join(parts[:depth]) + "/")
    return sorted(found, key=lambda d: (d.count("/"), d))


def normalize_output_uri(value: str) -> str:
    """A base output directory as the CustomJob should carry it, or a clear refusal.

    ``/gcs/BUCKET/PATH`` becomes ``gs://BUCKET/PATH``; ``file:///PATH`` becomes ``/PATH``;
    ``gs://`` URIs and absolute local paths are returned as they are (whether the service takes a
    local path is :func:`check_output_uri`'s question).

    Raises:
        InvalidValueError: a relative path, another scheme, or a ``gs://``/``/gcs/`` URI without a
            valid bucket.
    """
    uri = gcs_uri_of_fuse_path(value) or value
    if uri.startswith("gs://"):
        _check_gcs(uri, local_paths=False)
        return uri
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
        if not uri.startswith("/"):
            raise InvalidValueError(f"{show(value)} is not a file:/// URL of an absolute path")
    if "://" in uri:
        raise InvalidValueError(
            f"{show(value)} is not a Cloud Storage location: give {OUTPUT_URI_FORM}"
        )
    if not os.path.isabs(uri):
        raise InvalidValueError(
            f"{show(value)} is a relative path; the job runs elsewhere: give {OUTPUT_URI_FORM} "
            f"(the local emulator also takes an absolute path)"
        )
    return os.path.normpath(uri)


def _check_gcs(uri: str, *, local_paths: bool, form: str = OUTPUT_URI_FORM) -> None:
    """Refuse a ``gs://`` URI without a valid bucket; ``form``: the valid forms to name."""
    rest = uri[len("gs://") :]
    bucket = rest.split("/", 1)[0]
    if not bucket and local_paths and rest.startswith("/"):
        return  # gs:///ABS/PATH: the aiplatform SDK's local staging bucket (emulator only)
    if not bucket:
        raise InvalidValueError(f"{show(uri)} names no bucket: give {form}")
    check_bucket(bucket)
    if "\r" in rest or "\n" in rest:  # a URI read from a CRLF file: `$(cat uri.txt)` keeps \r
        raise InvalidValueError(
            f"{show(uri)} holds a line break, which Cloud Storage object names cannot: give {form}"
        )


def check_gcs_uri(uri: str, form: str = "gs://BUCKET/PATH") -> None:
    """Refuse anything but a ``gs://`` URI of a valid bucket, where only Cloud Storage will do.

    A pipeline run's root is one: Vertex AI Pipelines writes its artifacts there, and neither a
    local path nor the ``/gcs/`` form names a place it can write.

    Raises:
        InvalidValueError: naming the value and ``form``, the valid form.
    """
    if not uri.startswith("gs://"):
        raise InvalidValueError(f"{show(uri)} is not a Cloud Storage URI: give {form}")
    _check_gcs(uri, local_paths=False, form=form)


def check_not_scheme_typo(value: str, form: str = OUTPUT_URI_FORM) -> None:
    """Refuse a URI missing its ``//`` (``gs:/BUCKET/PATH``, ``gs:``), read as a local path.

    A local-path reader would turn it into a folder named ``gs:`` in the working directory.

    Raises:
        InvalidValueError: naming ``form``, the valid forms.
    """
    typo = fs.scheme_typo(value)
    if typo:
        raise InvalidValueError(f"{show(value)} {typo}: give {form}")


CHECKPOINT_URI_FORM = "gs://BUCKET/PATH, /gcs/BUCKET/PATH or a local path"
CLOUD_CHECKPOINT_URI_FORM = "gs://BUCKET/PATH or /gcs/BUCKET/PATH"  # a task on Vertex AI's


def check_checkpoint_uri(uri: str, *, local_paths: bool = True) -> None:
    """Refuse a checkpoint directory a kfp-spot task could not read.

    A task reads a checkpoint artifact (the evaluation's ``checkpoint``, the launch's
    ``resume_from``) from Cloud Storage or from its own file system (a ``/gcs/`` FUSE path, a
    ``file://`` URL, kfp.local's outputs). Any other scheme (``s3://``, ``https://``) would
    otherwise be read as a local path that does not exist, and a ``gs://`` URI without a valid
    bucket as a network error. ``local_paths=False``: the task runs on Vertex AI Pipelines, so
    the forms a refusal names are Cloud Storage's alone (the caller refuses a local path).

    Raises:
        InvalidValueError: naming the valid forms.
    """
    form = CHECKPOINT_URI_FORM if local_paths else CLOUD_CHECKPOINT_URI_FORM
    if "://" in uri and not uri.startswith(("gs://", "file://")):
        raise InvalidValueError(
            f"{show(uri)} is not a location a task can read checkpoints from: give {form}"
        )
    if uri.startswith("gs://"):
        _check_gcs(uri, local_paths=False, form=form)
    check_not_scheme_typo(uri, form)


def check_output_uri(uri: str, *, local_paths: bool) -> None:
    """Refuse a ``baseOutputDirectory.outputUriPrefix`` the service would refuse.

    Args:
        uri: the value in the CustomJob.
        local_paths: accept the emulator's extension (an absolute local path, ``file:///``,
            ``gs:///ABS/PATH``); False for Vertex AI.

    Raises:
        InvalidValueError: naming the valid forms.
    """
    _check_storage_uri(uri, local_paths=local_paths, verb="writes to")


def check_package_uri(uri: str, *, local_paths: bool) -> None:
    """Refuse a ``pythonPackageSpec.packageUris`` entry the service could not read.

    Vertex AI installs packages from Cloud Storage only (``gs://BUCKET/PATH/pkg.tar.gz``); the
    local emulator also installs an absolute local path or ``file:///`` URL (its extension).

    Args:
        uri: one package URI in the CustomJob (after :func:`service_uri`).
        local_paths: accept the emulator's extension; False for Vertex AI.

    Raises:
        InvalidValueError: naming the valid forms.
    """
    if uri.endswith("/"):
        raise InvalidValueError(f"{show(uri)} names a directory: give the package file's URI")
    _check_storage_uri(uri, local_paths=local_paths, verb="reads packages from")


def _check_storage_uri(uri: str, *, local_paths: bool, verb: str) -> None:
    if not uri:
        raise InvalidValueError(f"is empty: give {OUTPUT_URI_FORM}")
    if uri.startswith("gs://"):
        _check_gcs(uri, local_paths=local_paths)
        return
    if local_paths and (uri.startswith("file:///") or (os.path.isabs(uri) and "://" not in uri)):
        if "\x00" in uri:  # no file system has such a path: the replicas' start raised
            raise InvalidValueError(
                f"{show(uri)} holds a NUL character (\\x00), which no path can: give "
                f"{EMULATOR_OUTPUT_FORM}"
            )
        return
    if uri.startswith(GCS_FUSE_ROOT):
        raise InvalidValueError(
            f"{show(uri)} is a Cloud Storage FUSE path: the service takes "
            f"{gcs_uri_of_fuse_path(uri)!r}"
        )
    if local_paths:
        raise InvalidValueError(
            f"{show(uri)} is not a Cloud Storage URI: use {OUTPUT_URI_FORM} or "
            f"{EMULATOR_OUTPUT_FORM}"
        )
    local = os.path.isabs(uri) or uri.startswith("file://")
    raise InvalidValueError(
        f"{show(uri)} is "
        + ("a local path" if local else "not a Cloud Storage URI")
        + f": Vertex AI {verb} Cloud Storage only: use {OUTPUT_URI_FORM}"
        + (" (local paths are the local emulator's extension)" if local else "")
    )


# Cloud Storage's predefined dual-regions and the regions each keeps its data in.
DUAL_REGIONS: dict[str, frozenset[str]] = {
    "ASIA1": frozenset({"asia-northeast1", "asia-northeast2"}),
    "EUR4": frozenset({"europe-north1", "europe-west4"}),
    "EUR5": frozenset({"europe-west1", "europe-west2"}),
    "EUR7": frozenset({"europe-west10", "europe-west3"}),
    "EUR8": frozenset({"europe-west8", "europe-west12"}),
    "NAM4": frozenset({"us-central1", "us-east1"}),
}
# Cloud Storage's multi-regions: the region-name prefix each spans, and regions it leaves out
# (the EU multi-region keeps data in EU member states: not London, not Zurich).
MULTI_REGIONS: dict[str, tuple[str, frozenset[str]]] = {
    "US": ("us-", frozenset()),
    "EU": ("europe-", frozenset({"europe-west2", "europe-west6"})),
    "ASIA": ("asia-", frozenset()),
}
LOCAL_STORAGE = "LOCAL"  # a local directory (the emulator's extension): on this machine


def bucket_serves(bucket_location: str, region: str, data_locations: Iterable[str] = ()) -> bool:
    """Whether a bucket's data lives in (or over) ``region``, so a job there uses it as it is.

    Args:
        bucket_location: the bucket's ``location`` as Cloud Storage reports it (``US``,
            ``NAM4``, ``EUROPE-WEST4``; any case), or :data:`LOCAL_STORAGE` for a local directory.
        region: a Vertex AI region, e.g. ``europe-west4``.
        data_locations: a configurable dual-region's ``customPlacementConfig.dataLocations``
            (its regions); when given they decide.
    """
    region = region.lower()
    places = {d.lower() for d in data_locations}
    if places:
        return region in places
    location = bucket_location.upper()
    if location == LOCAL_STORAGE:
        return True
    if location in DUAL_REGIONS:
        return region in DUAL_REGIONS[location]
    if location in MULTI_REGIONS:
        prefix, left_out = MULTI_REGIONS[location]
        return region.startswith(prefix) and region not in left_out
    return location.lower() == region
