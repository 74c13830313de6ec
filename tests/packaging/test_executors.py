"""Prebuilt executor images: the list Vertex AI accepts, and the create-time 400 for any other."""

import datetime
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
            f"us-{TRAINING}/tf-cpu.2-17",
            r"'tf-cpu.2-17' is not a prebuilt training image; images of that kind: "
            r"tf-cpu.2-17.py310",
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
    body = aiplatform_v1.CustomJob.to_json(_job(f"us-{TRAINING}/tf-cpu.2-99.py310:latest"))
    with Emulator(tmp_path / "state") as emu:
        request = urllib.request.Request(
            f"{emu.endpoint}/v1/projects/p/locations/us-central1/customJobs",
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
    assert "'tf-cpu.2-99.py310' is not a prebuilt training image" in error["message"]
