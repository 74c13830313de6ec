"""A package staged to gs:// (GCS emulator) is installed and run by the Vertex emulator."""

import pytest

from kfp_spot import checkpoints
from kfp_spot.emulator import Emulator
from kfp_spot.jobs.client import make_job_client, resolve_endpoint
from kfp_spot.jobs.spec import JobInputs, build_custom_job
from kfp_spot.packaging import prepare_package
from kfp_spot.pipelines.local_run import EXAMPLE_SOURCE

pytestmark = pytest.mark.slow


def test_gs_staged_example_trains_on_the_emulator(gcs_emulator, tmp_path):
    info = prepare_package(
        str(EXAMPLE_SOURCE), "gs://kfp-spot-test/staging", cache_dir=tmp_path / "cache"
    )
    assert info.uri.startswith("gs://kfp-spot-test/staging/")
    base = tmp_path / "job"
    with Emulator(tmp_path / "state", grace_period=2.0) as emu:
        client = make_job_client(resolve_endpoint("us-central1", emu.endpoint))
        job = client.create_custom_job(
            parent="projects/gcs-project/locations/us-central1",
            custom_job=build_custom_job(
                JobInputs(
                    project="gcs-project",
                    display_name="from-gcs",
                    package_uris=info.package_uris,
                    python_module=info.python_module,
                    args=["--epochs", "2", "--checkpoint-every", "1"],
                    base_output_directory=str(base),
                )
            ),
        )
        finished = emu.wait(job.name, timeout=300)
        assert finished.state.name == "JOB_STATE_SUCCEEDED", finished.error.message
    latest = checkpoints.latest(str(base / "checkpoints"))
    assert latest is not None and latest.step == 2
