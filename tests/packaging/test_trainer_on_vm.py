"""The trainer reaches the VM: a package job gets only its image's libraries and its package URIs.

The example trainer, staged by prepare_package, trains in the environment of its executor image
with no help from this machine's site-packages; a job importing what neither provides fails on the
emulator as it would on Vertex AI.

The packages are built through the run's build cache (:mod:`tests.prepare`): what is tested here
is where they run, and a source another test of the run builds too is then built once.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import kfp_spot
from kfp_spot import envcache, executors, fs
from kfp_spot.emulator import Emulator
from tests.packaging.tiny import write_project
from tests.prepare import prepare_package
from tests.vertex_jobs import job_client, package_job

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trainer"
IMAGE = executors.DEFAULT_EXECUTOR_IMAGE


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    root = tmp_path_factory.mktemp("example-vm")
    return prepare_package(str(EXAMPLE), str(root / "stage"), check_import=True)


def test_example_ships_the_light_wheel_and_passes_the_image_import_check(example):
    assert example.import_checked
    assert len(example.package_uris) == 2
    assert example.package_uris[1] == example.kfp_spot_uri
    assert Path(example.kfp_spot_uri).name == (
        f"kfp_spot_trainer-{kfp_spot.__version__}-py3-none-any.whl"
    )


@pytest.fixture(scope="module")
def emulated(example, tmp_path_factory, env_cache):
    """Two jobs on the emulator: a package importing kfp, which is installed on this machine
    (kfp-spot needs it) but in no training image, and the example trainer for two epochs. The
    resume test continues that training: one first training for both tests.

    Returns:
        The failed job, the succeeded one, the failed job's log and the example's base output
        directory.
    """
    tmp = tmp_path_factory.mktemp("emulated")
    leaky = prepare_package(
        str(write_project(tmp / "src", task="import kfp_spot.trainer\nimport kfp\n")),
        str(tmp / "stage"),
    )
    with Emulator(tmp / "emulator", env_cache_dir=env_cache) as emu:
        client = job_client(emu.endpoint)
        parent = "projects/local-project/locations/us-central1"
        bad = client.create_custom_job(
            parent=parent,
            custom_job=package_job(leaky.package_uris, leaky.python_module, base=tmp / "bad"),
        )
        good = client.create_custom_job(
            parent=parent,
            custom_job=package_job(
                example.package_uris,
                example.python_module,
                base=tmp / "good",
                args=["--epochs", "2", "--checkpoint-every", "1"],
            ),
        )
        failed = emu.wait(bad.name, timeout=300)
        succeeded = emu.wait(good.name, timeout=300)
        log_text = "".join(entry["text"] for entry in emu.logs(bad.name))
    return failed, succeeded, log_text, tmp / "good"


def test_example_trains_and_resumes_without_the_hosts_site_packages(
    example, emulated, tmp_path, env_cache
):
    python = envcache.package_env(list(example.package_uris), env_cache, executor_image_uri=IMAGE)
    env_dir = python.parents[1]
    probe = (
        "import json, importlib.util, kfp_spot, kfp_spot.trainer\n"
        "print(json.dumps({'file': kfp_spot.__file__, 'version': kfp_spot.__version__,"
        " 'kfp': importlib.util.find_spec('kfp') is not None,"
        " 'evaluation': importlib.util.find_spec('kfp_spot.evaluation') is not None}))"
    )
    seen = json.loads(
        subprocess.run(
            [str(python), "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path
        ).stdout
    )
    assert Path(seen["file"]).is_relative_to(env_dir)  # the light wheel's copy, not the host's
    assert seen["version"] == kfp_spot.__version__
    assert not seen["kfp"] and not seen["evaluation"]

    # The first two epochs: the emulator's job, in the environment of the same image.
    _, first, _, trained = emulated
    assert first.state.name == "JOB_STATE_SUCCEEDED", first.error
    shutil.copytree(trained, tmp_path / "base")  # continued here: the fixture's stays as it was
    env = dict(
        os.environ,
        AIP_CHECKPOINT_DIR=str(tmp_path / "base" / "checkpoints"),
        AIP_MODEL_DIR=str(tmp_path / "base" / "model"),
    )
    cmd = [str(python), "-m", example.python_module, "--checkpoint-every", "1"]
    again = subprocess.run(
        [*cmd, "--epochs", "3"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr
    assert "resuming from step 2" in again.stdout
    model = json.loads((tmp_path / "base" / "model" / "model.json").read_text())
    assert model["steps"] == 3


def test_on_the_emulator_a_missing_module_fails_the_job_and_the_example_succeeds(emulated):
    failed, succeeded, log_text, trained = emulated
    assert failed.state.name == "JOB_STATE_FAILED"
    assert "exited with a non-zero status of 1" in failed.error.message
    assert "ModuleNotFoundError: No module named 'kfp'" in log_text
    assert succeeded.state.name == "JOB_STATE_SUCCEEDED", succeeded.error
    assert (trained / "model" / "model.npz").is_file()


def test_mounted_path_maps_gs_uris_where_the_bucket_is_mounted(tmp_path):
    mount = tmp_path / "gcs"
    (mount / "my-bucket").mkdir(parents=True)
    assert fs.mounted_path("gs://my-bucket/run/checkpoints", str(mount)) == str(
        mount / "my-bucket" / "run" / "checkpoints"
    )
    assert fs.mounted_path("gs://my-bucket", str(mount)) == str(mount / "my-bucket")
    # Not mounted, not gs://, or a name FUSE would resolve elsewhere: unchanged.
    assert fs.mounted_path("gs://other-bucket/x", str(mount)) == "gs://other-bucket/x"
    assert fs.mounted_path("/local/dir", str(mount)) == "/local/dir"
    assert fs.mounted_path("gs://my-bucket/../etc", str(mount)) == "gs://my-bucket/../etc"
    assert fs.mounted_path("gs://x", str(tmp_path / "no-mount")) == "gs://x"
