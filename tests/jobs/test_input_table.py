"""The launch input table (kfp_spot.jobs.inputs) is the one place a job input is declared.

These tests fail when the table and the component drift apart (an input without a row, a row
without an input, a row read as another type than the signature declares), when a row names a
CustomJob field that does not exist or that another row already claims, and when a row the job
builder copies as it is does not reach its field.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from google.cloud.aiplatform_v1.types import CustomJob

from kfp_spot.components.launch_spot_job import component as launch_component
from kfp_spot.jobs.entry import FAIL_ON_INCOMPLETE, INPUT_DEFAULTS
from kfp_spot.jobs.inputs import FIELD_INPUTS, ROWS, JobInputs, Kind, input_for_field
from kfp_spot.jobs.launcher import LaunchRequest
from kfp_spot.jobs.recovery import RecoveryPolicy
from kfp_spot.jobs.spec import build_custom_job

# The component's outputs and the artifacts that are not job inputs.
NOT_JOB_INPUTS = {"checkpoint", "model", "job_report", "gcp_resources", "resume_from"}
# What each kind reads, as the component's signature declares it.
SIGNATURE_TYPES = {
    Kind.TEXT: str,
    Kind.DURATION: str,
    Kind.INT32: int,
    Kind.BOOLEAN: bool,
    Kind.ARGV: list,
    Kind.STRINGS: list,
    Kind.OBJECTS: list,
    Kind.TEXT_MAP: dict,
    Kind.OBJECT: dict,
}


def _signature() -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(launch_component.launch_spot_job.python_func).parameters)


def test_every_component_input_is_a_row_or_a_launch_setting():
    launch_settings = {f.name for f in dataclasses.fields(RecoveryPolicy)}
    launch_settings |= {
        "api_endpoint",
        "poll_interval_seconds",
        "region_buckets",
        "fail_on_incomplete",
    }
    rows = {row.input for row in ROWS}
    assert rows.isdisjoint(launch_settings)
    assert set(_signature()) - NOT_JOB_INPUTS == rows | launch_settings
    assert FAIL_ON_INCOMPLETE is INPUT_DEFAULTS["fail_on_incomplete"]
    assert {"api_endpoint", "poll_interval_seconds", "region_buckets"} <= {
        f.name for f in dataclasses.fields(LaunchRequest)
    }


@pytest.mark.parametrize(
    "row", [r for r in ROWS if r.kind is not Kind.ARTIFACT], ids=lambda row: row.name
)
def test_each_row_is_read_as_the_type_the_signature_declares(row):
    parameter = _signature()[row.name]
    assert parameter.annotation in (SIGNATURE_TYPES[row.kind].__name__, SIGNATURE_TYPES[row.kind])
    # The table keeps list defaults as tuples (immutable); the signature declares them as lists.
    default = list(row.default) if isinstance(row.default, tuple) else row.default
    assert parameter.default == default


def test_artifact_rows_come_from_an_input_artifact():
    artifacts = [row for row in ROWS if row.kind is Kind.ARTIFACT]
    assert artifacts, "package_uris comes from the package artifact"
    for row in artifacts:
        annotation = str(_signature()[row.input].annotation)
        assert "Artifact" in annotation and "InputAnnotation" in annotation


def _field_exists(path: str) -> bool:
    """Whether ``path`` (camelCase, ``[]`` for an index) is a field of CustomJob."""
    descriptor = CustomJob.pb().DESCRIPTOR
    for part in path.replace("[]", "").split("."):
        if descriptor is None:
            return False
        field = next((f for f in descriptor.fields if f.json_name == part), None)
        if field is None:
            return False
        descriptor = field.message_type
    return True


@pytest.mark.parametrize("path", sorted(FIELD_INPUTS))
def test_each_field_a_row_names_is_a_customjob_field(path):
    assert _field_exists(path), path


def test_no_field_is_claimed_by_two_rows():
    claims: dict[str, list[str]] = {}
    for row in ROWS:
        for path in row.fields:
            claims.setdefault(path, []).append(row.input)
    assert {path: names for path, names in claims.items() if len(names) > 1} == {}


@pytest.mark.parametrize(("path", "name"), sorted(FIELD_INPUTS.items()))
def test_a_field_of_a_built_job_names_the_row_that_set_it(path, name):
    concrete = path.replace("[]", "[0]")
    assert input_for_field(concrete, JobInputs()) == name
    assert input_for_field(f"{concrete}.someSubfield", JobInputs()) == name


# A value for every row the builder copies as it is, valid on Vertex AI, with the other inputs
# it needs.
T4 = {"accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 1}
DIRECT_VALUES: dict[str, tuple[object, dict[str, object]]] = {
    "display_name": ("nightly", {}),
    "base_output_directory": ("gs://bucket/run", {}),
    "service_account": ("sa@test-proj.iam.gserviceaccount.com", {}),
    "network": ("projects/123/global/networks/vpc", {}),
    "tensorboard": (
        "projects/test-proj/locations/us-central1/tensorboards/7",
        {"service_account": "sa@test-proj.iam.gserviceaccount.com"},
    ),
    "enable_web_access": (True, {}),
    "reserved_ip_ranges": (["vertex-ai-ip-range"], {}),
    "encryption_spec_key_name": (
        "projects/test-proj/locations/us-central1/keyRings/r/cryptoKeys/k",
        {},
    ),
    "persistent_resource_id": ("training-cluster", {}),
    "machine_type": ("n1-highmem-8", {}),
    "accelerator_type": ("NVIDIA_TESLA_T4", T4),
    "accelerator_count": (2, T4),
    "boot_disk_type": ("pd-standard", {}),
    "boot_disk_size_gb": (250, {}),
}


def test_every_direct_row_has_a_value_here():
    assert {row.name for row in ROWS if row.direct} == set(DIRECT_VALUES)


@pytest.mark.parametrize("name", sorted(DIRECT_VALUES))
def test_a_direct_row_reaches_its_field_as_it_is(name):
    value, needs = DIRECT_VALUES[name]
    given = {
        "project": "test-proj",
        "location": "us-central1",
        "package_uris": ["gs://bucket/trainer-0.1.tar.gz"],
        "python_module": "trainer.task",
        "replica_count": 3,
        **needs,
        name: value,
    }
    job = build_custom_job(JobInputs(**given))
    (row,) = [r for r in ROWS if r.name == name]
    nodes = [CustomJob.to_dict(job, use_integers_for_enums=False)]
    for part in row.fields[0].split("."):
        key = _snake(part.removesuffix("[]"))
        nodes = [node[key] for node in nodes]
        if part.endswith("[]"):  # every pool built from the machine inputs
            nodes = [item for node in nodes for item in node]
    assert nodes and all(node == value for node in nodes), nodes


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
