"""Prebuilt executor images: the list kfp-spot knows, the open rule for Google's newer images
(accepted with a warning on the console), and the create-time 400 for anything else."""

import datetime
import io
import json
import urllib.error
import urllib.request

import pytest
from google.cloud import aiplatform_v1

from kfp_spot import executors
from kfp_spot.emulator import Emulator
from kfp_spot.vertex import InvalidJobSpecError, validate_custom_job
from tests.vertex_jobs import package_job

TRAINING = "docker.pkg.dev/vertex-ai/training"


@pytest.mark.parametrize("region", ["us", "europe", "asia"])
@pytest.mark.parametrize("suffix", [":latest", ""])
def test_every_region_and_the_latest_tag_are_accepted(region, suffix):
    found = executors.profile(f"{region}-{TRAINING}/sklearn-cpu.1-6{suffix}")
    assert found.image == "sklearn-cpu.1-6"
    assert found.python == "3.10" and found.framework == "scikit-learn"
    assert "scikit-learn==1.6.1" in found.packages and "numpy==1.26.4" in found.packages


def test_profiles_cover_the_documented_families():
    profiles = executors.profiles()
    assert executors.profile(executors.DEFAULT_EXECUTOR_IMAGE).image in profiles
    for image in (
        "tf-cpu.2-17.py310",
        "tf-gpu.2-15.py310",
        "tf-tpu.2-15.cp310",
        "pytorch-xla.2-4.py310",
        "pytorch-gpu.2-4.py310",
        "pytorch-cpu.1-4",
        "sklearn-cpu.1-0",
        "xgboost-cpu.2-1",
        "scikit-learn-cpu.0-23",
    ):
        assert image in profiles, image
    for found in profiles.values():
        assert found.python in {"3.7", "3.8", "3.10"}, found
        assert found.packages, found
        assert {"pip", "setuptools", "wheel"} <= set(found.package_names)
    assert profiles["tf-cpu.2-17.py310"].package_names[0] == "tensorflow"
    assert "torch" in profiles["pytorch-xla.2-4.py310"].package_names
    assert "scikit-learn" not in profiles["pytorch-xla.2-3.py310"].package_names


def test_end_of_availability_is_recorded():
    sklearn = executors.profiles()["sklearn-cpu.1-6"]
    assert sklearn.end_of_availability == datetime.date(2026, 7, 11)
    assert not sklearn.past_availability(datetime.date(2026, 7, 11))
    assert sklearn.past_availability(datetime.date(2026, 7, 12))


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("", r"is required: a prebuilt training image such as"),
        (
            f"us-{TRAINING}/tf-cpu.nightly",
            r"'tf-cpu.nightly' is not a prebuilt training image; images of that kind: "
            r"tf-cpu.2-17.py310, .*A newer image of Google's naming .* is accepted; for any "
            r"other name set KFP_SPOT_ALLOW_UNKNOWN_EXECUTOR_IMAGE=1",
        ),
        (
            "us-docker.pkg.dev/my-project/repo/trainer:1",
            r"not a prebuilt training image \(a package job cannot run a custom image: use "
            r"containerSpec",
        ),
        ("gcr.io/cloud-aiplatform/training/tf-cpu.2-3:latest", r"not a prebuilt training image"),
        (f"us-{TRAINING}/sklearn-cpu.1-6:1.6.1", r"only with the 'latest' tag; use .*:latest"),
        (f"us-{TRAINING}/sklearn-cpu.1-6@sha256:abc", r"only with the 'latest' tag"),
        (f"us-{TRAINING}/sklearn-cpu.1-6:latest\n", r"is not an image reference"),
        ("sklearn-cpu.1-6", r"'sklearn-cpu.1-6' is not a prebuilt training image \(a package"),
        ("python:3.11", r"is not a prebuilt training image"),
    ],
)
def test_anything_else_is_refused_with_the_valid_form(uri, message):
    with pytest.raises(executors.ExecutorImageError, match=message):
        executors.profile(uri)
    assert executors.executor_image_problem(uri)


@pytest.mark.parametrize("image", ["pytorch-cpu.2-4", "pytorch-cpu.1-13.py310"])
def test_a_version_after_the_last_of_its_family_is_refused_naming_the_successors(image):
    # Google's CPU PyTorch images are pytorch-xla after pytorch-cpu.1-4: 'pytorch-cpu.2-4' reads
    # as a newer image, but Vertex AI would fail the job pulling it, after the package is staged
    uri = f"us-{TRAINING}/{image}:latest"
    with pytest.raises(
        executors.ExecutorImageError,
        match=r"no pytorch-cpu image after 1\.4.*"
        r"pytorch-xla\.2-4\.py310",
    ):
        executors.profile(uri)
    assert "pytorch-xla" in executors.executor_image_problem(uri)
    assert executors.profile(f"us-{TRAINING}/pytorch-cpu.1-4:latest").documented


@pytest.mark.parametrize(
    ("image", "framework", "python", "package"),
    [
        ("sklearn-cpu.1-7", "scikit-learn", "3.10", "scikit-learn==1.7.*"),
        ("tf-cpu.2-18.py311", "TensorFlow", "3.11", "tensorflow==2.18.*"),
        ("pytorch-xla.2-5.py311", "PyTorch", "3.11", "torch==2.5.*"),
        ("xgboost-cpu.2-2", "XGBoost", "3.10", "xgboost==2.2.*"),
        ("ray-cpu.2-47.py311", "ray", "3.11", None),
    ],
)
def test_a_newer_image_of_googles_naming_is_accepted_with_an_inferred_profile(
    image, framework, python, package
):
    uri = f"europe-{TRAINING}/{image}:latest"
    assert image not in executors.profiles()
    assert executors.executor_image_problem(uri) is None
    found = executors.profile(uri)
    assert (found.image, found.framework, found.python) == (image, framework, python)
    assert not found.documented and not found.past_availability()
    if package:
        assert found.packages[0] == package
        assert sum(p.startswith(package.split("=")[0] + "=") for p in found.packages) == 1
    validate_custom_job(_job(uri))  # the emulator's create-time rules accept it too


def test_a_newer_image_is_announced_on_the_console_once():
    uri = f"us-{TRAINING}/sklearn-cpu.1-8:latest"
    err = io.StringIO()
    notice = executors.warn_executor_image(uri, stream=err)
    assert notice and "sklearn-cpu.1-8 is not in kfp-spot's table" in notice
    assert "Vertex AI will judge it" in notice and "Python 3.10" in notice
    assert err.getvalue() == f"kfp-spot: warning: {notice}\n"
    executors.warn_executor_image(uri, stream=err)
    assert err.getvalue().count("kfp-spot: warning:") == 1


def test_the_end_of_availability_is_announced_before_and_after_it():
    uri = f"us-{TRAINING}/sklearn-cpu.1-6:latest"
    notice = executors.executor_image_notice
    assert notice(uri, datetime.date(2026, 1, 1)) is None
    assert "reaches its documented end of availability on 2026-07-11 (41 days)" in notice(
        uri, datetime.date(2026, 5, 31)
    )
    after = notice(uri, datetime.date(2026, 7, 12))
    assert "reached its documented end of availability on 2026-07-11" in after
    assert "pre-built-containers" in after
    assert notice("python:3.11") is None  # refused, not warned about


def test_any_name_in_googles_repository_is_accepted_when_the_user_says_so(monkeypatch):
    uri = f"us-{TRAINING}/custom-trainer:latest"
    assert executors.executor_image_problem(uri)
    monkeypatch.setenv(executors.ALLOW_UNKNOWN_ENV, "1")
    assert executors.executor_image_problem(uri) is None
    assert "custom-trainer is not in kfp-spot's table" in executors.executor_image_notice(uri)
    # Still only Google's prebuilt repository: a package job cannot run a custom image.
    assert executors.executor_image_problem("us-docker.pkg.dev/p/r/trainer:1")
    monkeypatch.setenv(executors.ALLOW_UNKNOWN_ENV, "0")
    assert executors.executor_image_problem(uri)


def _job(image: str) -> aiplatform_v1.CustomJob:
    return package_job(
        ["gs://bucket/trainer-0.1.tar.gz"],
        "trainer.task",
        image=image,
        display_name="bad-image",
        spot=False,
    )


def test_the_rules_refuse_an_image_outside_the_list():
    validate_custom_job(_job(executors.DEFAULT_EXECUTOR_IMAGE))
    with pytest.raises(InvalidJobSpecError) as caught:
        validate_custom_job(_job("us-docker.pkg.dev/my-project/repo/trainer:1"))
    assert caught.value.field == "jobSpec.workerPoolSpecs[0].pythonPackageSpec.executorImageUri"


def test_the_emulator_answers_400_naming_the_field(tmp_path):
    body = aiplatform_v1.CustomJob.to_json(_job(f"us-{TRAINING}/tf-cpu.nightly:latest"))
    with Emulator(tmp_path / "state") as emu:
        request = urllib.request.Request(
            f"{emu.endpoint}/v1/projects/local-project/locations/us-central1/customJobs",
            data=body.encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=30)
        assert emu.list_jobs() == []
    assert caught.value.code == 400
    error = json.loads(caught.value.read())["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    # Vertex names the field by its snake_case request path, in the message and the violation.
    field = "job_spec.worker_pool_specs[0].python_package_spec.executor_image_uri"
    assert field in error["message"]
    violations = error["details"][0]["fieldViolations"]
    assert [v["field"] for v in violations] == [field]
    assert "'tf-cpu.nightly' is not a prebuilt training image" in error["message"]


def test_the_launcher_submits_a_newer_image_and_says_so_on_stderr(capsys):
    from kfp_spot.jobs.spec import JobInputs, build_custom_job

    image = f"us-{TRAINING}/xgboost-cpu.2-3.py311:latest"
    job = build_custom_job(
        JobInputs(
            project="test-proj",
            location="us-central1",
            package_uris=["gs://bucket/trainer-0.1.tar.gz"],
            python_module="trainer.task",
            base_output_directory="gs://bucket/run",
            executor_image_uri=image,
        )
    )
    (pool,) = job.job_spec.worker_pool_specs
    assert pool.python_package_spec.executor_image_uri == image
    err = capsys.readouterr().err
    assert "kfp-spot: warning: executor image xgboost-cpu.2-3.py311 is not in" in err
