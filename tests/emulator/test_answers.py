"""Kept JSON answers of CustomJobs: the same text as before, and never stale after a write.

The API runs here without a scheduler (nothing admits the jobs), so each state change is made by
the test through the lifecycle, as the scheduler and the attempt runners make them, and the
answer right after it is compared with one built from the committed row.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.cloud.aiplatform_v1.types import JobState, ListCustomJobsResponse

from kfp_spot.emulator.answers import AnswerCache
from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.jobs import CustomJobApi, list_json, message_json
from kfp_spot.emulator.lifecycle import Lifecycle
from kfp_spot.emulator.scheduler import Capacity
from kfp_spot.emulator.statedir import StateDir
from kfp_spot.emulator.states import CANCELLING, PENDING, QUEUED, RUNNING, SUCCEEDED
from kfp_spot.emulator.store import Store

PARENT = "projects/answers/locations/us-central1"


@pytest.fixture
def jobs_api(tmp_path: Path) -> Iterator[CustomJobApi]:
    """The CustomJob API on its own store and lifecycle, with no scheduler."""
    state = StateDir(tmp_path / "state")
    store = Store(state.database)
    lifecycle = Lifecycle(store, shutdown_grace=1.0)
    api = CustomJobApi(store, lifecycle, Capacity(None), state, lambda: None, lambda _: None)
    api.base_url = "http://127.0.0.1:1"
    try:
        yield api
    finally:
        store.close()
        state.release()


def fresh(api: CustomJobApi, job_id: str, int_enums: bool = False) -> str:
    """The answer built from the committed row, as GET built it before answers were kept."""
    row = api.store.job(job_id)
    assert row is not None
    return message_json(api.to_proto(row), int_enums)


def test_a_row_version_moves_after_each_commit_that_writes_it(jobs_api, make_job):
    store = jobs_api.store
    a = jobs_api.create_job(PARENT, make_job()).name.rsplit("/", 1)[1]
    b = jobs_api.create_job(PARENT, make_job()).name.rsplit("/", 1)[1]
    va, vb = store.job_version(a), store.job_version(b)
    assert va > 0 and vb > va  # inserted: moved on
    with store.transaction() as db:  # during a write the version has moved already
        db.execute("UPDATE jobs SET display_name = 'x' WHERE id = ?", (a,))
        during = store.job_version(a)
        assert during > vb
    assert store.job_version(a) > during  # and moves again once it is committed
    va = store.job_version(a)
    store.update_job(a, display_name="renamed")
    assert store.job_version(a) > va and store.job_version(b) == vb  # only the row written
    moved = store.job_version(a)
    with store.transaction() as db:  # any write of the table counts, whichever code makes it
        db.execute("UPDATE jobs SET error_message = 'x' WHERE id = ?", (b,))
    assert store.job_version(b) > moved
    before = store.job_version(a)
    with pytest.raises(RuntimeError), store.transaction() as db:
        db.execute("UPDATE jobs SET error_message = 'y' WHERE id = ?", (a,))
        raise RuntimeError("rolled back")
    rolled_back = store.job_version(a)
    assert rolled_back > before  # moved as the write began: a kept answer is not trusted
    assert store.job(a).error_message is None
    store.update_job_if(a, (SUCCEEDED,), error_message="z")  # no row matched
    assert store.job_version(a) == rolled_back


@pytest.mark.parametrize("int_enums", [False, True])
def test_get_answers_what_it_did_and_sees_every_state_change_at_once(jobs_api, make_job, int_enums):
    api, lifecycle = jobs_api, jobs_api.lifecycle
    body = make_job(display_name="caché ✓")
    body["jobSpec"]["enableWebAccess"] = True
    body["labels"] = {"team": "spot"}
    name = api.create_job(PARENT, body).name
    job_id = name.rsplit("/", 1)[1]

    def check(state: str) -> None:
        for _ in range(2):  # built, then kept: the same text both times
            text = api.get_job_json(name, int_enums)
            assert text == fresh(api, job_id, int_enums)
            expected = int(JobState[state]) if int_enums else state
            assert json.loads(text)["state"] == expected

    check(QUEUED)
    row = lifecycle.job(job_id)
    attempt = lifecycle.admit(row, lifecycle.spec(row), 1)
    check(PENDING)
    lifecycle.mark_running(job_id, attempt, [{"replica": "workerpool0-0", "pid": 1, "token": "t"}])
    check(RUNNING)  # webAccessUris appear while RUNNING
    lifecycle.heartbeat(job_id, attempt)  # the attempts table only: the answer stays
    check(RUNNING)
    lifecycle.request_preempt(job_id)
    check(RUNNING)
    lifecycle.finish_attempt(job_id, attempt, "PREEMPTED", preempted=True)
    check(QUEUED)  # preempted: queued again, one preemption more
    api.cancel_job(name)
    check(CANCELLING)
    lifecycle.cancel_queued(job_id)
    text = api.get_job_json(name, int_enums)
    assert text == fresh(api, job_id, int_enums)
    assert json.loads(text)["error"]["message"] == "CANCELED"
    api.delete_job(name)
    with pytest.raises(ApiError) as err:
        api.get_job_json(name, int_enums)
    assert err.value.status == "NOT_FOUND"


def test_get_by_another_parent_or_project_id(jobs_api, make_job):
    name = jobs_api.create_job(PARENT, make_job()).name  # by project number
    job_id = name.rsplit("/", 1)[1]
    by_id = f"{PARENT}/customJobs/{job_id}"  # by project ID, as created
    assert jobs_api.get_job_json(by_id) == jobs_api.get_job_json(name)
    with pytest.raises(ApiError) as err:
        jobs_api.get_job_json(f"projects/other-project/locations/us-central1/customJobs/{job_id}")
    assert err.value.status == "NOT_FOUND"
    with pytest.raises(ApiError):
        jobs_api.get_job_json(f"{PARENT}/customJobs/123")


def test_an_answer_built_from_a_row_read_before_a_write_is_not_given_after_it(jobs_api, make_job):
    """The version is read before the row: a write in between leaves the kept answer behind."""
    api, store = jobs_api, jobs_api.store
    job_id = api.create_job(PARENT, make_job()).name.rsplit("/", 1)[1]
    builds: list[str] = []

    def build(row: Any, int_enums: bool) -> str:
        builds.append(row.state)
        return message_json(api.to_proto(row), int_enums)

    cache = AnswerCache(store.job_version, build)
    read_at = store.job_version(job_id)
    old_row = store.job(job_id)
    store.update_job(job_id, state=CANCELLING)  # committed after the row was read
    kept = cache.build(old_row, False, read_at)
    assert json.loads(kept.json)["state"] == QUEUED  # what that row said
    assert cache.current(job_id, False) is None  # but never given out after the write
    new = cache.build(store.job(job_id), False, store.job_version(job_id))
    assert json.loads(new.json)["state"] == CANCELLING
    assert cache.current(job_id, False) == new
    cache.build(old_row, False, read_at)  # a slow reader's older answer does not replace it
    assert cache.current(job_id, False) == new
    assert builds == [QUEUED, CANCELLING, QUEUED]


@pytest.mark.parametrize("int_enums", [False, True])
def test_list_answers_the_same_text_as_before(jobs_api, make_job, int_enums):
    api = jobs_api
    for i in range(5):
        api.create_job(PARENT, make_job(display_name=f"job ✓ {i}"))
    ids = [row.id for row in api.store.jobs()]
    api.cancel_job(f"{PARENT}/customJobs/{ids[1]}")  # a state change after the first answers
    seen = []
    token = ""
    while True:
        text = api.list_jobs_json(PARENT, "", 2, token, "", int_enums)
        page = json.loads(text)
        names = [job["name"] for job in page.get("customJobs", [])]
        rows = [api.store.job(n.rsplit("/", 1)[1]) for n in names]
        expected = list_json(
            ListCustomJobsResponse,
            "custom_jobs",
            [api.to_proto(r) for r in rows],
            page.get("nextPageToken", ""),
            int_enums,
        )
        assert text == expected
        seen += names
        token = page.get("nextPageToken", "")
        if not token:
            break
    assert [n.rsplit("/", 1)[1] for n in seen] == ids
    empty = api.list_jobs_json(PARENT, 'display_name="none"', 0, "", "", int_enums)
    assert empty == list_json(ListCustomJobsResponse, "custom_jobs", [], "", int_enums) == "{}"
    masked = json.loads(api.list_jobs_json(PARENT, "", 0, "", "displayName,state", int_enums))
    assert all(set(job) == {"displayName", "state"} for job in masked["customJobs"])
