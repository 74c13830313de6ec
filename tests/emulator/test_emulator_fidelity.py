"""What Vertex AI's v1 API returns, returned by the emulator too (names with the project number,
int64 ids, filters, read masks, page tokens, operations, service defaults, scheduling and disk
rules).

Driven through the real GAPIC ``JobServiceClient`` (REST transport) where it exposes the field,
and raw HTTP where it does not. docs/emulator.md says which behaviour is documented by Google.
"""

from __future__ import annotations

import base64
import json
import re
import sqlite3
from pathlib import Path

import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1.types import CustomJob, DeleteOperationMetadata, JobState
from google.longrunning import operations_pb2
from google.protobuf import field_mask_pb2

from kfp_spot.emulator import Emulator, names
from kfp_spot.emulator.store import Store

PROJECT = "demo-project"
PARENT = f"projects/{PROJECT}/locations/us-central1"
NUMBER = names.project_number(PROJECT)
NUMBERED = f"projects/{NUMBER}/locations/us-central1"


def as_job(body: dict) -> CustomJob:
    return CustomJob.from_json(json.dumps(body))


def create(gapic, body: dict, parent: str = PARENT) -> CustomJob:
    return gapic.create_custom_job(parent=parent, custom_job=as_job(body))


def running(gapic, until, name: str) -> CustomJob:
    return until(
        lambda: (j := gapic.get_custom_job(name=name)).state == JobState.JOB_STATE_RUNNING and j,
        60,
        f"{name} to run",
    )


# names ------------------------------------------------------------------------------------------


def test_names_carry_the_project_number_and_id_or_number_both_work(gapic, emulator, make_job):
    created = create(gapic, make_job("--steps", "1"))
    assert re.fullmatch(rf"{NUMBERED}/customJobs/\d{{19}}", created.name)
    # stable across runs, machines and versions: state dirs and gcp_resources files keep names
    assert NUMBER == "510835001129"
    assert names.project_number("another-project") != NUMBER
    job_id = created.name.rsplit("/", 1)[1]
    by_id = gapic.get_custom_job(name=f"{PARENT}/customJobs/{job_id}")
    by_number = gapic.get_custom_job(name=f"{NUMBERED}/customJobs/{job_id}")
    assert by_id.name == by_number.name == created.name
    assert [j.name for j in gapic.list_custom_jobs(parent=NUMBERED)] == [created.name]
    assert [j.name for j in gapic.list_custom_jobs(parent=PARENT)] == [created.name]
    with pytest.raises(exceptions.NotFound):  # another project's number does not reach it
        gapic.get_custom_job(
            name=f"projects/123456789012/locations/us-central1/customJobs/{job_id}"
        )
    # created by number: the same project
    again = create(gapic, make_job("--steps", "1"), parent=NUMBERED)
    assert again.name.startswith(NUMBERED + "/")


def test_job_ids_are_int64(gapic, make_job):
    created = create(gapic, make_job("--steps", "1"))
    job_id = int(created.name.rsplit("/", 1)[1])
    assert 10**18 <= job_id <= names.INT64_MAX
    draws = [int(names.new_id()) for _ in range(20000)]
    assert min(draws) >= 10**18 and max(draws) <= names.INT64_MAX
    assert max(draws) > 9 * 10**18  # the whole int64 range is drawn from, not a corner of it


# list -------------------------------------------------------------------------------------------


def test_filter_wildcard_and_existence_through_gapic(gapic, make_job):
    made = {
        label: create(gapic, {**make_job("--steps", "1", display_name=label), "labels": labels})
        for label, labels in [("sd-train", {"team": "a"}), ("sd-eval", {}), ("other", {})]
    }

    def listed(text: str) -> set[str]:
        jobs = gapic.list_custom_jobs(request={"parent": PARENT, "filter": text})
        return {j.display_name for j in jobs}

    assert listed('display_name:"sd*"') == {"sd-train", "sd-eval"}
    assert listed("display_name:*") == set(made)
    assert listed("labels.team:*") == {"sd-train"}
    assert listed('display_name:"sd*" AND NOT labels:team') == {"sd-eval"}
    with pytest.raises(exceptions.BadRequest, match="cannot filter on 'update_time'"):
        listed('update_time>"2026-01-01T00:00:00Z"')


def test_read_mask_through_gapic(gapic, api, emulator, make_job):
    created = create(gapic, make_job("--steps", "1", display_name="masked"))
    mask = field_mask_pb2.FieldMask(paths=["display_name", "state"])
    [job] = gapic.list_custom_jobs(request={"parent": PARENT, "read_mask": mask})
    assert job.display_name == "masked" and job.state != JobState.JOB_STATE_UNSPECIFIED
    assert job.name == "" and not job.job_spec.worker_pool_specs  # only what was asked for
    url = f"{emulator.endpoint}/v1/{PARENT}/customJobs"
    status, page = api("GET", f"{url}?readMask=name,jobSpec.scheduling")
    assert status == 200
    assert page["customJobs"] == [
        {"name": created.name, "jobSpec": {"scheduling": {"strategy": "SPOT"}}}
    ]
    status, err = api("GET", f"{url}?readMask=colour")
    assert (
        status == 400 and err["error"]["details"][0]["fieldViolations"][0]["field"] == "read_mask"
    )


def test_page_tokens_are_opaque_signed_and_tied_to_the_query(gapic, api, emulator, make_job):
    url = f"{emulator.endpoint}/v1/{PARENT}/customJobs"
    old = {create(gapic, make_job("--steps", "1", display_name=f"j{i}")).name for i in range(5)}
    status, first = api("GET", f"{url}?pageSize=2")
    token = first["nextPageToken"]
    with pytest.raises(ValueError):  # not a plain offset in base64, as it was
        int(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    tampered = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    status, err = api("GET", f"{url}?pageSize=2&pageToken={tampered}")
    assert status == 400 and "pageToken" in err["error"]["message"]
    status, err = api("GET", f"{url}?pageSize=2&pageToken={token}&filter=display_name%3D%22j1%22")
    assert status == 400 and "another query" in err["error"]["message"]
    # a job created between pages neither shifts nor repeats the rest (keyset, not offsets)
    newer = create(gapic, make_job("--steps", "1", display_name="newer")).name
    rest = []
    while token:
        status, page = api("GET", f"{url}?pageSize=2&pageToken={token}")
        rest += [j["name"] for j in page["customJobs"]]
        token = page.get("nextPageToken", "")
    seen = [j["name"] for j in first["customJobs"]] + rest
    assert sorted(seen) == sorted(old) and newer not in seen
    pager = gapic.list_custom_jobs(request={"parent": PARENT, "page_size": 2})
    assert sorted(j.name for j in pager) == sorted(old | {newer})  # the GAPIC pager follows them


# delete and its operation -----------------------------------------------------------------------


def test_delete_returns_a_fetchable_location_operation(gapic, api, emulator, make_job):
    created = create(gapic, make_job("--steps", "1"))
    emulator.wait(created.name, timeout=60)
    future = gapic.delete_custom_job(name=created.name)
    op_name = future.operation.name
    assert re.fullmatch(rf"{NUMBERED}/operations/\d{{19}}", op_name)
    assert future.operation.done
    metadata = future.metadata
    assert isinstance(metadata, DeleteOperationMetadata)
    assert metadata.generic_metadata.create_time and metadata.generic_metadata.update_time
    future.result(timeout=10)  # Empty
    fetched = gapic.get_operation(operations_pb2.GetOperationRequest(name=op_name))
    assert (
        fetched.name == op_name
        and fetched.done
        and fetched.metadata.Is(DeleteOperationMetadata.pb().DESCRIPTOR)
    )
    op_id = op_name.rsplit("/", 1)[1]
    for path in (f"v1/{op_name}", f"v1/{PARENT}/operations/{op_id}", f"ui/{op_name}"):
        status, doc = api("GET", f"{emulator.endpoint}/{path}")
        assert status == 200 and doc["name"] == op_name, doc
        assert doc["metadata"]["@type"].endswith("aiplatform.v1.DeleteOperationMetadata")
    with pytest.raises(exceptions.NotFound):
        gapic.get_operation(
            operations_pb2.GetOperationRequest(name=f"{NUMBERED}/operations/1234567890123456789")
        )
    waited = gapic.wait_operation(
        operations_pb2.WaitOperationRequest(name=op_name, timeout={"seconds": 5})
    )
    assert waited.name == op_name and waited.done
    gapic.cancel_operation(operations_pb2.CancelOperationRequest(name=op_name))  # done: no-op
    gapic.delete_operation(operations_pb2.DeleteOperationRequest(name=op_name))
    with pytest.raises(exceptions.NotFound):
        gapic.get_operation(operations_pb2.GetOperationRequest(name=op_name))


# what the service fills in ----------------------------------------------------------------------


def test_web_access_uris_per_replica_while_running(gapic, emulator, make_job, until):
    body = make_job("--steps", "400", replicas=(1, 2))
    body["jobSpec"]["enableWebAccess"] = True
    created = create(gapic, body)
    assert not created.web_access_uris  # not before the job runs
    job = running(gapic, until, created.name)
    assert set(job.web_access_uris) == {"workerpool0-0", "workerpool1-0", "workerpool1-1"}
    uri = job.web_access_uris["workerpool1-1"]
    assert uri.startswith(emulator.endpoint) and uri.endswith("replica=workerpool1-1")
    plain = create(gapic, make_job("--steps", "400"))
    assert not running(gapic, until, plain.name).web_access_uris
    for name in (created.name, plain.name):
        gapic.cancel_custom_job(name=name)
    assert not emulator.wait(created.name, timeout=60).web_access_uris


def test_service_defaults_are_filled_into_the_job_spec(gapic, make_job):
    body = make_job("--steps", "1", replicas=(1, 1))
    body["jobSpec"]["workerPoolSpecs"][1]["diskSpec"] = {
        "bootDiskType": "pd-standard",
        "bootDiskSizeGb": 250,
    }
    body["jobSpec"]["workerPoolSpecs"].append({})  # an unused pool slot stays empty
    job = create(gapic, body)
    first, second, _ = job.job_spec.worker_pool_specs
    assert (first.disk_spec.boot_disk_type, first.disk_spec.boot_disk_size_gb) == ("pd-ssd", 100)
    assert (second.disk_spec.boot_disk_type, second.disk_spec.boot_disk_size_gb) == (
        "pd-standard",
        250,
    )
    assert CustomJob.pb(job).job_spec.worker_pool_specs[2].ByteSize() == 0
    assert gapic.get_custom_job(name=job.name).job_spec == job.job_spec  # stored, not decorated


# rules --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheduling", "field", "fragment"),
    [
        (
            {"strategy": "SPOT", "maxWaitDuration": "3600s"},
            "job_spec.scheduling.max_wait_duration",
            "only with strategy FLEX_START",
        ),
        (
            {"strategy": "STANDARD", "maxWaitDuration": "0s"},
            "job_spec.scheduling.max_wait_duration",
            "only with strategy FLEX_START",
        ),
        (
            {"strategy": "FLEX_START", "timeout": "691200s"},
            "job_spec.scheduling.timeout",
            "at most 7 days",
        ),
    ],
)
def test_scheduling_fields_vertex_refuses(
    gapic, api, emulator, make_job, scheduling, field, fragment
):
    body = make_job("--steps", "1")
    body["jobSpec"]["scheduling"] = scheduling
    with pytest.raises(exceptions.BadRequest, match=fragment):
        create(gapic, body)
    status, err = api("POST", f"{emulator.endpoint}/v1/{PARENT}/customJobs", body)
    assert status == 400
    assert err["error"]["details"][0]["fieldViolations"][0]["field"] == field


@pytest.mark.parametrize(
    ("disk", "field", "fragment"),
    [
        ({"bootDiskSizeGb": -1}, "boot_disk_size_gb", "[100, 64000]"),
        ({"bootDiskSizeGb": 99}, "boot_disk_size_gb", "[100, 64000]"),
        ({"bootDiskSizeGb": 64001}, "boot_disk_size_gb", "[100, 64000]"),
        ({"bootDiskType": "pd-fast"}, "boot_disk_type", "pd-ssd, pd-standard"),
    ],
)
def test_disk_spec_outside_vertex_ranges_is_refused(gapic, make_job, disk, field, fragment):
    body = make_job("--steps", "1")
    body["jobSpec"]["workerPoolSpecs"][0]["diskSpec"] = disk
    with pytest.raises(exceptions.BadRequest, match=re.escape(fragment)) as caught:
        create(gapic, body)
    assert f"job_spec.worker_pool_specs[0].disk_spec.{field}" in caught.value.message


def test_disk_spec_range_edges_are_accepted(gapic, make_job):
    for size in (100, 64000):
        body = make_job("--steps", "1")
        body["jobSpec"]["workerPoolSpecs"][0]["diskSpec"] = {"bootDiskSizeGb": size}
        assert create(gapic, body).job_spec.worker_pool_specs[0].disk_spec.boot_disk_size_gb == size


# FLEX_START and disableRetries --------------------------------------------------------------------


@pytest.fixture
def one_vm(tmp_path: Path, env_cache: Path):
    with Emulator(
        tmp_path / "state1", grace_period=1.0, env_cache_dir=env_cache, capacity=1
    ) as emu:
        yield emu


def test_flex_start_waits_for_capacity_up_to_max_wait_then_fails(one_vm, api, make_job, until):
    url = f"{one_vm.endpoint}/v1/{PARENT}/customJobs"
    status, blocker = api("POST", url, make_job("--steps", "2000"))
    assert status == 200
    until(lambda: one_vm.job(blocker["name"]).state.name == "JOB_STATE_RUNNING", 60, "blocker")
    flex = make_job("--steps", "1", strategy="FLEX_START")
    flex["jobSpec"]["scheduling"]["maxWaitDuration"] = "1s"
    status, waiting = api("POST", url, flex)
    assert status == 200, waiting
    assert one_vm.job(waiting["name"]).state.name == "JOB_STATE_QUEUED"  # no VM free
    done = one_vm.wait(waiting["name"], timeout=60)
    assert done.state.name == "JOB_STATE_FAILED"
    assert done.error.code == 8 and "maxWaitDuration (1s)" in done.error.message
    assert not done.start_time and one_vm.attempts(waiting["name"]) == []  # never ran, unbilled
    # maxWaitDuration 0 waits indefinitely: it runs once the VM is free
    flex["jobSpec"]["scheduling"]["maxWaitDuration"] = "0s"
    status, patient = api("POST", url, flex)
    status, _ = api("POST", f"{one_vm.endpoint}/v1/{blocker['name']}:cancel", {})
    assert one_vm.wait(patient["name"], timeout=60).state.name == "JOB_STATE_SUCCEEDED"


def test_flex_start_wait_survives_an_emulator_restart(tmp_path, env_cache, api, make_job, until):
    state = tmp_path / "state"
    with Emulator(state, grace_period=1.0, env_cache_dir=env_cache, capacity=1) as emu:
        url = f"{emu.endpoint}/v1/{PARENT}/customJobs"
        status, blocker = api("POST", url, make_job("--steps", "2000"))
        until(lambda: emu.job(blocker["name"]).state.name == "JOB_STATE_RUNNING", 60, "blocker")
        flex = make_job("--steps", "1", strategy="FLEX_START")
        flex["jobSpec"]["scheduling"]["maxWaitDuration"] = "2s"
        status, waiting = api("POST", url, flex)
        assert status == 200
    # restarted: the blocker is queued again first and takes the VM; the wait still ends
    with Emulator(state, grace_period=1.0, env_cache_dir=env_cache, capacity=1) as emu:
        done = emu.wait(waiting["name"], timeout=60)
        assert done.state.name == "JOB_STATE_FAILED" and "maxWaitDuration" in done.error.message


def test_disable_retries_fails_a_preempted_job_instead_of_restarting(
    emulator, api, make_job, until
):
    body = make_job("--steps", "2000")
    body["jobSpec"]["scheduling"]["disableRetries"] = True
    status, job = api("POST", f"{emulator.endpoint}/v1/{PARENT}/customJobs", body)
    assert status == 200, job
    until(lambda: emulator.job(job["name"]).state.name == "JOB_STATE_RUNNING", 60, "RUNNING")
    emulator.preempt(job["name"])
    done = emulator.wait(job["name"], timeout=60)
    assert done.state.name == "JOB_STATE_FAILED"
    assert done.error.code == 8 and "disableRetries" in done.error.message
    [attempt] = emulator.attempts(job["name"])
    assert attempt["endReason"] == "PREEMPTED"


# state of older emulators ---------------------------------------------------------------------


def test_a_state_dir_of_an_older_emulator_is_migrated(tmp_path):
    path = tmp_path / "emulator.sqlite"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE jobs DROP COLUMN project_id")  # the schema before project numbers
    db.execute(
        "INSERT INTO jobs (id, parent, display_name, spec, state, create_time, update_time) "
        "VALUES ('42', 'projects/old-proj/locations/europe-west4', 'x', '', "
        "'JOB_STATE_SUCCEEDED', 0, 0)"
    )
    db.commit()
    db.close()
    store = Store(path)
    row = store.job("42")
    assert row.parent == f"projects/{names.project_number('old-proj')}/locations/europe-west4"
    assert row.project == "old-proj"
    store.close()
