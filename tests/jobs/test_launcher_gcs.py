"""gs:// everywhere, as on Vertex: base directory, checkpoints, launcher state, resume_from.

Against a local GCS emulator (gcp-storage-emulator); the job service is the recording server.
"""

from __future__ import annotations

import uuid

from artifacts import FakeArtifact
from recording_server import RecordingServer, Script

from kfp_spot import checkpoints, fs
from kfp_spot.jobs.entry import launch_spot_job

BUCKET = "gs://kfp-spot-test"
STOCKOUT = {"code": 8, "message": "STOCKOUT: restarts exhausted"}


def test_launch_on_gcs_resumes_seeds_and_reattaches(gcs_emulator, package, outputs):
    run = f"{BUCKET}/runs/{uuid.uuid4().hex}"
    base, previous = f"{run}/job", f"{run}/previous/checkpoints"
    checkpoints.write_step(previous, 12, {"weights.bin": b"\x01" * 1024})
    ours = f"{base}/checkpoints"

    def on_create(index, job):  # each job commits one more step on gs://
        checkpoints.write_step(ours, 13 + index, {"weights.bin": bytes([index]) * 1024})

    task_checkpoint_uri = outputs["checkpoint"].uri  # what KFP hands a retried task again
    exhausted = Script(["JOB_STATE_RUNNING", "JOB_STATE_FAILED"], error=STOCKOUT)
    inputs = {
        "project": "test-proj",
        "package": package,
        "base_output_directory": base,
        "resume_from": FakeArtifact(uri=previous),
        "poll_interval_seconds": 0.01,
        **outputs,
    }
    with RecordingServer(scripts=[exhausted], on_create=on_create) as server:
        assert launch_spot_job(api_endpoint=server.endpoint, **inputs) == "SUCCEEDED"
        assert len(server.created()) == 2
        # The same task run again (a retried launcher): it finds its state on gs:// and the
        # finished job, and submits nothing.
        again = {**inputs, "checkpoint": FakeArtifact(uri=task_checkpoint_uri)}
        assert launch_spot_job(api_endpoint=server.endpoint, **again) == "SUCCEEDED"
        assert len(server.created()) == 2
    assert checkpoints.verify(ours, 12).step == 12  # seeded from the previous run
    assert outputs["checkpoint"].uri == ours
    assert outputs["checkpoint"].metadata["latest_step"] == 14
    assert outputs["checkpoint"].metadata["resumed_from_step"] == 12
    filesystem, path = fs.filesystem(f"{base}/_launcher")
    assert len(filesystem.ls(path)) == 1  # one state file for the run


def test_a_gcs_fuse_base_is_sent_as_its_gs_uri_and_is_the_same_run(gcs_emulator, package, outputs):
    run = f"runs/{uuid.uuid4().hex}"
    fuse_base, gs_base = f"/gcs/kfp-spot-test/{run}/job", f"{BUCKET}/{run}/job"
    exhausted = Script(["JOB_STATE_RUNNING", "JOB_STATE_FAILED"], error=STOCKOUT)
    task_checkpoint_uri = outputs["checkpoint"].uri
    inputs = {"project": "test-proj", "package": package, "poll_interval_seconds": 0.01}
    with RecordingServer(scripts=[exhausted]) as server:
        launch_spot_job(
            api_endpoint=server.endpoint, base_output_directory=fuse_base, **inputs, **outputs
        )
        prefixes = [
            c["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] for c in server.created()
        ]
        assert prefixes == [gs_base, gs_base]
        assert outputs["checkpoint"].uri == f"{gs_base}/checkpoints"
        assert outputs["model"].uri == f"{gs_base}/model"
        # A retried task naming the gs:// form finds the same launch state: nothing new is sent.
        again = {**outputs, "checkpoint": FakeArtifact(uri=task_checkpoint_uri)}
        launch_spot_job(
            api_endpoint=server.endpoint, base_output_directory=gs_base, **inputs, **again
        )
        assert len(server.created()) == 2


def test_a_gcs_fuse_staging_root_reaches_the_job_as_gs_package_uris(
    gcs_emulator, outputs, tmp_path
):
    # prepare_package -> launch as a Vertex AI Pipelines task wires them with a /gcs/ path.
    from kfp_spot.packaging import component_entry
    from tests.packaging.tiny import write_project

    staging = f"runs/{uuid.uuid4().hex}/staging"
    package = FakeArtifact(uri=str(tmp_path / "package"))
    component_entry(
        source=str(write_project(tmp_path / "src" / "tiny")),
        package=package,
        staging_uri=f"/gcs/kfp-spot-test/{staging}",
    )
    prefix = f"{BUCKET}/{staging}/"
    staged = package.metadata["package_uris"]
    assert staged and all(uri.startswith(prefix) for uri in staged)
    assert package.uri == staged[0]
    with RecordingServer() as server:
        launch_spot_job(
            api_endpoint=server.endpoint,
            project="test-proj",
            package=package,
            base_output_directory=f"{BUCKET}/{staging}/job",
            poll_interval_seconds=0.01,
            **outputs,
        )
        (created,) = server.created()
    (pool,) = created["jobSpec"]["workerPoolSpecs"]
    assert pool["pythonPackageSpec"]["packageUris"] == staged
    for uri in staged:  # the objects Vertex AI would install are there
        filesystem, path = fs.filesystem(uri)
        assert filesystem.exists(path)


def test_fuse_package_uris_of_the_artifact_are_sent_as_gs_uris(outputs):
    fuse = ["/gcs/bucket/pkg/trainer-0.1.tar.gz", "/gcs/bucket/pkg/dep-1.0.tar.gz"]
    package = FakeArtifact(
        uri=fuse[0], metadata={"python_module": "trainer.task", "package_uris": fuse}
    )
    with RecordingServer() as server:
        launch_spot_job(
            api_endpoint=server.endpoint,
            project="test-proj",
            package=package,
            poll_interval_seconds=0.01,
            **outputs,
        )
        (created,) = server.created()
    (pool,) = created["jobSpec"]["workerPoolSpecs"]
    assert pool["pythonPackageSpec"]["packageUris"] == [
        "gs://bucket/pkg/trainer-0.1.tar.gz",
        "gs://bucket/pkg/dep-1.0.tar.gz",
    ]
