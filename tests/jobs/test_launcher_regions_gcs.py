"""A launch across regions on gs://: the base bucket serves one region, region_buckets the other.

Against a local GCS emulator (gcp-storage-emulator), through gcsfs; the job service is the
recording server (each job commits a step where its base output directory says). The GCS
emulator reports every bucket as the ``US`` multi-region (it ignores a created bucket's location),
which serves us-central1 and not europe-west4: the case of a base bucket in another region.
"""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest
from recording_server import RecordingServer, Script

from kfp_spot import checkpoints, fs
from kfp_spot.jobs.entry import launch_spot_job
from kfp_spot.jobs.inputs import LaunchInputError

BUCKET = "gs://kfp-spot-test"  # the GCS emulator's default bucket: US
REGIONS = ["us-central1", "europe-west4"]
STOCKOUT = {"code": 8, "message": "Resources are insufficient in region: us-central1"}


def _make_bucket(emulator_url: str, location: str) -> str:
    """A new bucket, created through the JSON API with ``location``; its name."""
    name = f"kfp-spot-{uuid.uuid4().hex[:12]}"
    body = json.dumps({"name": name, "location": location}).encode()
    request = urllib.request.Request(
        f"{emulator_url}/storage/v1/b?project=kfp-spot-test",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
    return name


def _state(base: str) -> dict:
    filesystem, path = fs.filesystem(f"{base}/_launcher")
    (name,) = filesystem.ls(path)
    with filesystem.open(name, "rb") as handle:
        return json.loads(handle.read())


def test_a_second_region_needs_region_buckets_and_resumes_from_the_copied_step(
    gcs_emulator, package, outputs
):
    run = f"runs/{uuid.uuid4().hex}"
    base = f"{BUCKET}/{run}/job"
    europe = _make_bucket(gcs_emulator, "EUROPE-WEST4")
    seen: list[int | None] = []  # the newest verified step in each job's directory at create

    def on_create(index, job):
        prefix = job.job_spec.base_output_directory.output_uri_prefix
        latest = checkpoints.latest(f"{prefix}/checkpoints", check_hashes=True)
        seen.append(latest.step if latest else None)
        checkpoints.write_step(f"{prefix}/checkpoints", 5 + index, {"w.bin": bytes([index]) * 4096})
        if index == 1:
            record = checkpoints.AttemptRecord("away", 1.0, first_step=5, job_id="1001")
            checkpoints.write_attempt_record(f"{prefix}/checkpoints", record)
            filesystem, path = fs.filesystem(f"{prefix}/model/model.json")
            filesystem.pipe_file(path, b'{"step": 6}')

    inputs = {
        "project": "test-proj",
        "location": REGIONS[0],
        "regions": REGIONS,
        "package": package,
        "base_output_directory": base,
        "poll_interval_seconds": 0.01,
        **outputs,
    }
    exhausted = Script(["JOB_STATE_RUNNING", "JOB_STATE_FAILED"], error=STOCKOUT)
    with RecordingServer(scripts=[exhausted], on_create=on_create) as server:
        with pytest.raises(LaunchInputError) as info:
            launch_spot_job(api_endpoint=server.endpoint, **inputs)
        assert server.created() == []  # refused before anything was submitted
        message = str(info.value)
        assert "gs://kfp-spot-test" in message and "US" in message
        assert "europe-west4" in message and "region_buckets" in message

        copies = f"gs://{europe}/copies"
        outcome = launch_spot_job(
            api_endpoint=server.endpoint, region_buckets={REGIONS[1]: copies}, **inputs
        )
        created = server.created()
    assert outcome == "SUCCEEDED"
    prefixes = [c["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] for c in created]
    assert prefixes == [base, f"{copies}/{run}/job"]  # the base's path: runs never collide
    # Step 5 (committed in us-central1) was copied and verified before the job in europe-west4.
    assert seen == [None, 5]
    first, second = _state(base)["submissions"]
    assert (first["region"], second["region"]) == tuple(REGIONS)
    assert second["resume_step"] == 5 and second["copied_bytes"] > 4096
    # The outputs are home: step 6 (verified) and the model of the job in europe-west4.
    assert checkpoints.verify(f"{base}/checkpoints", 6, check_hashes=True).step == 6
    assert outputs["checkpoint"].uri == f"{base}/checkpoints"
    assert outputs["checkpoint"].metadata["latest_step"] == 6
    filesystem, path = fs.filesystem(f"{base}/model/model.json")
    assert filesystem.cat_file(path) == b'{"step": 6}'
    assert _state(base)["copied_back_bytes"] > 4096
    # The attempt record written away is home too, for the report.
    records = checkpoints.read_attempt_records(f"{base}/checkpoints")
    assert [r.attempt_id for r in records] == ["away"]
