"""Rules on single values: names, ids, durations, limits, and how deep a nested value may go.

Each check takes the value alone and raises :class:`InvalidValueError` whose message says what is
wrong and what would be valid, without naming a field: the caller knows whether it checked a
component input, a CLI option or a CustomJob field, and puts that name in front. Every pattern is
matched whole (``re.fullmatch``): a ``$``-anchored ``re.match`` lets a trailing newline through.

Why one module: it is one table of Google Cloud's single-value rules (names, IDs, labels, image
references, durations, limits), each a few lines beside its pattern; the launcher, the emulator,
the deployer and ``kfp-spot submit`` import them from one place so no rule has two copies.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from kfp_spot.nesting import nesting_depth
from kfp_spot.version import image_host_problem

# Vertex AI's limits on a CustomJob.
MAX_PACKAGE_URIS = 100  # pythonPackageSpec.packageUris: the trainer plus its dependencies
MAX_WORKER_POOLS = 4  # primary, workers, parameter servers, evaluators
MAX_ENV_VARS = 100  # containerSpec.env, pythonPackageSpec.env: "Maximum limit is 100."
MAX_DISPLAY_NAME = 128
MAX_LABELS = 64
INT32_MAX = 2**31 - 1  # the largest value of an int32 field (replica counts, ...)
INT64_MAX = 2**63 - 1  # the largest int64: resource ids, project numbers
BOOT_DISK_TYPES = ("pd-ssd", "pd-standard", "hyperdisk-balanced")
# "boot disk size must be within the range of [100, 64000]" (Vertex SDK, DiskSpec)
MIN_BOOT_DISK_GB, MAX_BOOT_DISK_GB = 100, 64000
# google.protobuf.Duration holds at most +-315,576,000,000 s (10,000 years) with nanoseconds.
MAX_DURATION_SECONDS = 315_576_000_000
# A WorkerPoolSpec is 5 levels deep at most (pools, pool, containerSpec, env, variable): 20 leaves
# room and stops a hostile value long before Python's recursion limit.
MAX_NESTING = 20

PYTHON_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Google Cloud labels (Vertex AI: "International characters are allowed"): keys
# [\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}, values [\p{Ll}\p{Lo}\p{N}_-]{0,63}, in code points.
# Python's re has no \p{..}: the Unicode categories are read with unicodedata.
MAX_LABEL_CHARS = 63
_LABEL_START = frozenset({"Ll", "Lo"})  # a lowercase letter, or a letter of a caseless script
_LABEL_CHARS = _LABEL_START | {"Nd", "Nl", "No"}
TPU_TOPOLOGY = re.compile(r"[1-9][0-9]*(?:x[1-9][0-9]*){1,2}")
# Project IDs: 6-30 lowercase letters, digits or hyphens, starting with a letter, not ending with a
# hyphen; legacy domain-scoped IDs put a domain and ':' in front (example.com:my-project).
_PROJECT_ID = r"[a-z][a-z0-9-]{4,28}[a-z0-9]"
_DOMAIN = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+"
PROJECT_ID = re.compile(rf"(?:{_DOMAIN}:)?{_PROJECT_ID}")
_PROJECT_NUMBER = r"[1-9][0-9]{0,18}"  # an int64: at most 19 digits
PROJECT_NUMBER = re.compile(_PROJECT_NUMBER)
# PersistentResource IDs (CreatePersistentResourceRequest) and Compute Engine resource names
# such as reserved IP ranges (RFC 1035) share one form: a lowercase letter, then up to 62 more
# lowercase letters, digits or '-', not ending with '-'.
RESOURCE_ID = re.compile(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?")
RESOURCE_ID_FORM = (
    "1-63 lowercase letters, digits or '-', starting with a letter, not ending with '-'"
)
_LOCATION = r"[a-z][a-z0-9-]{0,62}"
_PROJECT = rf"(?:{_PROJECT_ID}|{_PROJECT_NUMBER})"
# EncryptionSpec.kmsKeyName: projects/P/locations/L/keyRings/R/cryptoKeys/K (Cloud KMS names
# key rings and keys with 1-63 letters, digits, '_' and '-').
KMS_KEY_NAME = re.compile(
    rf"projects/{_PROJECT}/locations/({_LOCATION})/keyRings/[A-Za-z0-9_-]{{1,63}}"
    r"/cryptoKeys/[A-Za-z0-9_-]{1,63}"
)
# A service account's email: user-managed (NAME@PROJECT.iam.gserviceaccount.com), the default
# compute (NUMBER-compute@developer.gserviceaccount.com) and App Engine ones, Google-managed agents.
SERVICE_ACCOUNT = re.compile(
    r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?@(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+"
    r"gserviceaccount\.com"
)
SERVICE_ACCOUNT_FORM = "NAME@PROJECT.iam.gserviceaccount.com"
KMS_KEY_FORM = "projects/PROJECT/locations/REGION/keyRings/KEY_RING/cryptoKeys/KEY"
# CustomJobSpec.tensorboard: projects/P/locations/L/tensorboards/ID.
TENSORBOARD_NAME = re.compile(rf"projects/{_PROJECT}/locations/({_LOCATION})/tensorboards/[0-9]+")
TENSORBOARD_FORM = "projects/PROJECT/locations/REGION/tensorboards/TENSORBOARD_ID"
# CustomJobSpec.experiment / experimentRun: a Vertex ML Metadata context,
# projects/P/locations/L/metadataStores/STORE/contexts/CONTEXT.
METADATA_CONTEXT_NAME = re.compile(
    rf"projects/{_PROJECT}/locations/({_LOCATION})/metadataStores/[A-Za-z0-9_-]{{1,128}}"
    r"/contexts/[A-Za-z0-9_-]{1,128}"
)
METADATA_CONTEXT_FORM = "projects/PROJECT/locations/REGION/metadataStores/default/contexts/NAME"
# ReservationAffinity.values with the key compute.googleapis.com/reservation-name: "the full
# resource name of the reservation or reservation block".
RESERVATION_NAME_KEY = "compute.googleapis.com/reservation-name"
RESERVATION_NAME = re.compile(
    rf"projects/{_PROJECT}/zones/[a-z]+-[a-z]+[0-9]+-[a-z]/reservations/"
    r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?(?:/reservationBlocks/[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?)?"
)
RESERVATION_FORM = "projects/PROJECT/zones/ZONE/reservations/RESERVATION"
# Artifact Registry repository IDs, as gcloud checks one before it creates the repository: a
# lowercase letter, then lowercase letters, digits or '-', ending with a letter or digit.
ARTIFACT_REPOSITORY_ID = re.compile(r"[a-z](?:[a-z0-9-]*[a-z0-9])?")
ARTIFACT_REPOSITORY_ID_FORM = (
    "an Artifact Registry repository ID: lowercase letters, digits or hyphens, starting with a "
    "letter and ending with a letter or digit (e.g. 'templates')"
)
_DURATION = re.compile(r"([0-9]{1,15})(?:\.([0-9]{1,9}))?(s|m|h|d)?")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}

PROJECT_ID_FORM = (
    "a Google Cloud project ID: 6-30 lowercase letters, digits or hyphens, starting with a letter "
    "and not ending with a hyphen (e.g. 'my-project-123'; 'example.com:my-project' for a "
    "domain-scoped project; a project number also works)"
)
DURATION_FORM = (
    f"a duration such as '3600s', '90m', '2h' or '1d' (or a number of seconds), at most "
    f"{MAX_DURATION_SECONDS}s with at most 9 decimals"
)


class InvalidValueError(ValueError):
    """A value breaks a rule; the message says what is wrong and what would be valid."""


class InvalidFieldError(InvalidValueError):
    """A request field's value breaks a rule: names the field (``field``) and the rule (``reason``).

    The floor's neutral error: shared plumbing (:mod:`kfp_spot.vertex.client`) raises it, and each
    component maps it to its own input error (``kfp_spot.validation.component_inputs.inputs_of``).
    """

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def show(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for one-line error messages."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-2:]}"


def is_module_name(name: Any) -> bool:
    """Whether ``name`` is a dotted Python module name such as ``trainer.task``."""
    return isinstance(name, str) and PYTHON_MODULE.fullmatch(name) is not None


def check_process_text(value: str) -> None:
    """Refuse a NUL character in what a process is given: an argument, a command, an env value.

    The kernel takes each argument and environment string up to its first NUL, so no process or
    container can be started with one: the replica could never run (a container runtime fails
    with ``invalid argument``; the emulator's process start raised).

    Raises:
        InvalidValueError: naming the value.
    """
    if "\x00" in value:
        raise InvalidValueError(
            f"{show(value)} holds a NUL character (\\x00), which no process can be given in its "
            "arguments or environment; remove it"
        )


def is_env_name(name: Any) -> bool:
    """Whether ``name`` is an environment variable name (letters, digits, ``_``; no digit first)."""
    return isinstance(name, str) and ENV_NAME.fullmatch(name) is not None


def check_label(key: Any, value: Any) -> None:
    """Check one label of a Google Cloud resource.

    Raises:
        InvalidValueError: when the key or the value breaks the label rules.
    """
    if not (
        isinstance(key, str)
        and key
        and unicodedata.category(key[0]) in _LABEL_START
        and _is_label_text(key)
    ):
        raise InvalidValueError(
            f"label key {show(key)} is invalid: keys start with a lowercase letter and hold at "
            "most 63 lowercase letters, digits, '_' or '-' (international letters included)"
        )
    if not isinstance(value, str) or not _is_label_text(value):
        raise InvalidValueError(
            f"label {key}={show(value)} is invalid: values hold at most 63 lowercase letters, "
            "digits, '_' or '-' (international letters included)"
        )


def check_labels(labels: Mapping[Any, Any], field: str = "labels") -> None:
    """A resource's labels (CustomJob, PipelineJob, Model, Endpoint): at most 64, each valid.

    The one rule for every resource's labels, in one message form.

    Raises:
        InvalidFieldError: ``field`` (too many) or ``field.KEY`` (a bad label).
    """
    if len(labels) > MAX_LABELS:
        raise InvalidFieldError(field, f"has {len(labels)} labels; at most {MAX_LABELS}")
    for key, value in labels.items():
        try:
            check_label(key, value)
        except InvalidValueError as exc:  # a key too long for a label is shown cut short
            name = key if isinstance(key, str) and len(key) <= MAX_LABEL_CHARS else show(key)
            raise InvalidFieldError(f"{field}.{name}", str(exc)) from None


def _is_label_text(text: str) -> bool:
    return len(text) <= MAX_LABEL_CHARS and all(
        char in "_-" or unicodedata.category(char) in _LABEL_CHARS for char in text
    )


def check_project_id(value: Any) -> str:
    """Return ``value`` when it is a Google Cloud project ID (or number).

    Raises:
        InvalidValueError: naming the valid form.
    """
    if isinstance(value, str) and (
        PROJECT_ID.fullmatch(value) is not None
        or (PROJECT_NUMBER.fullmatch(value) is not None and int(value) <= INT64_MAX)
    ):
        return value
    raise InvalidValueError(f"expected {PROJECT_ID_FORM}, got {show(value)}")


def check_artifact_repository_id(value: Any) -> str:
    """Return ``value`` when it is an Artifact Registry repository ID.

    Raises:
        InvalidValueError: naming the valid form.
    """
    if isinstance(value, str) and ARTIFACT_REPOSITORY_ID.fullmatch(value) is not None:
        return value
    raise InvalidValueError(f"expected {ARTIFACT_REPOSITORY_ID_FORM}, got {show(value)}")


# A container image reference, as Docker's distribution/reference grammar reads one (what any
# registry, Artifact Registry's included, and so Vertex AI pulls):
# [DOMAIN[:PORT]/]PATH[:TAG][@DIGEST], each path component lowercase. A malformed one can never
# be pulled: the job would fail on its VMs, after they started.
_IMAGE_DOMAIN = (
    r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
)
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"(?P<name>(?:{_IMAGE_DOMAIN}(?::[0-9]+)?/)?{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*)"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
MAX_IMAGE_NAME = 255  # the reference grammar's limit on the name (domain and path)


def check_image_reference(value: Any) -> str:
    """Return ``value`` when it is a container image reference a registry can serve.

    Raises:
        InvalidValueError: naming the valid form.
    """
    match = IMAGE_REFERENCE.fullmatch(value) if isinstance(value, str) else None
    if match is None or len(match["name"]) > MAX_IMAGE_NAME:
        raise InvalidValueError(
            f"{show(value)} is not a container image reference: "
            "[HOST[:PORT]/]PATH[:TAG][@sha256:DIGEST], the path in lowercase letters, digits and "
            "'.', '_', '-' separators, e.g. 'us-docker.pkg.dev/my-project/my-repo/trainer:1'"
        )
    problem = image_host_problem(match.string)
    if problem is not None:
        raise InvalidValueError(f"{show(value)}: {problem}")
    return match.string


def check_service_account(value: Any) -> str:
    """Return ``value`` when it is a service account's email address.

    Raises:
        InvalidValueError: naming the valid form.
    """
    if isinstance(value, str) and SERVICE_ACCOUNT.fullmatch(value) is not None:
        return value
    raise InvalidValueError(
        f"{show(value)} is not a service account email such as {SERVICE_ACCOUNT_FORM}"
    )


def _region_of(pattern: re.Pattern[str], value: Any, expected: str) -> str:
    """The region (``pattern``'s first group) of the resource name ``value``.

    Raises:
        InvalidValueError: "expected <expected>, got <value>".
    """
    match = pattern.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidValueError(f"expected {expected}, got {show(value)}")
    return match.group(1)


def check_kms_key_name(value: Any) -> str:
    """Return the region of a Cloud KMS key name (an ``EncryptionSpec.kmsKeyName``).

    Raises:
        InvalidValueError: naming the valid form.
    """
    return _region_of(KMS_KEY_NAME, value, f"a Cloud KMS key name {KMS_KEY_FORM}")


def check_tensorboard_name(value: Any) -> str:
    """Return the region of a Vertex AI TensorBoard resource name.

    Raises:
        InvalidValueError: naming the valid form.
    """
    return _region_of(
        TENSORBOARD_NAME, value, f"a Vertex AI TensorBoard resource name {TENSORBOARD_FORM}"
    )


def check_metadata_context_name(value: Any) -> str:
    """Return the region of a Vertex ML Metadata context name (an experiment or experiment run).

    Raises:
        InvalidValueError: naming the valid form.
    """
    return _region_of(
        METADATA_CONTEXT_NAME,
        value,
        f"a Vertex AI experiment resource name {METADATA_CONTEXT_FORM}",
    )


def check_reservation_name(value: Any) -> None:
    """Refuse a string that is not a Compute Engine reservation's full resource name.

    Raises:
        InvalidValueError: naming the valid form.
    """
    if not isinstance(value, str) or RESERVATION_NAME.fullmatch(value) is None:
        raise InvalidValueError(
            f"{show(value)} is not a reservation's full resource name: {RESERVATION_FORM}, e.g. "
            "'projects/my-project/zones/us-central1-a/reservations/my-reservation'"
        )


def _check_resource_id(value: Any, what: str) -> None:
    if not isinstance(value, str) or RESOURCE_ID.fullmatch(value) is None:
        raise InvalidValueError(f"expected {what} ({RESOURCE_ID_FORM}), got {show(value)}")


def check_persistent_resource_id(value: Any) -> None:
    """Refuse a string that is not a PersistentResource ID (the last part of its name).

    Raises:
        InvalidValueError: naming the valid form.
    """
    _check_resource_id(value, "a persistent resource ID (the ID, not the full resource name)")


def check_reserved_ip_range(value: Any) -> None:
    """Refuse a string that is not the name of a reserved IP range (a Compute Engine address).

    Raises:
        InvalidValueError: naming the valid form.
    """
    _check_resource_id(value, "the name of a reserved IP range such as 'vertex-ai-ip-range'")


def check_network_short_name(value: Any) -> None:
    """Refuse a string that is not a VPC network's own name (``DnsPeeringConfig.targetNetwork``).

    Raises:
        InvalidValueError: naming the valid form.
    """
    _check_resource_id(value, "a VPC network's name such as 'my-vpc' (not its full name)")


# CustomJobSpec.network: projects/{project}/global/networks/{network} (a project number in the
# API's example; a project ID is taken too: Shared VPC hosts are often named by ID). A network's
# own name follows Compute Engine's rule for resource names (RFC 1035: lowercase, 1-63).
NETWORK_NAME = re.compile(
    rf"projects/{_PROJECT}/global/networks/[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?"
)
NETWORK_FORM = "projects/PROJECT_NUMBER/global/networks/NETWORK"


def check_network_name(value: Any) -> None:
    """Refuse a string that is not the full name of a VPC network (``CustomJobSpec.network``).

    Raises:
        InvalidValueError: naming the valid form.
    """
    if not isinstance(value, str) or NETWORK_NAME.fullmatch(value) is None:
        raise InvalidValueError(
            f"{show(value)} is not a VPC network's full name: {NETWORK_FORM}, e.g. "
            "'projects/12345/global/networks/my-vpc' (NETWORK: 1-63 lowercase letters, digits "
            "and hyphens, starting with a letter)"
        )


# PscInterfaceConfig.networkAttachment: the full name of a Compute Engine network attachment,
# projects/{project}/regions/{region}/networkAttachments/{name} (earlier references: its name
# "within the region and user project", which the service still takes). Names follow RFC 1035.
NETWORK_ATTACHMENT = re.compile(
    rf"(?:projects/{_PROJECT}/regions/{_LOCATION}/networkAttachments/)?"
    r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
)
NETWORK_ATTACHMENT_FORM = "projects/PROJECT_NUMBER/regions/REGION/networkAttachments/NAME"


def check_network_attachment(value: Any) -> None:
    """Refuse a string that names no network attachment (``PscInterfaceConfig``).

    Raises:
        InvalidValueError: naming the valid form.
    """
    if not isinstance(value, str) or NETWORK_ATTACHMENT.fullmatch(value) is None:
        raise InvalidValueError(
            f"{show(value)} is not a network attachment: {NETWORK_ATTACHMENT_FORM}, e.g. "
            "'projects/12345/regions/us-central1/networkAttachments/my-na', or its NAME alone "
            "(1-63 lowercase letters, digits and hyphens, starting with a letter)"
        )


RFC3339_FORM = "an RFC 3339 time such as 2026-01-31T12:00:00Z or 2026-01-31T12:00:00.5+02:00"
_RFC3339 = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2})"  # date and time
    r"(?:\.([0-9]+))?"  # the fraction, any number of digits
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})?"  # the offset
)


def rfc3339_seconds(value: str, *, naive_utc: bool = False) -> float:
    """Epoch seconds of an RFC 3339 time (protobuf's JSON ``Timestamp``), alike on every Python.

    ``datetime.fromisoformat`` takes a ``Z`` and any number of fractional digits only from 3.11
    on; this reads the fraction (truncated to microseconds) and the offset itself.

    Args:
        value: the time.
        naive_utc: read a time without an offset as UTC (else it is refused: RFC 3339 requires
            one, and a local time would depend on the machine's time zone).

    Raises:
        InvalidValueError: naming the valid form.
    """
    match = _RFC3339.fullmatch(value.strip())
    if match is None or (match.group(3) is None and not naive_utc):
        raise InvalidValueError(f"expected {RFC3339_FORM}, got {show(value)}")
    stamp, fraction, offset = match.groups()
    zone = offset if offset and offset not in "Zz" else "+00:00"
    micros = (fraction or "")[:6].ljust(6, "0")
    try:
        when = datetime.datetime.fromisoformat(f"{stamp[:10]}T{stamp[11:]}.{micros}{zone}")
    except ValueError as exc:  # a day or hour out of range
        raise InvalidValueError(f"expected {RFC3339_FORM}, got {show(value)}") from exc
    return when.timestamp()


def parse_duration(value: Any, *, allow_zero: bool = True) -> float:
    """Seconds in a duration: ``"3600s"``, ``"90m"``, ``"2h"``, ``"1d"`` or a number of seconds.

    Bounded by what ``google.protobuf.Duration`` holds (and so what Vertex AI accepts): at most
    :data:`MAX_DURATION_SECONDS`, at most nanosecond precision, never negative.

    Args:
        value: the duration.
        allow_zero: whether ``0`` is meaningful (``maxWaitDuration``: wait indefinitely) or not
            (``timeout``).

    Raises:
        InvalidValueError: naming the valid form.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InvalidValueError(f"expected {DURATION_FORM}, got {show(value)}")
    if isinstance(value, str):
        match = _DURATION.fullmatch(value)
        if match is None:
            raise InvalidValueError(f"expected {DURATION_FORM}, got {show(value)}")
        whole, fraction, unit = match.groups()
        seconds: float = (
            int(whole) + int(fraction or 0) / 10 ** len(fraction or "")
        ) * _DURATION_UNITS[unit]
    else:
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_DURATION_SECONDS:
        raise InvalidValueError(f"expected {DURATION_FORM}, got {show(value)}")
    if not allow_zero and seconds == 0:
        raise InvalidValueError(f"must be longer than 0s: expected {DURATION_FORM}, got 0")
    return seconds


def check_nesting(value: Any, limit: int = MAX_NESTING) -> None:
    """Refuse a value (or its JSON text) whose lists and dicts nest deeper than ``limit``.

    Raises:
        InvalidValueError: naming the limit.
    """
    if nesting_depth(value, limit) > limit:
        why = (  # the inputs' own bound; another caller's (a prediction's instances) is its own
            "; no input needs more than 5 (a WorkerPoolSpec: pools, pool, containerSpec, env, "
            "variable)"
            if limit == MAX_NESTING
            else ""
        )
        raise InvalidValueError(f"nests lists and dicts more than {limit} levels deep{why}")


def loads_bounded(text: str, limit: int = MAX_NESTING) -> Any:
    """:func:`loads_unique_keys` after :func:`check_nesting` (deep text fails clearly).

    A component's JSON text input refuses a key given twice as ``--param`` does, in its words:
    a pipeline parameter means one thing wherever it is read.

    Raises:
        InvalidValueError: too deep, not JSON, or an object naming a key twice.
    """
    check_nesting(text, limit)
    try:
        return loads_unique_keys(text)
    except json.JSONDecodeError as exc:
        raise InvalidValueError(f"is not valid JSON ({exc})") from None
    except ValueError as exc:  # a key given twice
        raise InvalidValueError(str(exc)) from None


def loads_unique_keys(text: str) -> Any:
    """``json.loads`` refusing an object that names a key twice.

    ``json.loads`` keeps the last value silently: ``{"rmse": "<=0.5", "rmse": ">=0.1"}`` would
    gate on ``>=0.1`` alone, locally and in the PipelineJob a submission sends.

    Raises:
        json.JSONDecodeError: not JSON.
        ValueError: a key given twice, naming it and both values.
    """

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        value: dict[str, Any] = {}
        for key, item in pairs:
            if key in value:
                raise ValueError(
                    f"key {key!r} is given twice ({json.dumps(value[key])} and "
                    f"{json.dumps(item)}); a JSON object holds each key once: give it once"
                )
            value[key] = item
        return value

    return json.loads(text, object_pairs_hook=unique)


def check_text(value: Any) -> None:
    r"""Refuse strings (anywhere in lists and dicts) that are not valid Unicode text.

    A lone surrogate (``\ud800`` escaped in JSON text) cannot be encoded as UTF-8: protobuf
    and HTTP clients would fail on it deep inside a request. Check :func:`check_nesting` first.

    Raises:
        InvalidValueError: naming the bad text.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidValueError(
                    f"{show(item)} is not valid Unicode text (a lone surrogate): give UTF-8 text"
                ) from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def number_problem(value: Any, where: str = "") -> str | None:
    """Why the number ``value`` (not nested) cannot be a pipeline parameter's as it is, else None.

    A run on Vertex AI Pipelines is given its parameters as protobuf ``Value``s, whose numbers
    are doubles: JSON has no infinity or NaN (protobuf refuses to send them), and an integer a
    double cannot hold exactly would reach the tasks changed. ``where``: the item's path in a
    list or object (``['seed']``), for the message.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return (
            f"{value} is not a finite number; pipeline parameters are JSON values (no infinity "
            "or NaN)"
        )
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    try:
        kept: int | None = int(float(value))
    except OverflowError:  # beyond a double's range
        kept = None
    if kept == value:
        return None
    shown = f"item {where} ({show(value, 40)})" if where else show(value, 40)
    return (
        f"{shown} is an integer a double cannot hold: a run on Vertex AI Pipelines is given its "
        "parameters as protobuf Values, whose numbers are doubles, and would get "
        f"{'none (out of range)' if kept is None else kept}; integers up to 2**53 are exact: "
        "pass a larger one as text"
    )


def check_numbers(value: Any) -> None:
    """Refuse a number, anywhere in lists and dicts, :func:`number_problem` refuses.

    Raises:
        InvalidValueError: naming the first such number (and its item).
    """
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        problem = number_problem(item, where)
        if problem is not None:
            raise InvalidValueError(problem)
        if isinstance(item, dict):
            stack.extend((v, f"{where}[{k!r}]") for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
