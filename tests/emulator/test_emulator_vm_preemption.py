"""One VM at a time: a worker's Spot VM is preempted and replaced while the others keep running.

The jobs here have three replicas (``workerpool0-0`` the chief, ``workerpool1-0`` and
``workerpool1-1``). The chief steps until the test drops a flag file, so nothing depends on how
fast the machine is: the tests wait for the worker's restarts, then let the chief finish.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from click.testing import CliRunner

from kfp_spot.cli import main
from kfp_spot.emulator import MAX_RESTARTS, Emulator, EmulatorError, PreemptionPolicy

PARENT = "projects/local-project/locations/us-central1"
WORKER = "workerpool1-0"


def _ts(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _three_replicas(make_job, tmp_path, *, restart_job=None):
    """A Spot job: the chief steps until ``flag`` exists, the two workers step for a long time."""
    progress = tmp_path / "progress.txt"
    flag = tmp_path / "chief-may-finish"
    envs = tmp_path / "envs"
    body = make_job(
        "--steps",
        "100000",
        "--progress",
        str(progress),
        "--env-out",
        str(envs),
        replicas=(1, 2),
    )
    chief = body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]
    chief["args"] = ["--steps", "1", "--until", str(flag), "--progress", str(progress)]
    chief["args"] += ["--env-out", str(envs)]
    if restart_job is not None:
        body["jobSpec"]["scheduling"]["restartJobOnWorkerRestart"] = restart_job
    return body, progress, flag, envs


def _starts(lines, progress, replica):
    return [x for x in lines(progress) if x.startswith(f"{replica} ") and x.endswith(" start")]


def _lives(emu, name):
    """How many VMs the worker has had so far (its runs over every attempt, from the ledger)."""
    return sum(
        len(vm["runs"])
        for row in emu.attempts(name)
        for vm in row.get("vms", [])
        if vm["replica"] == WORKER
    )


def _create(emu, api, body):
    status, job = api("POST", f"{emu.endpoint}/v1/{PARENT}/customJobs", body)
    assert status == 200, job
    return job["name"]


@pytest.mark.parametrize("restart_job", [False, True], ids=["elastic", "restartJobOnWorkerRestart"])
def test_a_worker_preempted_twice(tmp_path, env_cache, api, make_job, until, lines, restart_job):
    body, progress, flag, envs = _three_replicas(make_job, tmp_path, restart_job=restart_job)
    schedule = {WORKER: (0.3, 0.3)}  # its first two VMs are preempted 0.3 s after starting
    with Emulator(
        tmp_path / "state",
        grace_period=1.0,
        env_cache_dir=env_cache,
        preempt_vm_at=schedule,
        vm_downtime=0.5,
    ) as emu:
        name = _create(emu, api, body)
        until(lambda: (envs / f"{WORKER}.json").exists(), 60, "the worker's first start")
        first_env = json.loads((envs / f"{WORKER}.json").read_text())
        until(lambda: _lives(emu, name) == 3, 60, "the worker's third VM")
        flag.touch()
        done = emu.wait(name, timeout=60)
        ledger = emu.attempts(name)
    assert done.state.name == "JOB_STATE_SUCCEEDED", done.error

    if restart_job:
        # each preemption of the worker restarts the whole job: a new attempt, the chief again
        assert [r["endReason"] for r in ledger] == ["PREEMPTED", "PREEMPTED", "SUCCEEDED"]
        assert all(r["vmPreemptions"] == 0 for r in ledger)
        assert all(len(vm["runs"]) == 1 for r in ledger for vm in r["vms"])
        return

    # the replacement is the same replica: same rank, same address, same cluster
    last_env = json.loads((envs / f"{WORKER}.json").read_text())
    for key in ("CLUSTER_SPEC", "TF_CONFIG", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        assert last_env[key] == first_env[key], key
    # the job slows down but does not stop: no new attempt, the chief never restarts
    [row] = ledger
    assert row["endReason"] == "SUCCEEDED"
    assert len(_starts(lines, progress, "workerpool0-0")) == 1
    assert len(_starts(lines, progress, "workerpool1-1")) == 1
    assert not [x for x in lines(progress) if x.startswith("workerpool0-0 ") and "sigterm" in x]
    assert row["vmPreemptions"] == 2
    vms = {vm["replica"]: vm for vm in row["vms"]}
    assert list(vms) == ["workerpool0-0", "workerpool1-0", "workerpool1-1"]
    chief, worker, other = vms["workerpool0-0"], vms[WORKER], vms["workerpool1-1"]
    assert (chief["preemptions"], worker["preemptions"], other["preemptions"]) == (0, 2, 0)

    # the worker's VM is billed only while it runs: three runs, two unbilled gaps
    assert [r["endReason"] for r in worker["runs"]] == ["PREEMPTED", "PREEMPTED", "SUCCEEDED"]
    assert len(worker["gaps"]) == 2
    runs = worker["runs"]
    for gap, before, after in zip(worker["gaps"], runs[:2], runs[1:], strict=True):
        assert gap["startTime"] == before["endTime"] and gap["endTime"] == after["startTime"]
        assert gap["seconds"] >= 0.5  # the VM's downtime
    running = sum(_ts(r["endTime"]) - _ts(r["startTime"]) for r in worker["runs"])
    assert worker["billableSeconds"] == pytest.approx(running, abs=0.01)
    away = sum(g["seconds"] for g in worker["gaps"])
    assert worker["billableSeconds"] == pytest.approx(row["billableSeconds"] - away, abs=0.01)
    # the others ran the whole attempt, billed like the attempt
    assert chief["billableSeconds"] == pytest.approx(row["billableSeconds"], abs=0.01)
    assert other["billableSeconds"] == pytest.approx(row["billableSeconds"], abs=0.01)
    assert worker["spotCost"] < chief["spotCost"]
    # the attempt's fields are the sums over its VMs
    assert row["vmSeconds"] == pytest.approx(sum(v["billableSeconds"] for v in vms.values()))
    for key in ("spotCost", "onDemandCost", "cost", "savings"):
        assert row[key] == pytest.approx(sum(v[key] for v in vms.values()), abs=2e-6), key


def test_worker_preemptions_count_against_the_six_restarts(tmp_path, env_cache, api, make_job):
    body, _, _, _ = _three_replicas(make_job, tmp_path)  # the chief never finishes on its own
    with Emulator(
        tmp_path / "state",
        grace_period=1.0,
        env_cache_dir=env_cache,
        preempt_vm_at={WORKER: (0.1,) * (MAX_RESTARTS + 1)},
    ) as emu:
        name = _create(emu, api, body)
        done = emu.wait(name, timeout=120)
        [row] = emu.attempts(name)
    assert done.state.name == "JOB_STATE_FAILED"
    assert done.error.code == 8 and "STOCKOUT" in done.error.message
    # six replacements of the worker's VM; the seventh preemption ended the job
    assert row["endReason"] == "PREEMPTED"
    assert row["vmPreemptions"] == MAX_RESTARTS
    worker = next(vm for vm in row["vms"] if vm["replica"] == WORKER)
    assert len(worker["runs"]) == MAX_RESTARTS + 1


def test_preempt_one_replica_on_request(emulator, api, make_job, tmp_path, until, lines):
    body, progress, flag, _ = _three_replicas(make_job, tmp_path)
    name = _create(emulator, api, body)
    until(
        lambda: any(x.startswith(f"{WORKER} ") and " step " in x for x in lines(progress)),
        60,
        "the worker to step",
    )
    url = f"{emulator.endpoint}/emulator/v1/{name}:preempt"
    status, answer = api("POST", url, {"replica": WORKER})
    assert status == 200, answer
    assert answer["replica"] == WORKER and answer["attempt"] == 1
    until(lambda: len(_starts(lines, progress, WORKER)) == 2, 60, "the worker's replacement")
    # the same through the Python API
    assert emulator.preempt(name, replica=WORKER)["replica"] == WORKER
    until(lambda: len(_starts(lines, progress, WORKER)) == 3, 60, "the second replacement")
    flag.touch()
    done = emulator.wait(name, timeout=60)
    assert done.state.name == "JOB_STATE_SUCCEEDED", done.error
    [row] = emulator.attempts(name)
    assert row["vmPreemptions"] == 2
    assert len(_starts(lines, progress, "workerpool0-0")) == 1


def test_preempting_the_primary_replica_preempts_the_attempt(
    emulator, api, make_job, tmp_path, until, lines
):
    body, progress, flag, _ = _three_replicas(make_job, tmp_path)
    name = _create(emulator, api, body)
    until(
        lambda: _starts(lines, progress, "workerpool0-0") and _starts(lines, progress, WORKER),
        60,
        "the chief and the worker to start",
    )
    emulator.preempt(name, replica="workerpool0-0")
    until(lambda: len(_starts(lines, progress, "workerpool0-0")) == 2, 60, "attempt 2")
    # every replica restarts with the attempt
    until(lambda: len(_starts(lines, progress, WORKER)) == 2, 60, "the worker in attempt 2")
    flag.touch()
    done = emulator.wait(name, timeout=60)
    assert done.state.name == "JOB_STATE_SUCCEEDED", done.error
    assert [r["endReason"] for r in emulator.attempts(name)] == ["PREEMPTED", "SUCCEEDED"]


def test_bad_preempt_requests_are_refused_naming_the_field(emulator, api, make_job, tmp_path):
    body, _, flag, _ = _three_replicas(make_job, tmp_path)
    name = _create(emulator, api, body)
    url = f"{emulator.endpoint}/emulator/v1/{name}:preempt"
    status, err = api("POST", url, {"replica": "workerpool2-0"})
    assert status == 400
    assert "workerpool0-0, workerpool1-0, workerpool1-1" in err["error"]["message"]
    status, err = api("POST", url, {"replica": 3})
    assert status == 400 and "replica" in err["error"]["message"]
    status, err = api("POST", url, {"replicas": WORKER})
    assert status == 400 and '"replicas"' in err["error"]["message"]
    status, err = api("POST", url, ["workerpool1-0"])
    assert status == 400
    flag.touch()
    assert emulator.wait(name, timeout=60).state.name == "JOB_STATE_SUCCEEDED"
    [row] = emulator.attempts(name)
    assert row["vmPreemptions"] == 0  # nothing was preempted by the refused requests


def test_cli_preempts_one_replica(emulator, api, make_job, tmp_path, until, lines):
    body, progress, flag, _ = _three_replicas(make_job, tmp_path)
    name = _create(emulator, api, body)
    until(lambda: _starts(lines, progress, WORKER), 60, "the worker to start")
    runner = CliRunner()
    args = ["emulator", "preempt", name, "--replica", WORKER, "--endpoint", emulator.endpoint]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert f"the VM of {WORKER}" in result.output
    until(lambda: len(_starts(lines, progress, WORKER)) == 2, 60, "the worker's replacement")
    bad = runner.invoke(main, [*args[:3], "--replica", "workerpool9-0", *args[5:]])
    assert bad.exit_code != 0 and "'workerpool9-0' is not a replica" in bad.output
    flag.touch()
    emulator.wait(name, timeout=60)
    result = runner.invoke(main, ["emulator", "attempts", name, "--endpoint", emulator.endpoint])
    assert result.exit_code == 0, result.output
    assert f"{WORKER}" in result.output and "preempted 1x" in result.output


def test_random_vm_preemptions_are_reproducible_per_vm():
    a = PreemptionPolicy(preempt_vm_every=30.0, seed=3)
    b = PreemptionPolicy(preempt_vm_every=30.0, seed=3)
    keys = [
        (job, replica, life)
        for job in (1, 2)
        for replica in (WORKER, "workerpool1-1")
        for life in (1, 2)
    ]
    times = [a.vm_delay(*k) for k in keys]
    assert times == [b.vm_delay(*k) for k in keys]
    assert len(set(times)) == len(times)  # every VM and life has its own clock
    assert times != [PreemptionPolicy(preempt_vm_every=30.0, seed=4).vm_delay(*k) for k in keys]
    mean = sum(a.vm_delay(1, WORKER, life) for life in range(1, 2001)) / 2000
    assert 25 < mean < 35
    at = PreemptionPolicy(preempt_vm_at={WORKER: (1.0, 2.0)})
    assert [at.vm_delay(1, WORKER, life) for life in (1, 2, 3)] == [1.0, 2.0, None]
    assert at.vm_delay(1, "workerpool1-1", 1) is None
    assert at.per_vm and not PreemptionPolicy(preempt_at=(1.0,)).per_vm


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"preempt_vm_at": {"worker-0": [1.0]}}, "not a replica name"),
        ({"preempt_vm_at": {WORKER: "5"}}, "sequence of seconds"),
        ({"preempt_vm_at": {WORKER: [-1.0]}}, "preempt_vm_at['workerpool1-0'][0]"),
        ({"preempt_vm_at": [WORKER]}, "must map replica names"),
        ({"preempt_vm_every": 0}, "preempt_vm_every"),
        ({"vm_downtime": -1}, "vm_downtime"),
    ],
)
def test_emulator_refuses_bad_vm_preemption_options(tmp_path, kwargs, message):
    with pytest.raises(EmulatorError) as err:
        Emulator(tmp_path / "state", **kwargs)
    assert message in str(err.value)


def test_cli_start_parses_vm_preemption_options():
    runner = CliRunner()
    result = runner.invoke(main, ["emulator", "start", "--preempt-vm-at", "workerpool1-0"])
    assert result.exit_code != 0 and "REPLICA=S1" in result.output
    result = runner.invoke(main, ["emulator", "start", "--preempt-vm-at", "workerpool1-0=1,x"])
    assert result.exit_code != 0 and "'x' is not a number" in result.output
    result = runner.invoke(main, ["emulator", "start", "--preempt-vm-at", "pool-1=1"])
    assert result.exit_code != 0 and "not a replica name" in result.output
