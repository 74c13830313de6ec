"""What training processes see and how jobs share capacity: env, replicas, logs, capacity."""

from __future__ import annotations

import json
import os

import pytest

from kfp_spot.emulator import Emulator
from tests.shared import write_sdist

PARENT = "projects/proj-1/locations/europe-west4"


def _create(emu, api, body):
    status, job = api("POST", f"{emu.endpoint}/v1/{PARENT}/customJobs", body)
    assert status == 200, job
    return job["name"]


def test_single_replica_sees_the_vertex_environment(emulator, api, make_job, tmp_path, monkeypatch):
    # This machine's PYTHONPATH (a source tree, say) would import what the package does not hold.
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "src"))
    env_dir = tmp_path / "env"
    body = make_job("--steps", "1", "--env-out", str(env_dir))
    body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["env"] = [
        {"name": "MY_SETTING", "value": "42"}
    ]
    name = _create(emulator, api, body)
    assert emulator.wait(name, timeout=60).state.name == "JOB_STATE_SUCCEEDED"
    env = json.loads((env_dir / "workerpool0-0.json").read_text())
    base = str(tmp_path / "out")
    # CustomJobSpec.base_output_directory documents the trailing "/" (<base>/model/ ...)
    assert env["AIP_MODEL_DIR"] == f"{base}/model/"
    assert env["AIP_CHECKPOINT_DIR"] == f"{base}/checkpoints/"
    assert env["AIP_TENSORBOARD_LOG_DIR"] == f"{base}/logs/"
    assert env["CLOUD_ML_JOB_ID"] == name.rsplit("/", 1)[-1]
    # The emulator's grace period (1 s here), for kfp_spot.trainer (job_grace_period)
    assert env["KFP_SPOT_GRACE_PERIOD"] == "1.0"
    assert env["CLOUD_ML_PROJECT_ID"] == "proj-1"  # the ID, though the name has the number
    assert env["MY_SETTING"] == "42"
    for var in ("CLUSTER_SPEC", "TF_CONFIG", "MASTER_ADDR", "WORLD_SIZE", "RANK"):
        assert var not in env  # single replica: no cluster
    assert "PYTHONPATH" not in env and env["PATH"] == os.environ["PATH"]


def test_replicas_get_cluster_specs_and_a_preemption_restarts_all(
    emulator, api, make_job, tmp_path, until, lines
):
    env_dir = tmp_path / "env"
    progress = tmp_path / "progress.txt"
    body = make_job(
        "--steps", "100", "--progress", str(progress), "--env-out", str(env_dir), replicas=(1, 2)
    )
    name = _create(emulator, api, body)
    until(lambda: len(list(env_dir.glob("*.json"))) == 3, 60, "three replicas to start")
    envs = {p.stem: json.loads(p.read_text()) for p in env_dir.glob("*.json")}
    assert set(envs) == {"workerpool0-0", "workerpool1-0", "workerpool1-1"}
    cluster = json.loads(envs["workerpool0-0"]["CLUSTER_SPEC"])["cluster"]
    assert len(cluster["workerpool0"]) == 1 and len(cluster["workerpool1"]) == 2
    addresses = cluster["workerpool0"] + cluster["workerpool1"]
    assert len(set(addresses)) == 3
    ranks = set()
    for replica, env in envs.items():
        spec = json.loads(env["CLUSTER_SPEC"])
        pool, index = replica.split("-")
        assert spec["task"] == {"type": pool, "index": int(index), "trial": ""}
        assert spec["cluster"] == cluster
        tf = json.loads(env["TF_CONFIG"])
        assert tf["cluster"] == {"chief": cluster["workerpool0"], "worker": cluster["workerpool1"]}
        assert tf["task"]["type"] == ("chief" if pool == "workerpool0" else "worker")
        assert f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}" == cluster["workerpool0"][0]
        assert env["WORLD_SIZE"] == "3"
        ranks.add(int(env["RANK"]))
    assert ranks == {0, 1, 2} and envs["workerpool0-0"]["RANK"] == "0"

    until(lambda: len([x for x in lines(progress) if "step 3" in x]) == 3, 60, "all to step")
    emulator.preempt(name)
    done = emulator.wait(name, timeout=60)
    assert done.state.name == "JOB_STATE_SUCCEEDED"
    text = lines(progress)
    starts = [x.split()[1] for x in text if x.endswith(" start")]
    assert len(starts) == 6  # every replica ran again
    first_attempt = set(starts[:3])
    told = {x.split()[1] for x in text if x.endswith(" sigterm")}
    assert first_attempt <= told  # every replica of the preempted attempt got SIGTERM
    # (a worker of attempt 2 may get one too: the job ends when the primary replica is done)
    ledger = emulator.attempts(name)
    assert [r["replicaCount"] for r in ledger] == [3, 3]
    one = emulator.service.store.attempts(name.rsplit("/", 1)[-1])[0]
    assert one.spot_usd_per_hour == pytest.approx(3 * 0.0459)

    logs = emulator.logs(name, attempt=2)
    assert sorted(entry["replica"] for entry in logs) == sorted(envs)
    # The job ends when the primary replica finishes; workers may be stopped before their last step.
    (primary,) = [entry for entry in logs if entry["replica"] == "workerpool0-0"]
    assert "step 99" in primary["text"]
    status, served = api(
        "GET", f"{emulator.endpoint}/emulator/v1/{name}/logs?replica=workerpool1-1"
    )
    assert status == 200
    assert [(e["attempt"], e["replica"]) for e in served["logs"]] == [
        (1, "workerpool1-1"),
        (2, "workerpool1-1"),
    ]


def test_capacity_queues_jobs_and_queued_time_is_not_billed(
    tmp_path, env_cache, api, make_job, until, lines
):
    progress, stop = tmp_path / "progress.txt", tmp_path / "stop"
    # The first job trains until the test creates ``stop``, not for a fixed time: on a loaded
    # machine it could otherwise end before the second job is even created.
    first_job = make_job("--steps", "20", "--progress", str(progress), "--until", str(stop))
    with Emulator(tmp_path / "state", grace_period=1.0, capacity=1, env_cache_dir=env_cache) as emu:
        first = _create(emu, api, first_job)
        until(lambda: emu.job(first).state.name == "JOB_STATE_RUNNING", 60, "the first job to run")
        [running] = emu.attempts(first)  # a running attempt is billed up to now
        assert running["endTime"] is None and running["endReason"] is None
        until(lambda: emu.attempts(first)[0]["billableSeconds"] > 0, 60, "billable time")
        second = _create(emu, api, make_job("--steps", "1", display_name="second"))
        assert emu.job(second).state.name == "JOB_STATE_QUEUED"
        assert emu.attempts(second) == []  # no VM, no attempt, nothing billed
        # The first job's head start (its billable time once the second was queued) becomes at
        # most a sixth of its billable time, and at least 5 s pass, however slow the machine.
        head = emu.attempts(first)[0]["billableSeconds"]
        until(
            lambda: emu.attempts(first)[0]["billableSeconds"] >= max(6 * head, 5.0),
            120,
            "the first job to run six times its head start",
        )
        assert emu.job(second).state.name == "JOB_STATE_QUEUED"
        stop.touch()
        assert emu.wait(first, timeout=60).state.name == "JOB_STATE_SUCCEEDED"
        assert emu.wait(second, timeout=60).state.name == "JOB_STATE_SUCCEEDED"
        [row_first] = emu.attempts(first)
        [row_second] = emu.attempts(second)
        # the second job waited for the first one's VM; that wait is queued, not billed
        assert row_second["queuedSeconds"] >= 0.8 * row_first["billableSeconds"]
        assert row_second["billableSeconds"] < row_first["billableSeconds"]

        status, err = api(
            "POST", f"{emu.endpoint}/v1/{PARENT}/customJobs", make_job(replicas=(1, 1))
        )
        assert status == 429 and "capacity for 1" in err["error"]["message"]


def test_package_from_gcs_emulator(gcs_emulator, emulator, api, make_job, toy_package):
    from kfp_spot import fs

    filesystem, path = fs.filesystem("gs://kfp-spot-test/packages/toytrain-0.1.tar.gz")
    filesystem.put(toy_package, path)
    body = make_job("--steps", "1")
    body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["packageUris"] = [
        "gs://kfp-spot-test/packages/toytrain-0.1.tar.gz"
    ]
    name = _create(emulator, api, body)
    done = emulator.wait(name, timeout=60)
    assert done.state.name == "JOB_STATE_SUCCEEDED", done.error.message


def test_a_module_that_needs_a_newer_python_than_the_images_fails_as_on_vertex(
    emulator, api, make_job, tmp_path
):
    # The replica would run on this machine's Python; the image's (3.10) has no tomllib.
    package = tmp_path / "newer-0.1.tar.gz"
    write_sdist(
        package,
        {
            "newer-0.1/pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
            'build-backend = "setuptools.build_meta"\n'
            '[project]\nname = "newer"\nversion = "0.1"\n'
            '[tool.setuptools]\npackages = ["newer"]\n',
            "newer-0.1/newer/__init__.py": "",
            "newer-0.1/newer/task.py": "from newer import config\n",
            "newer-0.1/newer/config.py": "import json\nimport tomllib\n",
        },
    )
    body = make_job()
    spec = body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]
    spec.update(packageUris=[str(package)], pythonModule="newer.task")
    name = _create(emulator, api, body)
    done = emulator.wait(name, timeout=120)
    assert done.state.name == "JOB_STATE_FAILED", done.state.name
    message = done.error.message
    assert "newer.task needs a newer Python than 3.10, the Python of " in message, message
    assert "newer/config.py, line 2: imports tomllib, which Python 3.10 does not have" in message


def test_env_values_expand_references_as_vertex_does(emulator, api, make_job, tmp_path):
    # EnvVar.value: "$(VAR_NAME)" expands from earlier variables and the service's own; an
    # unknown one is left unchanged; "$$(VAR_NAME)" is never expanded.
    env_dir = tmp_path / "env"
    body = make_job("--steps", "1", "--env-out", str(env_dir))
    body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["env"] = [
        {"name": "FIRST", "value": "one"},
        {"name": "REF", "value": "$(FIRST)-$(AIP_MODEL_DIR)"},
        {"name": "LATER", "value": "$(NOT_YET)"},
        {"name": "NOT_YET", "value": "x"},
        {"name": "ESCAPED", "value": "$$(FIRST) costs $5"},
    ]
    name = _create(emulator, api, body)
    assert emulator.wait(name, timeout=60).state.name == "JOB_STATE_SUCCEEDED"
    env = json.loads((env_dir / "workerpool0-0.json").read_text())
    assert env["REF"] == f"one-{tmp_path / 'out'}/model/"
    assert env["LATER"] == "$(NOT_YET)"
    assert env["ESCAPED"] == "$(FIRST) costs $5"


def test_cancel_while_queued_never_runs(tmp_path, env_cache, api, make_job, until):
    with Emulator(tmp_path / "state", grace_period=1.0, capacity=1, env_cache_dir=env_cache) as emu:
        first = _create(emu, api, make_job("--steps", "400"))
        until(lambda: emu.job(first).state.name == "JOB_STATE_RUNNING", 60, "the first job")
        second = _create(emu, api, make_job("--steps", "1"))
        status, _ = api("POST", f"{emu.endpoint}/v1/{second}:cancel", {})
        assert status == 200
        cancelled = emu.wait(second, timeout=30)
        assert cancelled.state.name == "JOB_STATE_CANCELLED"
        assert (cancelled.error.code, cancelled.error.message) == (1, "CANCELED")
        assert emu.attempts(second) == []
        emu.service.cancel_job(first)
        assert emu.wait(first, timeout=30).state.name == "JOB_STATE_CANCELLED"
        status, err = api("POST", f"{emu.endpoint}/v1/{first}:cancel", {})
        assert status == 400 and err["error"]["status"] == "FAILED_PRECONDITION"


def test_timeout_fails_the_job(emulator, api, make_job):
    body = make_job("--steps", "400")
    body["jobSpec"]["scheduling"]["timeout"] = "0.5s"
    name = _create(emulator, api, body)
    done = emulator.wait(name, timeout=60)
    assert done.state.name == "JOB_STATE_FAILED" and done.error.code == 4
    assert "timeout" in done.error.message
    [row] = emulator.attempts(name)
    # 400 steps of 0.05 s: left alone the job runs (and is billed) for 20 s. Stopped at its
    # timeout it is billed from 0.5 s to its stop, with room for the stop on a loaded machine
    # (SIGTERM, the trainer's exit) well short of the job's own length.
    assert 0.5 <= row["billableSeconds"] < 10


def test_random_preemptions_follow_the_seeded_policy(tmp_path, env_cache, api, make_job):
    with Emulator(
        tmp_path / "state",
        grace_period=1.0,
        preempt_every=0.4,
        seed=11,
        env_cache_dir=env_cache,
    ) as emu:
        name = _create(emu, api, make_job("--steps", "30", "--step-seconds", "0.05"))
        done = emu.wait(name, timeout=120)
        ledger = emu.attempts(name)
        seq = emu.service.store.job(name.rsplit("/", 1)[-1]).seq
    expected = [emu.policy.delay(seq, row["attempt"]) for row in ledger]
    for row, delay in zip(ledger, expected, strict=True):
        if row["endReason"] == "PREEMPTED":
            # preempted at the drawn time (plus the time the trainer takes to exit on SIGTERM)
            # (grace 1 s; the slack is for a loaded CI machine)
            assert delay <= row["billableSeconds"] < delay + 1.0 + 5.0
        else:
            # the attempt finished before its drawn preemption time came
            assert row["endReason"] == "SUCCEEDED" and delay >= row["billableSeconds"] - 0.1
    assert done.state.name in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED")
    if done.state.name == "JOB_STATE_FAILED":
        assert "STOCKOUT" in done.error.message and len(ledger) == 7


def test_capacity_is_never_exceeded(tmp_path, env_cache, api, make_job, until):
    with Emulator(tmp_path / "state", grace_period=1.0, capacity=2, env_cache_dir=env_cache) as emu:
        names = [_create(emu, api, make_job("--steps", "400")) for _ in range(3)]

        def states():
            return [emu.job(n).state.name for n in names]

        until(lambda: states().count("JOB_STATE_RUNNING") == 2, 60, "two jobs on the two VMs")
        waiting = names[states().index("JOB_STATE_QUEUED")]
        assert emu.attempts(waiting) == []  # no third VM: it waits, unbilled
        freed = next(n for n in names if n != waiting)
        emu.service.cancel_job(freed)
        until(lambda: emu.job(waiting).state.name == "JOB_STATE_RUNNING", 60, "the freed VM")
        assert states().count("JOB_STATE_RUNNING") == 2
        for name in names:
            if name != freed:
                emu.service.cancel_job(name)
        for name in names:
            assert emu.wait(name, timeout=60).state.name == "JOB_STATE_CANCELLED"
        [row] = emu.attempts(waiting)
        assert row["queuedSeconds"] > 0


ENV_READER = {
    "envread-0.1/pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
    'build-backend = "setuptools.build_meta"\n'
    '[project]\nname = "envread"\nversion = "0.1"\n'
    '[tool.setuptools]\npackages = ["envread"]\n',
    "envread-0.1/envread/__init__.py": "",
    # Read in a module the job's module imports, not in the job's module itself.
    "envread-0.1/envread/config.py": 'import os\n\nDATA = os.environ.get("MY_DATA_PATH")\n',
    "envread-0.1/envread/task.py": "import json, os, sys\n"
    "from envread import config\n"
    "with open(sys.argv[1], 'w') as f:\n"
    "    json.dump({'data': config.DATA, 'env': dict(os.environ)}, f)\n",
}


@pytest.mark.parametrize("in_job_env", [False, True])
def test_a_variable_the_code_reads_comes_from_the_job_not_this_machine(
    emulator, api, tmp_path, monkeypatch, in_job_env
):
    # On Vertex AI the job runs without the submitting shell's variables: a trainer reading
    # MY_DATA_PATH from this machine's environment ran here and failed on its first real run.
    monkeypatch.setenv("MY_DATA_PATH", "/home/me/data")
    monkeypatch.setenv("MY_UNREAD_SETTING", "1")  # read by no code of the job's: passed on
    package = write_sdist(tmp_path / "envread-0.1.tar.gz", ENV_READER)
    out = tmp_path / "seen.json"
    spec = {
        "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest",
        "packageUris": [str(package)],
        "pythonModule": "envread.task",
        "args": [str(out)],
    }
    if in_job_env:
        spec["env"] = [{"name": "MY_DATA_PATH", "value": "gs://bucket/data"}]
    body = {
        "displayName": "env",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "replicaCount": 1,
                    "pythonPackageSpec": spec,
                }
            ],
            "scheduling": {"strategy": "SPOT"},
        },
    }
    name = _create(emulator, api, body)
    assert emulator.wait(name, timeout=60).state.name == "JOB_STATE_SUCCEEDED"
    seen = json.loads(out.read_text())
    (log,) = (tmp_path / "state").rglob("workerpool0-0.log")
    note = "the job's code reads MY_DATA_PATH (read at envread/config.py, line 3)"
    if in_job_env:
        assert seen["data"] == "gs://bucket/data"
        assert note not in log.read_text()
    else:
        assert seen["data"] is None and "MY_DATA_PATH" not in seen["env"]
        assert note in log.read_text() and "launch_spot_job's env" in log.read_text()
    assert seen["env"]["MY_UNREAD_SETTING"] == "1"


def test_only_what_this_machine_alone_sets_is_left_out():
    from kfp_spot.packaging.envreads import host_only

    read = {
        n: "t.py, line 1" for n in ("MINE", "HOME", "KFP_SPOT_X", "SET_BY_JOB", "AIP_MODEL_DIR")
    }
    base = {n: "1" for n in (*read, "UNREAD")}
    hidden = host_only(read, base, {"AIP_MODEL_DIR": "/m/"}, {"SET_BY_JOB": "2"})
    assert hidden == {"MINE": "t.py, line 1"}


def _wheel(path, tag):
    """A real wheel of one empty module, tagged ``tag`` (``cp311-cp311-manylinux2014_x86_64``)."""
    import zipfile

    info = "fastops-1.0.dist-info"
    files = {
        "fastops.py": "",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: fastops\nVersion: 1.0\n",
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(name, text)
    return path


def test_a_wheel_the_images_python_refuses_fails_the_job_as_pip_on_vertex_does(
    emulator, api, make_job, tmp_path
):
    # This machine's pip (CPython 3.11 here; a Mac's for a macOS wheel) installs it; the
    # image's Linux x86_64 CPython 3.10 refuses it.
    tag = "cp311-cp311-manylinux2014_x86_64"
    wheel = _wheel(tmp_path / f"fastops-1.0-{tag}.whl", tag)
    body = make_job("--steps", "1")
    spec = body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]
    spec["packageUris"] = [*spec["packageUris"], str(wheel)]
    done = emulator.wait(_create(emulator, api, body), timeout=60)
    assert done.state.name == "JOB_STATE_FAILED", done.state.name
    message = done.error.message
    assert f"{wheel.name!r} is a wheel for manylinux2014_x86_64 ({tag})" in message, message
    assert "(Linux x86_64, CPython 3.10) refuses it as not a supported wheel" in message


def test_a_requirement_on_a_file_of_this_machine_fails_the_job_as_on_vertex(
    emulator, api, make_job, tmp_path
):
    # This machine's pip installs 'fastops @ file:///...' from the file here; a training VM
    # has no such file.
    lib = _wheel(tmp_path / "fastops-1.0-py3-none-any.whl", "py3-none-any")
    package = write_sdist(
        tmp_path / "localdep-0.1.tar.gz",
        {
            "localdep-0.1/pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
            'build-backend = "setuptools.build_meta"\n'
            f'[project]\nname = "localdep"\nversion = "0.1"\n'
            f'dependencies = ["fastops @ {lib.as_uri()}"]\n'
            '[tool.setuptools]\npackages = ["localdep"]\n',
            "localdep-0.1/localdep/__init__.py": "",
            "localdep-0.1/localdep/task.py": "import fastops\n",
        },
    )
    body = make_job()
    spec = body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]
    spec.update(packageUris=[str(package)], pythonModule="localdep.task")
    done = emulator.wait(_create(emulator, api, body), timeout=120)
    assert done.state.name == "JOB_STATE_FAILED", done.state.name
    message = done.error.message
    assert "package 'localdep' requires 'fastops" in message, message
    assert f"{lib.as_uri()}', a file of this machine" in message, message
