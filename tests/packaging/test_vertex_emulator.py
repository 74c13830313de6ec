"""A package staged to gs:// (local GCS emulator) is installed and run by the Vertex emulator."""

import json
import uuid

from kfp_spot.emulator import Emulator
from kfp_spot.packaging import prepare_package
from tests.conftest import TEST_BUCKET
from tests.packaging.tiny import write_project
from tests.vertex_jobs import job_client, package_job

TASK = """\
import json
import os
import sys

os.makedirs(os.environ["AIP_MODEL_DIR"], exist_ok=True)
with open(os.path.join(os.environ["AIP_MODEL_DIR"], "ran.json"), "w") as handle:
    json.dump({"args": sys.argv[1:], "module": __spec__.name}, handle)
"""


def test_gs_staged_package_runs_as_a_spot_custom_job(gcs_emulator, tmp_path, env_cache):
    project = write_project(tmp_path / "src", task=TASK)
    staging = f"gs://{TEST_BUCKET}/vertex-{uuid.uuid4().hex[:8]}/staging"
    info = prepare_package(str(project), staging)
    assert info.uri.startswith("gs://")
    base = tmp_path / "job"
    with Emulator(tmp_path / "emulator", env_cache_dir=env_cache) as emu:
        job = job_client(emu.endpoint).create_custom_job(
            parent="projects/local-project/locations/us-central1",
            custom_job=package_job(
                info.package_uris,
                info.python_module,
                image="us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-0:latest",
                base=base,
                args=["--epochs", "1"],
                display_name="staged-package",
            ),
        )
        done = emu.wait(job.name, timeout=120)
        assert done.state.name == "JOB_STATE_SUCCEEDED", done.error
    ran = json.loads((base / "model" / "ran.json").read_text())
    assert ran == {"args": ["--epochs", "1"], "module": "tinytrainer.task"}
