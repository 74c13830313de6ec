"""launch_spot_job's job inputs, declared once as data: one row per input.

Each field of :class:`JobInputs` is a row (:func:`launch_input`): its default (the component's,
checked against the signature by tests/jobs/test_defaults.py), how the component's value is read
(:class:`Kind`, through :class:`~kfp_spot.validation.component_inputs.InputReader`), which
CustomJob fields it sets (protobuf JSON paths; ``[]`` stands for any index), whether the job
builder copies it to its field as it is, and the rule its value must pass when one applies that
the built job cannot show (Vertex's own rules on the job are
:func:`kfp_spot.vertex.validate_for_submission`'s). Everything else follows from the rows:

- :func:`read_job_inputs`: the component's reader (entry.py), one read per row by its kind;
- :func:`check_inputs`: each row's rule, then the few rules that tie inputs together;
- :func:`direct_fields`: the simple fields of the job and of the pools built from the machine
  inputs, which :func:`kfp_spot.jobs.spec.build_custom_job` sets as they are;
- :func:`input_for_field`: which input set a field the built job's rules refused, so the launcher's
  error names what the user can change.

Adding one of GCPC's inputs: its line in the component's signature, its row here, and its line in
docs/launcher.md (plus its rule in :mod:`kfp_spot.vertex` when it has one).

Pure and light: no GAPIC, and of the launcher's modules only :mod:`~kfp_spot.jobs.strategy`.

Why one module: it is one table, one row per input, and the four views derived from it (reader,
rules, simple fields, field-to-input); split, a new input would again touch several files.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kfp_spot import vertex
from kfp_spot.executors import DEFAULT_EXECUTOR_IMAGE
from kfp_spot.jobs.strategy import STRATEGIES, Strategy
from kfp_spot.validation.component_inputs import InputReader, check_input
from kfp_spot.vertex import pipeline_context
from kfp_spot.vertex.pipeline_context import (
    LOCATION_PLACEHOLDER,
    PERSISTENT_RESOURCE_ID_PLACEHOLDER,
    PROJECT_ID_PLACEHOLDER,
)

DEFAULT_TIMEOUT = "604800s"  # GCPC's default: 7 days
DEFAULT_MAX_WAIT = "86400s"  # GCPC's default for FLEX_START: 24 hours
POOL = "jobSpec.workerPoolSpecs[]"  # a field of every pool built from the machine inputs
_INT32 = 2**31
_T = TypeVar("_T")


class LaunchInputError(ValueError):
    """An input of launch_spot_job is invalid; names the input and what would be valid."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"launch_spot_job input {field_name!r}: {message}")
        self.field = field_name
        self.reason = message


def checked(name: str, check: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``check(*args)`` (a rule of :mod:`kfp_spot.vertex`), its error naming input ``name``.

    Raises:
        LaunchInputError: when the rule refuses the value.
    """
    return check_input(LaunchInputError, name, check, *args, **kwargs)


def parse_strategy(name: str, value: object, allowed: Sequence[Strategy] = STRATEGIES) -> Strategy:
    """``value`` (a :class:`Strategy` or its name) as one of ``allowed``.

    Raises:
        LaunchInputError: naming input ``name`` and the strategies it may be.
    """
    if isinstance(value, str) and value in allowed:
        return Strategy(value)
    shown = value.value if isinstance(value, Strategy) else value
    raise LaunchInputError(name, f"expected one of {', '.join(allowed)}, got {shown!r}")


def parse_duration(name: str, value: str | float | int, *, allow_zero: bool = True) -> float:
    """Seconds in a duration input: ``"3600s"``, ``"90m"``, ``"2h"``, ``"1d"`` or a number.

    Raises:
        LaunchInputError: naming ``name`` when the value is not a duration protobuf can hold.
    """
    return checked(name, vertex.parse_duration, value, allow_zero=allow_zero)


class Kind(enum.Enum):
    """How a component's value is read into a row's type (each kind's type check, once)."""

    TEXT = "text"  # a string
    INT32 = "int32"  # a whole number a protobuf int32 holds
    BOOLEAN = "boolean"
    DURATION = "duration"  # "3600s", "2h", ... or a number of seconds (its rule parses it)
    ARGV = "argv"  # a list; items become their text (KFP lists may hold numbers)
    STRINGS = "strings"  # a list of strings
    TEXT_MAP = "text_map"  # a dict; keys and values become their text
    OBJECTS = "objects"  # a list of JSON objects (parsed as messages by the job builder)
    OBJECT = "object"  # a JSON object (parsed as a message by the job builder)
    ARTIFACT = "artifact"  # not a parameter: entry.py takes it from an input artifact


def _text(name: str, item: Any) -> str:
    """A list item or map value of input ``name`` as the job's text.

    Text stays as it is and a number becomes its text, a whole number as one (``5``, not
    ``5.0``): KFP carries a pipeline's lists and dicts as protobuf values, whose numbers are
    doubles, so the ``5`` of ``["--steps", 5]`` arrives as ``5.0``, which ``int()`` in the trainer
    refuses. Anything else (null, true/false, a list or an object) has no one text the job would
    mean (Python's ``None``/``True``/``{'a': 1}`` are not what a shell or JSON reader expects), and
    the API takes only strings: it is refused, naming the input.

    Raises:
        LaunchInputError: naming ``name`` and the item.
    """
    if isinstance(item, str):
        return item
    if isinstance(item, int) and not isinstance(item, bool):
        return str(item)
    if isinstance(item, float) and math.isfinite(item):
        return str(int(item)) if item.is_integer() and abs(item) < 2**53 else str(item)
    raise LaunchInputError(
        name,
        f"holds {vertex.show(item)}, which is not text or a number: give every item as text "
        "(e.g. 'true', or JSON text for a structured value)",
    )


def _read(read: InputReader, name: str, kind: Kind) -> Any:
    if kind is Kind.TEXT:
        return read.text(name)
    if kind is Kind.INT32:
        value = read.integer(name)
        if abs(value) >= _INT32:
            raise LaunchInputError(name, f"expected a 32-bit integer, got {value}")
        return value
    if kind is Kind.BOOLEAN:
        return read.boolean(name)
    if kind is Kind.DURATION:
        return read.given(name)
    if kind is Kind.ARGV:
        return [_text(name, item) for item in read.json_value(name, list)]
    if kind is Kind.STRINGS:
        return read.strings(name)
    if kind is Kind.TEXT_MAP:
        return {str(k): _text(name, v) for k, v in read.json_value(name, dict).items()}
    if kind is Kind.OBJECTS:
        return read.json_value(name, list)
    if kind is Kind.OBJECT:
        return read.json_value(name, dict)
    raise AssertionError(f"{name}: {kind} is not read from a parameter")


@dataclass(frozen=True)
class InputRow:
    """One input: how it is read, which CustomJob fields it sets, the rule its value passes.

    Attributes:
        name: the component's input (and :class:`JobInputs` field).
        kind: how the value is read.
        default: the component's default.
        fields: the CustomJob fields the input sets (``[]``: any index), for naming it in errors.
        direct: the job builder copies a non-empty value to ``fields[0]`` as it is.
        rule: a rule of :mod:`kfp_spot.vertex` the value must pass (raising
            ``InvalidValueError``), for what the built job's own rules cannot tell.
        artifact: for :data:`Kind.ARTIFACT`, the input artifact the value comes from.
    """

    name: str
    kind: Kind
    default: Any
    fields: tuple[str, ...]
    direct: bool
    rule: Callable[[Any], object] | None
    artifact: str

    @property
    def input(self) -> str:
        """The component input the value comes from (an artifact's name for an artifact row)."""
        return self.artifact or self.name


_ROW = "launch_input"


def launch_input(
    kind: Kind,
    default: Any = dataclasses.MISSING,
    *,
    fields: tuple[str, ...] = (),
    direct: bool = False,
    rule: Callable[[Any], object] | None = None,
    factory: Callable[[], Any] | None = None,
    artifact: str = "",
) -> Any:
    """A :class:`JobInputs` field that is one row of the input table (see :class:`InputRow`)."""
    metadata = {_ROW: (kind, fields, direct, rule, artifact)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _settled(name: str, check: Callable[[Any], object]) -> Callable[[Any], object]:
    """``check``, after refusing GCPC's placeholder of ``name`` still unsettled (see entry.py)."""

    def rule(value: Any) -> object:
        pipeline_context.resolve(name, value, emulator=False)
        return check(value)

    return rule


def _env_names(env: Mapping[str, str]) -> None:
    # Checked here, not only on the job: pools of worker_pool_specs that bring their own code get
    # this env too, and the job's field would then name their pool instead of this input.
    for key in env:
        if not vertex.is_env_name(key):
            raise vertex.InvalidValueError(
                f"{vertex.show(key)} is not an environment variable name: letters, digits and "
                "'_', not starting with a digit"
            )


def _accelerator(name: str) -> None:
    if name:
        vertex.check_accelerator_type(name)


def _timeout(value: Any) -> None:
    vertex.parse_duration(value, allow_zero=False)


@dataclass
class JobInputs:
    """The launch inputs that shape the CustomJob (everything but the recovery policy).

    One field per input, each a row of the input table (:func:`launch_input`). ``project``,
    ``location`` and ``persistent_resource_id`` default, as in GCPC, to the pipeline's (GCPC's
    placeholders, filled in by Vertex AI Pipelines; entry.py settles them before a job is built).
    """

    project: str = launch_input(
        Kind.TEXT, PROJECT_ID_PLACEHOLDER, rule=_settled("project", vertex.check_project_id)
    )
    location: str = launch_input(
        Kind.TEXT, LOCATION_PLACEHOLDER, rule=_settled("location", vertex.check_region)
    )
    display_name: str = launch_input(
        Kind.TEXT, "kfp-spot-training", fields=("displayName",), direct=True
    )
    package_uris: Sequence[str] = launch_input(
        Kind.ARTIFACT,
        (),
        fields=(f"{POOL}.pythonPackageSpec", f"{POOL}.pythonPackageSpec.packageUris"),
        artifact="package",
    )
    python_module: str = launch_input(
        Kind.TEXT, "", fields=(f"{POOL}.pythonPackageSpec.pythonModule",)
    )
    container_image_uri: str = launch_input(
        Kind.TEXT, "", fields=(f"{POOL}.containerSpec", f"{POOL}.containerSpec.imageUri")
    )
    command: Sequence[str] = launch_input(Kind.ARGV, (), fields=(f"{POOL}.containerSpec.command",))
    executor_image_uri: str = launch_input(
        Kind.TEXT, DEFAULT_EXECUTOR_IMAGE, fields=(f"{POOL}.pythonPackageSpec.executorImageUri",)
    )
    args: Sequence[str] = launch_input(
        Kind.ARGV, (), fields=(f"{POOL}.containerSpec.args", f"{POOL}.pythonPackageSpec.args")
    )
    env: Mapping[str, str] = launch_input(
        Kind.TEXT_MAP,
        fields=(f"{POOL}.containerSpec.env", f"{POOL}.pythonPackageSpec.env"),
        rule=_env_names,
        factory=dict,
    )
    machine_type: str = launch_input(
        Kind.TEXT,
        "n1-standard-4",
        fields=(
            f"{POOL}.machineSpec.machineType",
            POOL,
            f"{POOL}.machineSpec",
            f"{POOL}.machineSpec.tpuTopology",
        ),
        direct=True,
    )
    accelerator_type: str = launch_input(
        Kind.TEXT,
        "",
        fields=(f"{POOL}.machineSpec.acceleratorType",),
        direct=True,
        rule=_accelerator,
    )
    accelerator_count: int = launch_input(  # a count without a type is refused on the job
        Kind.INT32, 0, fields=(f"{POOL}.machineSpec.acceleratorCount",), direct=True
    )
    replica_count: int = launch_input(
        Kind.INT32, 1, fields=(f"{POOL}.replicaCount", "jobSpec.workerPoolSpecs")
    )
    boot_disk_type: str = launch_input(  # GCPC's (and Vertex's) default
        Kind.TEXT,
        "pd-ssd",
        fields=(f"{POOL}.diskSpec.bootDiskType", f"{POOL}.diskSpec"),
        direct=True,
    )
    boot_disk_size_gb: int = launch_input(
        Kind.INT32, 100, fields=(f"{POOL}.diskSpec.bootDiskSizeGb",), direct=True
    )
    worker_pool_specs: Sequence[Mapping[str, Any]] = launch_input(Kind.OBJECTS, ())
    base_output_directory: str = launch_input(
        Kind.TEXT,
        "",
        fields=("jobSpec.baseOutputDirectory.outputUriPrefix", "jobSpec.baseOutputDirectory"),
        direct=True,
    )
    service_account: str = launch_input(
        Kind.TEXT, "", fields=("jobSpec.serviceAccount",), direct=True
    )
    network: str = launch_input(Kind.TEXT, "", fields=("jobSpec.network",), direct=True)
    labels: Mapping[str, str] = launch_input(Kind.TEXT_MAP, fields=("labels",), factory=dict)
    timeout: str = launch_input(
        Kind.DURATION,
        DEFAULT_TIMEOUT,
        fields=("jobSpec.scheduling.timeout", "jobSpec.scheduling"),
        rule=_timeout,
    )
    restart_job_on_worker_restart: bool = launch_input(
        Kind.BOOLEAN, False, fields=("jobSpec.scheduling.restartJobOnWorkerRestart",)
    )
    disable_retries: bool = launch_input(
        Kind.BOOLEAN, False, fields=("jobSpec.scheduling.disableRetries",)
    )
    max_wait_duration: str = launch_input(
        Kind.DURATION,
        DEFAULT_MAX_WAIT,
        fields=("jobSpec.scheduling.maxWaitDuration",),
        rule=vertex.parse_duration,
    )
    # GCPC's CustomTrainingJobOp inputs, with its names and defaults.
    tensorboard: str = launch_input(Kind.TEXT, "", fields=("jobSpec.tensorboard",), direct=True)
    enable_web_access: bool = launch_input(
        Kind.BOOLEAN, False, fields=("jobSpec.enableWebAccess",), direct=True
    )
    reserved_ip_ranges: Sequence[str] = launch_input(
        Kind.STRINGS, (), fields=("jobSpec.reservedIpRanges",), direct=True
    )
    encryption_spec_key_name: str = launch_input(
        Kind.TEXT,
        "",
        fields=("encryptionSpec.kmsKeyName", "encryptionSpec"),
        direct=True,
    )
    persistent_resource_id: str = launch_input(
        Kind.TEXT,
        PERSISTENT_RESOURCE_ID_PLACEHOLDER,
        fields=("jobSpec.persistentResourceId",),
        direct=True,
    )
    psc_interface_config: Mapping[str, Any] = launch_input(
        Kind.OBJECT, fields=("jobSpec.pscInterfaceConfig",), factory=dict
    )


def _rows() -> tuple[InputRow, ...]:
    rows = []
    for f in dataclasses.fields(JobInputs):
        kind, fields, direct, rule, artifact = f.metadata[_ROW]
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        rows.append(InputRow(f.name, kind, default, fields, direct, rule, artifact))
    return tuple(rows)


ROWS = _rows()  # the input table, in the component's order of JobInputs


def read_job_inputs(read: InputReader, **settled: Any) -> JobInputs:
    """The job inputs of one component call, each read by its row's kind.

    Args:
        read: the component's reader (its inputs, defaults and error type).
        settled: values the caller worked out itself (placeholders settled, the package
            artifact's URIs, a derived base directory); every :data:`Kind.ARTIFACT` row needs one.

    Raises:
        LaunchInputError: naming the first input of the wrong type.
    """
    unknown = set(settled) - {row.name for row in ROWS}
    if unknown:
        raise TypeError(f"not job inputs: {', '.join(sorted(unknown))}")
    values = {
        row.name: settled[row.name] if row.name in settled else _read(read, row.name, row.kind)
        for row in ROWS
    }
    return JobInputs(**values)


def check_inputs(inputs: JobInputs) -> None:
    """Each row's rule on its value, then the rules that tie inputs together.

    The values' types are the reader's concern (:func:`read_job_inputs`); what is about the
    service's view of the built job (machine types, disks, display name, labels, package limits,
    ...) is checked on that job by :func:`kfp_spot.vertex.validate_for_submission` and reported
    against the input that set the field (:func:`input_for_field`).

    Raises:
        LaunchInputError: on the first bad input.
    """
    for row in ROWS:
        value = getattr(inputs, row.name)
        checked(row.name, vertex.check_text, value)
        if row.rule is not None:
            checked(row.name, row.rule, value)
    if inputs.command and not inputs.container_image_uri:
        raise LaunchInputError(
            "command", "applies to custom containers only; set container_image_uri too"
        )
    if inputs.encryption_spec_key_name:
        key_region = checked(
            "encryption_spec_key_name", vertex.check_kms_key_name, inputs.encryption_spec_key_name
        )
        if key_region != inputs.location:
            raise LaunchInputError(
                "encryption_spec_key_name",
                f"the key is in {key_region!r} but the job runs in {inputs.location!r}: Vertex AI "
                "needs a key in the job's own region",
            )
    if inputs.worker_pool_specs:
        return  # pools are checked as they are parsed, then as part of the job
    if inputs.container_image_uri and inputs.package_uris:
        raise LaunchInputError(
            "container_image_uri",
            "set either container_image_uri (a custom container) or a package (a Python package "
            "on a prebuilt container), not both",
        )
    if inputs.container_image_uri and inputs.python_module:
        raise LaunchInputError(
            "python_module",
            "applies to a Python package only; a custom container (container_image_uri) runs its "
            "image's entrypoint or `command`: set command instead",
        )
    if not inputs.container_image_uri:
        if not inputs.package_uris:
            raise LaunchInputError(
                "package",
                "no training code: connect a package artifact (from prepare_package) or set "
                "container_image_uri",
            )
        if not inputs.python_module:
            raise LaunchInputError(
                "python_module",
                "is empty: set it to a dotted module name like 'trainer.task', or use a package "
                "artifact whose metadata has python_module",
            )
    if inputs.replica_count < 1:
        raise LaunchInputError(
            "replica_count",
            f"must be >= 1 (one chief, the rest workers), got {inputs.replica_count}",
        )


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def direct_fields(inputs: JobInputs, within: str = "") -> dict[str, Any]:
    """The simple fields of the job (or of one of its messages), as a nested snake_case dict.

    Every row marked ``direct`` with a non-empty value sets its field as it is (GCPC's launcher
    sends them so: an empty value leaves the field out, which protobuf reads as its default);
    sequences become lists.

    Args:
        inputs: the job inputs.
        within: the message whose fields to give, relative to it: ``""`` for the CustomJob (the
            pools' fields left out), :data:`POOL` for a worker pool built from the machine inputs.
    """
    job: dict[str, Any] = {}
    for row in ROWS:
        value = getattr(inputs, row.name)
        path = row.fields[0] if row.fields else ""
        if not row.direct or not value or path.startswith(POOL) != bool(within):
            continue
        if within:
            path = path.removeprefix(f"{within}.")
        *parents, leaf = (_snake(part) for part in path.split("."))
        node = job
        for part in parents:
            node = node.setdefault(part, {})
        is_list = isinstance(value, Sequence) and not isinstance(value, str)
        node[leaf] = list(value) if is_list else value
    return job


def _field_table() -> dict[str, str]:
    table: dict[str, str] = {}
    for row in ROWS:
        for path in row.fields:
            table.setdefault(path, row.input)
    return table


# Field path (indices as "[]") -> the input that sets it; the longest matching prefix wins.
FIELD_INPUTS = _field_table()
_INDEX = re.compile(r"\[\d+\]")
_POOL_PATH = re.compile(r"jobSpec\.workerPoolSpecs\[(\d+)\]\.?(.*)")
_CODE_FIELDS = ("containerSpec", "pythonPackageSpec")
_PARTS = re.compile(r"(?=[.\[])")


def _longest_prefix(path: str) -> str | None:
    parts = _PARTS.split(_INDEX.sub("[]", path))
    for n in range(len(parts), 0, -1):
        hit = FIELD_INPUTS.get("".join(parts[:n]))
        if hit is not None:
            return hit
    return None


def _has_own_code(pool: Any) -> bool:
    return isinstance(pool, Mapping) and any(
        key in pool for key in (*_CODE_FIELDS, "container_spec", "python_package_spec")
    )


def input_for_field(field_path: str, inputs: JobInputs) -> str:
    """The launch_spot_job input that set ``field_path`` of the CustomJob built from ``inputs``.

    ``jobSpec.workerPoolSpecs[0].machineSpec.machineType`` is ``machine_type``; when the user gave
    full pools it is ``worker_pool_specs[0].machineSpec.machineType``, except for the code of a
    pool the launcher filled in from the ``package`` or ``container_image_uri`` inputs. A field no
    input sets is returned as it is.
    """
    match = _POOL_PATH.fullmatch(field_path)
    if inputs.worker_pool_specs:
        if match is None and field_path.startswith("jobSpec.workerPoolSpecs"):
            return "worker_pool_specs"
        if match is not None:
            index, rest = int(match.group(1)), match.group(2)
            pools = list(inputs.worker_pool_specs)
            filled = rest.startswith(_CODE_FIELDS) and not (
                index < len(pools) and _has_own_code(pools[index])
            )
            if not filled:
                return f"worker_pool_specs[{index}]" + (f".{rest}" if rest else "")
    return _longest_prefix(field_path) or field_path
