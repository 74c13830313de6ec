"""Where a job writes, and where the local emulator's rules differ from Vertex AI's (Target)."""

from __future__ import annotations

import pytest
from google.cloud.aiplatform_v1.types import (
    CustomJob,
    GcsDestination,
    PscInterfaceConfig,
)
from hypothesis import given
from hypothesis import strategies as st

from kfp_spot.vertex import (
    EMULATOR,
    VERTEX_AI,
    InvalidJobSpecError,
    InvalidValueError,
    check_bucket,
    check_output_uri,
    check_package_uri,
    normalize_output_uri,
    service_uri,
    to_service_uris,
    validate_custom_job,
    validate_for_submission,
)
from kfp_spot.vertex.storage import check_gcs_uri
from tests.emulator.test_validation import job


@pytest.mark.parametrize(
    ("given_uri", "sent"),
    [
        ("gs://my-bucket/runs/1", "gs://my-bucket/runs/1"),
        ("/gcs/my-bucket/runs/1", "gs://my-bucket/runs/1"),  # Vertex Pipelines' FUSE mount
        ("/gcs/my-bucket", "gs://my-bucket"),
        ("/tmp/out/../job", "/tmp/job"),  # absolute local: the emulator decides (below)
        ("file:///tmp/job", "/tmp/job"),
    ],
)
def test_output_uris_are_normalised_for_the_service(given_uri, sent):
    assert normalize_output_uri(given_uri) == sent


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("out/run", "relative path"),
        ("./run", "relative path"),
        ("s3://bucket/run", "not a Cloud Storage location"),
        ("gs://Bucket/run", "bucket name"),
        ("gs:///abs/path", "names no bucket"),
        ("/gcs/", "names no bucket"),
        ("file://relative", "absolute path"),
    ],
)
def test_other_output_uris_are_refused_with_the_valid_form(bad, why):
    with pytest.raises(InvalidValueError, match=why) as info:
        normalize_output_uri(bad)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "uri", ["/tmp/job", "file:///tmp/job", "gs:///tmp/job", "gs://my-bucket/job"]
)
def test_the_emulator_takes_local_paths(uri):
    check_output_uri(uri, local_paths=True)


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("/tmp/job", "a local path: Vertex AI writes to Cloud Storage only"),
        ("file:///tmp/job", "a local path"),
        ("gs:///tmp/job", "names no bucket"),
        ("/gcs/my-bucket/job", "'gs://my-bucket/job'"),
        ("job", "not a Cloud Storage URI"),
    ],
)
def test_vertex_ai_takes_cloud_storage_only(uri, why):
    check_output_uri("gs://my-bucket/job", local_paths=False)
    with pytest.raises(InvalidValueError, match=why):
        check_output_uri(uri, local_paths=False)


@pytest.mark.parametrize(
    "uri", ["gs://my-bucket/run\r", "gs://my-bucket/a\nb", "gs://my-bucket/\r\n"]
)
@pytest.mark.parametrize("local_paths", [False, True])  # the emulator takes no more than Vertex AI
def test_a_line_break_in_a_cloud_storage_uri_is_refused(uri, local_paths):
    # Object names cannot hold CR or LF; a URI read from a CRLF file (`$(cat uri.txt)`) keeps \r
    for check in (check_output_uri, check_package_uri):
        with pytest.raises(InvalidValueError, match="holds a line break, which Cloud Storage"):
            check(uri, local_paths=local_paths)
    with pytest.raises(InvalidValueError, match="holds a line break"):
        check_gcs_uri(uri)


@pytest.mark.parametrize("uri", ["/tmp/o\x00ut", "file:///tmp/pkg\x00.tar.gz", "/\x00"])
def test_a_nul_in_a_local_path_is_refused(uri):
    # No file system has such a path: the emulator accepted it, then FAILED the job as
    # "internal error in the emulator: ValueError('embedded null byte')" as its replicas started.
    for check in (check_output_uri, check_package_uri):
        with pytest.raises(InvalidValueError, match=r"holds a NUL character \(\\x00\), which no "):
            check(uri, local_paths=True)


@pytest.mark.parametrize("bucket", ["my-bucket", "a1b", "logs_2024", "example.com.data", "a" * 63])
def test_valid_bucket_names(bucket):
    check_bucket(bucket)


@pytest.mark.parametrize(
    "bucket", ["ab", "-ab", "ab-", "AB", "a" * 64, "192.168.1.1", "goog-data", "a..b", "a b"]
)
def test_invalid_bucket_names(bucket):
    with pytest.raises(InvalidValueError):
        check_bucket(bucket)


@given(st.text(max_size=80))
def test_normalising_never_fails_but_with_a_clear_refusal(text):
    try:
        out = normalize_output_uri(text)
    except InvalidValueError:
        return
    assert out.startswith(("gs://", "/"))


def _job(**spec) -> CustomJob:
    made = job()
    for name, value in spec.items():
        setattr(made.job_spec, name, value)
    return made


def test_a_local_base_is_the_emulators_extension_only():
    local = _job(base_output_directory=GcsDestination(output_uri_prefix="/tmp/run"))
    validate_custom_job(local)  # the emulator, on create
    validate_for_submission(local, EMULATOR)
    with pytest.raises(InvalidJobSpecError) as info:
        validate_for_submission(local)  # Vertex AI by default
    assert info.value.field == "jobSpec.baseOutputDirectory.outputUriPrefix"
    validate_for_submission(
        _job(base_output_directory=GcsDestination(output_uri_prefix="gs://my-bucket/run")),
        VERTEX_AI,
    )


TENSORBOARD = "projects/my-proj/locations/us-central1/tensorboards/42"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"persistent_resource_id": "training-cluster"}, "jobSpec.persistentResourceId"),
        (
            {"tensorboard": TENSORBOARD, "service_account": "sa@my-proj.iam.gserviceaccount.com"},
            "jobSpec.tensorboard",
        ),
    ],
)
def test_the_emulator_hosts_no_vertex_resources_a_job_can_name(spec, field):
    validate_for_submission(_job(**spec))  # well formed, for Vertex AI
    for check in (validate_custom_job, lambda j: validate_for_submission(j, EMULATOR)):
        with pytest.raises(InvalidJobSpecError, match="not found") as info:
            check(_job(**spec))
        assert info.value.field == field


@pytest.mark.parametrize(
    ("job", "field", "why"),
    [
        (_job(persistent_resource_id="Cluster_1"), "jobSpec.persistentResourceId", "the ID"),
        (
            _job(tensorboard="tb-1", service_account="sa@p.com"),
            "jobSpec.tensorboard",
            "tensorboards/",
        ),
        (_job(tensorboard=TENSORBOARD), "jobSpec.serviceAccount", "required"),
        (
            _job(reserved_ip_ranges=["ok-range", "10.0.0.0/8"]),
            "jobSpec.reservedIpRanges[1]",
            "name",
        ),
        # Were sent as they were: a bare network name and a service account that is no email.
        (_job(network="my-vpc"), "jobSpec.network", r"projects/PROJECT_NUMBER/global/networks/"),
        # Compute Engine names a network in lowercase letters, digits and hyphens only.
        (
            _job(network="projects/12345/global/networks/Shared_VPC"),
            "jobSpec.network",
            "full name",
        ),
        (_job(service_account="trainer"), "jobSpec.serviceAccount", r"NAME@PROJECT\.iam\."),
        (
            _job(
                psc_interface_config=PscInterfaceConfig(
                    dns_peering_configs=[{"domain": "corp.", "target_project": "p"}]
                )
            ),
            "jobSpec.pscInterfaceConfig.dnsPeeringConfigs[0].targetNetwork",
            "required",
        ),
    ],
)
def test_gcpc_fields_are_checked_on_both_targets(job, field, why):
    for check in (validate_custom_job, validate_for_submission):
        with pytest.raises(InvalidJobSpecError, match=why) as info:
            check(job)
        assert info.value.field == field


@pytest.mark.parametrize(
    "spec",
    [
        {"network": "projects/12345/global/networks/my-vpc"},
        {"network": "projects/host-project/global/networks/shared-vpc-1"},
        {"service_account": "trainer@my-proj.iam.gserviceaccount.com"},
        {"service_account": "123456789-compute@developer.gserviceaccount.com"},
    ],
)
def test_well_formed_networks_and_service_accounts_pass_on_both_targets(spec):
    validate_custom_job(_job(**spec))
    validate_for_submission(_job(**spec))


def test_an_encryption_key_is_checked_for_its_form():
    job = _job()
    job.encryption_spec.kms_key_name = (
        "projects/my-proj/locations/us-central1/keyRings/r/cryptoKeys/k"
    )
    validate_custom_job(job)  # the emulator cannot see Cloud KMS: the form is all it checks
    job.encryption_spec.kms_key_name = "my-key"
    with pytest.raises(InvalidJobSpecError) as info:
        validate_custom_job(job)
    assert info.value.field == "encryptionSpec.kmsKeyName"


@pytest.mark.parametrize(
    ("given_uri", "sent"),
    [
        ("/gcs/my-bucket/s/pkg.tar.gz", "gs://my-bucket/s/pkg.tar.gz"),
        ("file:///tmp/pkg.tar.gz", "/tmp/pkg.tar.gz"),
        ("gs://my-bucket/pkg.tar.gz", "gs://my-bucket/pkg.tar.gz"),
        ("/tmp/pkg.tar.gz", "/tmp/pkg.tar.gz"),  # the target's rules judge it (below)
        ("pkg.tar.gz", "pkg.tar.gz"),
    ],
)
def test_service_uri_only_rewrites(given_uri, sent):
    assert service_uri(given_uri) == sent


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("/tmp/pkg.tar.gz", "a local path: Vertex AI reads packages from Cloud Storage only"),
        ("file:///tmp/pkg.tar.gz", "a local path"),
        ("/gcs/my-bucket/pkg.tar.gz", "'gs://my-bucket/pkg.tar.gz'"),
        ("https://example.com/pkg.tar.gz", "not a Cloud Storage URI"),
        ("gs://Bad_Bucket/pkg.tar.gz", "bucket name"),
        ("gs://my-bucket/dist/", "names a directory"),
    ],
)
def test_vertex_ai_reads_packages_from_cloud_storage_only(uri, why):
    check_package_uri("gs://my-bucket/pkg.tar.gz", local_paths=False)
    with pytest.raises(InvalidValueError, match=why) as info:
        check_package_uri(uri, local_paths=False)
    assert "\n" not in str(info.value)


def test_the_emulator_installs_local_packages_but_not_relative_ones():
    check_package_uri("/tmp/pkg.tar.gz", local_paths=True)
    check_package_uri("file:///tmp/pkg.tar.gz", local_paths=True)
    with pytest.raises(InvalidValueError, match="not a Cloud Storage URI"):
        check_package_uri("pkg.tar.gz", local_paths=True)


def _python_job(uris: list[str], base: str = "") -> CustomJob:
    made = job()
    made.job_spec.worker_pool_specs[0].python_package_spec.package_uris[:] = uris
    if base:
        made.job_spec.base_output_directory = GcsDestination(output_uri_prefix=base)
    return made


def test_every_uri_vertex_reads_is_rewritten_then_judged_by_the_target():
    built = _python_job(["/gcs/my-bucket/s/a.tar.gz", "gs://my-bucket/b.whl"], "/gcs/my-bucket/r")
    to_service_uris(built)
    pool = built.job_spec.worker_pool_specs[0]
    assert list(pool.python_package_spec.package_uris) == [
        "gs://my-bucket/s/a.tar.gz",
        "gs://my-bucket/b.whl",
    ]
    assert built.job_spec.base_output_directory.output_uri_prefix == "gs://my-bucket/r"
    validate_for_submission(built)
    local = _python_job(["gs://my-bucket/a.tar.gz", "/tmp/b.tar.gz"])
    validate_custom_job(local)  # the emulator installs local packages
    with pytest.raises(InvalidJobSpecError) as info:
        validate_for_submission(local)
    assert info.value.field == "jobSpec.workerPoolSpecs[0].pythonPackageSpec.packageUris[1]"
    assert "local emulator's extension" in info.value.message
