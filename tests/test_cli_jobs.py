"""`kfp-spot jobs list|describe` against the emulator through the real JobServiceClient."""

import json

import pytest
from click.testing import CliRunner

from kfp_spot.cli import main
from kfp_spot.emulator import Emulator
from kfp_spot.jobs.client import make_job_client, resolve_endpoint
from kfp_spot.jobs.spec import JobInputs, build_custom_job

PARENT = "projects/cli-project/locations/us-central1"


@pytest.fixture
def emulator_with_job(tmp_path):
    with Emulator(tmp_path / "state", grace_period=1.0) as emu:
        client = make_job_client(resolve_endpoint("us-central1", emu.endpoint))
        job = build_custom_job(
            JobInputs(
                project="cli-project",
                location="us-central1",
                display_name="listed-job",
                package_uris=[str(tmp_path / "missing.tar.gz")],
                python_module="trainer.task",
            )
        )
        created = client.create_custom_job(parent=PARENT, custom_job=job)
        yield emu, created.name


def test_list_and_describe_show_the_spot_job(emulator_with_job):
    emu, name = emulator_with_job
    runner = CliRunner()
    listed = runner.invoke(
        main, ["jobs", "list", "--project", "cli-project", "--api-endpoint", emu.endpoint]
    )
    assert listed.exit_code == 0, listed.output
    (line,) = listed.output.strip().splitlines()
    assert line.startswith(name + "\t")
    assert "\tSPOT\tlisted-job" in line
    described = runner.invoke(main, ["jobs", "describe", name, "--api-endpoint", emu.endpoint])
    assert described.exit_code == 0, described.output
    doc = json.loads(described.output)
    assert doc["name"] == name
    assert doc["jobSpec"]["scheduling"]["strategy"] == "SPOT"


def test_describe_rejects_a_malformed_name_with_exit_2():
    result = CliRunner().invoke(main, ["jobs", "describe", "customJobs/1"])
    assert result.exit_code == 2
    assert "projects/PROJECT/locations/LOCATION/customJobs/ID" in result.output


def test_describe_of_an_unknown_job_is_one_clear_error(emulator_with_job):
    emu, name = emulator_with_job
    missing = name.rsplit("/", 1)[0] + "/999"
    result = CliRunner().invoke(main, ["jobs", "describe", missing, "--api-endpoint", emu.endpoint])
    assert result.exit_code == 1
    assert "NOT_FOUND" in result.output
