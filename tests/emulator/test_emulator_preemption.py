"""Spot semantics: preemption (SIGTERM, grace, SIGKILL), restarts, STOCKOUT and the ledger."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

PARENT = "projects/local-project/locations/us-central1"


def _create(emu, api, body):
    status, job = api("POST", f"{emu.endpoint}/v1/{PARENT}/customJobs", body)
    assert status == 200, job
    return job["name"]


def _ts(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_on_demand_preemption_restarts_the_job(emulator, api, make_job, tmp_path, until, lines):
    progress = tmp_path / "progress.txt"
    name = _create(emulator, api, make_job("--steps", "40", "--progress", str(progress)))
    until(lambda: any("step 2" in x for x in lines(progress)), 60, "attempt 1 to make progress")

    status, answer = api("POST", f"{emulator.endpoint}/emulator/v1/{name}:preempt", {})
    assert status == 200 and answer["attempt"] == 1

    done = emulator.wait(name, timeout=60)
    assert done.state.name == "JOB_STATE_SUCCEEDED", done.error
    text = lines(progress)
    starts = [x for x in text if x.endswith(" start")]
    assert len(starts) == 2  # a second process ran the job again
    assert text.index(next(x for x in text if "sigterm" in x)) < text.index(starts[1])

    status, ledger = api("GET", f"{emulator.endpoint}/emulator/v1/{name}/attempts")
    rows = ledger["attempts"]
    assert [r["attempt"] for r in rows] == [1, 2]
    assert [r["endReason"] for r in rows] == ["PREEMPTED", "SUCCEEDED"]
    for row in rows:
        assert row["billableSeconds"] == pytest.approx(
            _ts(row["endTime"]) - _ts(row["startTime"]), abs=0.01
        )
        assert row["strategy"] == "SPOT" and row["machineType"] == "n1-standard-4"
        assert 0 < row["spotCost"] < row["onDemandCost"]
        assert row["savings"] == pytest.approx(row["onDemandCost"] - row["spotCost"], abs=1e-6)
    # the gap between the attempts (preempted, re-queued, pending) is not billed
    job_span = done.end_time.timestamp() - done.start_time.timestamp()
    assert sum(r["billableSeconds"] for r in rows) < job_span
    assert rows[1]["queuedSeconds"] > 0


def test_each_attempt_starts_on_a_fresh_disk_as_on_a_new_vm(
    emulator, api, make_job, tmp_path, until, lines
):
    # A preempted job restarts on a new VM: what the last attempt left in its working directory
    # or in /tmp is gone. A trainer that keeps its checkpoints there resumes locally only if the
    # emulator is more lenient than Vertex AI.
    progress = tmp_path / "progress.txt"
    body = make_job("--steps", "40", "--progress", str(progress), "--leave")
    name = _create(emulator, api, body)
    until(lambda: any("step 2" in x for x in lines(progress)), 60, "attempt 1 to make progress")
    status, _ = api("POST", f"{emulator.endpoint}/emulator/v1/{name}:preempt", {})
    assert status == 200
    done = emulator.wait(name, timeout=60)
    assert done.state.name == "JOB_STATE_SUCCEEDED", done.error
    seen = [json.loads(x.split(" found ", 1)[1]) for x in lines(progress) if " found " in x]
    assert [s["found"] for s in seen] == [[], []]  # the second attempt found nothing left
    first, second = (s["places"] for s in seen)
    assert first["cwd"] != second["cwd"] and first["tmp"] != second["tmp"]
    assert emulator.state_dir.resolve() in Path(first["cwd"]).parents  # in the emulator's state
    for place in (*first.values(), *second.values()):
        until(lambda p=place: not Path(p).exists(), 30, f"{place} to be removed with its VM")


def test_a_preemption_at_every_attempt_ends_in_stockout(
    emulator, api, make_job, tmp_path, until, lines
):
    # Each attempt is preempted once its process has started (a fixed preempt_at time would race
    # the interpreter's start-up on a loaded machine; the schedule itself is covered by the
    # launcher tests and test_preemption_schedule_is_per_attempt).
    progress = tmp_path / "progress.txt"
    name = _create(emulator, api, make_job("--steps", "100000", "--progress", str(progress)))
    for attempt in range(1, 8):
        until(
            lambda n=attempt: len([x for x in lines(progress) if x.endswith(" start")]) >= n,
            60,
            f"attempt {attempt} to start",
        )
        status, answer = api("POST", f"{emulator.endpoint}/emulator/v1/{name}:preempt", {})
        assert status == 200 and answer["attempt"] == attempt, answer
    done = emulator.wait(name, timeout=120)
    ledger = emulator.attempts(name)
    assert done.state.name == "JOB_STATE_FAILED"
    assert done.error.code == 8 and "STOCKOUT" in done.error.message
    assert len(ledger) == 7  # the first attempt and exactly six restarts
    assert [r["endReason"] for r in ledger] == ["PREEMPTED"] * 7
    assert len([x for x in lines(progress) if x.endswith(" start")]) == 7
    for row in ledger:
        assert row["billableSeconds"] == pytest.approx(
            _ts(row["endTime"]) - _ts(row["startTime"]), abs=0.01
        )
    # queued and restart time between the attempts is not billed
    job_span = done.end_time.timestamp() - done.create_time.timestamp()
    assert sum(r["billableSeconds"] for r in ledger) < job_span


def test_sigterm_ignored_means_sigkill_after_the_grace_period(
    emulator, api, make_job, tmp_path, until, lines
):
    progress = tmp_path / "progress.txt"
    body = make_job("--steps", "400", "--ignore-sigterm", "--progress", str(progress))
    body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["args"] = [
        "--steps",
        "2000",
        "--step-seconds",
        "0.05",
        "--ignore-sigterm",
        "--progress",
        str(progress),
    ]
    name = _create(emulator, api, body)
    until(lambda: any("step 1" in x for x in lines(progress)), 60, "the first steps")
    t0 = time.monotonic()
    emulator.preempt(name)
    until(lambda: any("sigterm" in x for x in lines(progress)), 60, "SIGTERM to reach the process")
    until(lambda: len(emulator.attempts(name)) == 2, 30, "the second attempt")
    waited = time.monotonic() - t0
    first = emulator.attempts(name)[0]
    assert first["endReason"] == "PREEMPTED"
    assert waited >= 1.0  # the grace period (1 s) passed before the kill
    text = lines(progress)
    term = next(i for i, x in enumerate(text) if "sigterm" in x)
    pid = text[term].split()[1]
    # the first process ignored SIGTERM and kept stepping through the grace period ...
    assert any(x.split()[1] == pid and " step " in x for x in text[term + 1 :])
    # ... until SIGKILL: it never finished
    assert not any(x.split()[1] == pid and x.endswith(" done") for x in text)
    emulator.service.cancel_job(name)
    emulator.wait(name, timeout=30)


def test_replica_failure_fails_the_job_with_vertex_wording(emulator, api, make_job):
    name = _create(emulator, api, make_job("--steps", "1", "--exit-code", "3"))
    done = emulator.wait(name, timeout=60)
    assert done.state.name == "JOB_STATE_FAILED"
    assert done.error.code == 3
    assert done.error.message.startswith(
        "The replica workerpool0-0 exited with a non-zero status of 3."
    )
    assert [r["endReason"] for r in emulator.attempts(name)] == ["FAILED"]


def test_preempting_an_on_demand_job_is_refused(emulator, api, make_job):
    name = _create(emulator, api, make_job("--steps", "1", strategy="ON_DEMAND"))
    status, err = api("POST", f"{emulator.endpoint}/emulator/v1/{name}:preempt", {})
    assert status == 400 and "SPOT" in err["error"]["message"]
    done = emulator.wait(name, timeout=60)
    assert done.state.name == "JOB_STATE_SUCCEEDED"
    [row] = emulator.attempts(name)
    assert row["strategy"] == "ON_DEMAND" and row["savings"] == 0


def test_random_preemptions_are_reproducible_with_a_seed():
    from kfp_spot.emulator import PreemptionPolicy

    a = PreemptionPolicy(preempt_every=60.0, seed=7)
    b = PreemptionPolicy(preempt_every=60.0, seed=7)
    c = PreemptionPolicy(preempt_every=60.0, seed=8)
    times_a = [a.delay(job, attempt) for job in (1, 2) for attempt in (1, 2, 3)]
    assert times_a == [b.delay(job, attempt) for job in (1, 2) for attempt in (1, 2, 3)]
    assert times_a != [c.delay(job, attempt) for job in (1, 2) for attempt in (1, 2, 3)]
    assert all(t > 0 for t in times_a)
    mean = sum(a.delay(1, i) for i in range(1, 2001)) / 2000
    assert 50 < mean < 70  # exponential with the given mean
    at = PreemptionPolicy(preempt_at=(1.0, 2.0))
    assert [at.delay(1, i) for i in (1, 2, 3)] == [1.0, 2.0, None]
