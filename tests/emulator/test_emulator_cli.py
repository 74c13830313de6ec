"""``kfp-spot emulator start|preempt|logs``, and nothing lost when the emulator is SIGKILLed."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from kfp_spot.cli import main
from tests.cli_in_process import run_cli
from tests.emulator.conftest import http, progress_lines, toy_job_body, wait_until

PARENT = "projects/local-project/locations/us-central1"
KFP_SPOT = str(Path(sys.executable).parent / "kfp-spot")


class Server:
    """``kfp-spot emulator start`` in a subprocess; waits for the endpoint line it prints."""

    def __init__(self, state_dir: Path, env_cache: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                KFP_SPOT,
                "emulator",
                "start",
                "--port",
                "0",
                "--state-dir",
                str(state_dir),
                "--grace-period",
                "1",
                "--env-cache-dir",
                str(env_cache),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            # As started from a terminal: under nohup (or a CI runner that ignores SIGHUP) the
            # emulator would inherit the ignored SIGHUP and, by design, keep ignoring it.
            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(
            target=lambda: [lines.put(x) for x in self.proc.stdout], daemon=True
        ).start()
        try:
            line = lines.get(timeout=60)
        except queue.Empty:
            self.proc.kill()
            pytest.fail("the emulator printed no endpoint within 60 s")
        self.endpoint = next(w for w in line.split() if w.startswith("http://"))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def test_sigkilled_emulator_resumes_the_job_from_its_state_dir(
    tmp_path, env_cache, make_job, api, until, lines
):
    state = tmp_path / "state"
    progress = tmp_path / "progress.txt"
    server = Server(state, env_cache)
    try:
        body = make_job("--steps", "60", "--progress", str(progress))
        status, job = api("POST", f"{server.endpoint}/v1/{PARENT}/customJobs", body)
        assert status == 200
        name = job["name"]
        # past the first heartbeat (0.5 s), so the crash leaves billable time on record
        until(lambda: any("step 20" in x for x in lines(progress)), 60, "attempt 1 to run")
        server.kill()
    finally:
        if server.proc.poll() is None:
            server.kill()
    first_pid = int(next(x for x in lines(progress) if x.endswith(" start")).split()[1])

    server = Server(state, env_cache)  # same state dir, new port
    try:
        status, got = api("GET", f"{server.endpoint}/v1/{name}")
        assert status == 200 and got["displayName"] == "toy"
        until(lambda: not _alive(first_pid), 30, "the orphaned attempt-1 process to be stopped")
        until(
            lambda: len([x for x in lines(progress) if x.endswith(" start")]) == 2,
            60,
            "attempt 2 to start",
        )
        env = {**os.environ, "KFP_SPOT_EMULATOR_ENDPOINT": server.endpoint}
        job_id = name.rsplit("/", 1)[-1]
        out = subprocess.run(
            [KFP_SPOT, "emulator", "preempt", job_id], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        if "attempt 2" not in out.stdout:  # seen once under load: show what the emulator recorded
            _, ledger = api("GET", f"{server.endpoint}/emulator/v1/{name}/attempts")
            pytest.fail(f"{out.stdout!r}; attempts {ledger}; progress {lines(progress)}")

        def finished():
            _, job = api("GET", f"{server.endpoint}/v1/{name}")
            return job["state"] in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED") and job

        done = until(finished, 60, "the job to finish")
        assert done["state"] == "JOB_STATE_SUCCEEDED"
        _, ledger = api("GET", f"{server.endpoint}/emulator/v1/{name}/attempts")
        reasons = [r["endReason"] for r in ledger["attempts"]]
        assert reasons == ["EMULATOR_RESTARTED", "PREEMPTED", "SUCCEEDED"]
        assert ledger["attempts"][0]["billableSeconds"] > 0  # running time up to the crash

        out = subprocess.run(
            [KFP_SPOT, "emulator", "logs", name, "--attempt", "3"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("==> attempt 3 workerpool0-0 <==")
        assert "step 59" in out.stdout
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=30) == 0
    finally:
        if server.proc.poll() is None:
            server.kill()


def test_cli_arguments_are_checked():
    runner = CliRunner()
    result = runner.invoke(main, ["emulator", "start", "--preempt-at", "5,soon"])
    assert result.exit_code == 2 and "'soon' is not a number of seconds" in result.output
    result = runner.invoke(main, ["emulator", "start", "--capacity", "n1-standard-4:2"])
    assert result.exit_code == 2 and "TYPE=N" in result.output
    result = runner.invoke(main, ["emulator", "preempt", "123", "--endpoint", "http://127.0.0.1:9"])
    assert result.exit_code == 1 and "cannot reach the emulator" in result.output
    result = runner.invoke(main, ["emulator", "logs", "123", "--state-dir", "/nonexistent"])
    assert result.exit_code == 2 and "--endpoint" in result.output


def test_start_flags_reach_the_emulator(tmp_path, env_cache, make_job, api, until):
    server = Server(
        tmp_path / "state", env_cache, "--preempt-at", "0.3,0.3", "--capacity", "n1-standard-4=1"
    )
    try:
        status, err = api(
            "POST", f"{server.endpoint}/v1/{PARENT}/customJobs", make_job(replicas=(1, 1))
        )
        assert status == 429 and "capacity for 1" in err["error"]["message"]
        body = make_job("--steps", "20")  # 1 s: outlives the 0.3 s preemptions
        status, job = api("POST", f"{server.endpoint}/v1/{PARENT}/customJobs", body)
        assert status == 200

        def ledger():
            _, answer = api("GET", f"{server.endpoint}/emulator/v1/{job['name']}/attempts")
            rows = answer["attempts"]
            return len(rows) == 3 and rows[-1]["endReason"] and rows

        rows = until(ledger, 60, "three attempts")
        assert [r["endReason"] for r in rows] == ["PREEMPTED", "PREEMPTED", "SUCCEEDED"]
        assert all(0.3 <= r["billableSeconds"] < 2.5 for r in rows[:2])
    finally:
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=30)


@dataclasses.dataclass(frozen=True)
class StoppedRun:
    """An emulator that ran a long job (and a failing one), then was stopped by a signal."""

    state: Path
    progress: Path  # the long job's progress file
    exit_code: int  # the emulator's
    failed_job: str | None  # the failing job's name, when one was run
    failure: str  # its error message


def _run_then_stop(tmp: Path, env_cache: Path, toy_package: str, stop: int, *, failing: bool):
    # A space in the state dir: the failed job's log command is copied into a shell as it is.
    state, progress = tmp / "state dir", tmp / "progress.txt"
    server = Server(state, env_cache)
    failed_job, failure = None, ""
    try:
        if failing:  # first: it fails within the long job's run
            body = toy_job_body(toy_package, tmp, "--steps", "2", "--exit-code", "3")
            status, job = http("POST", f"{server.endpoint}/v1/{PARENT}/customJobs", body)
            assert status == 200
            failed_job = job["name"]

            def failed():
                _, got = http("GET", f"{server.endpoint}/v1/{failed_job}")
                return got["state"] == "JOB_STATE_FAILED" and got

            failure = wait_until(failed, 60, "the job to fail")["error"]["message"]
        body = toy_job_body(toy_package, tmp, "--steps", "600", "--progress", str(progress))
        status, _ = http("POST", f"{server.endpoint}/v1/{PARENT}/customJobs", body)
        assert status == 200
        wait_until(
            lambda: any("step 5" in x for x in progress_lines(progress)), 60, "the job to run"
        )
        server.proc.send_signal(stop)
        exit_code = server.proc.wait(timeout=30)
    finally:
        if server.proc.poll() is None:
            server.kill()
    return StoppedRun(state, progress, exit_code, failed_job, failure)


@pytest.fixture(scope="module")
def sigterm_stopped(tmp_path_factory, env_cache, toy_package) -> StoppedRun:
    """One emulator start for two tests: a failed job's log command read after SIGTERM stopped
    the emulator, and the training processes SIGTERM stopped with it."""
    tmp = tmp_path_factory.mktemp("sigterm")
    return _run_then_stop(tmp, env_cache, toy_package, signal.SIGTERM, failing=True)


@pytest.fixture(scope="module", params=[signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def stopped(request, tmp_path_factory, env_cache, toy_package) -> StoppedRun:
    if request.param == signal.SIGTERM:
        return request.getfixturevalue("sigterm_stopped")
    tmp = tmp_path_factory.mktemp("sighup")
    return _run_then_stop(tmp, env_cache, toy_package, request.param, failing=False)


def test_a_stopped_emulator_stops_its_training_processes(stopped):
    # SIGTERM: kill, a supervisor; SIGHUP: the terminal it ran in was closed. Either way the
    # replicas (each in a session of its own, out of the terminal's reach) stop with it.
    assert stopped.exit_code == 0
    replica = int(
        next(x for x in progress_lines(stopped.progress) if x.endswith(" start")).split()[1]
    )
    alive = _alive(replica)
    if alive:  # not left training by a failing test
        os.killpg(replica, signal.SIGKILL)
    assert not alive


def test_a_failed_jobs_log_command_works_after_the_emulator_stopped(
    sigterm_stopped, tmp_path, capfd, monkeypatch
):
    # `kfp-spot run` stops its emulator at the end; the failure names the command to read the log
    assert sigterm_stopped.exit_code == 0
    message, state = sigterm_stopped.failure, sigterm_stopped.state
    command = message.split("check the logs: ", 1)[1].split(" (file ", 1)[0]
    assert command == (
        f"kfp-spot emulator logs {sigterm_stopped.failed_job} --state-dir {shlex.quote(str(state))}"
    )
    monkeypatch.delenv("KFP_SPOT_EMULATOR_ENDPOINT", raising=False)
    monkeypatch.chdir(tmp_path)
    # The command as a shell reads it, through kfp-spot's main.
    out = run_cli(shlex.split(command)[1:], capfd)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("==> attempt 1 workerpool0-0 <==\n"), out.stdout
    assert "step 0\nstep 1\n" in out.stdout  # the replica's own output


def test_a_port_in_use_is_one_clear_error_and_frees_the_state_dir(tmp_path, env_cache):
    from kfp_spot.emulator import Emulator, EmulatorError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(EmulatorError, match=f"cannot listen on 127.0.0.1:{port}"):
            Emulator(tmp_path / "state", port=port, env_cache_dir=env_cache).start()
    with Emulator(tmp_path / "state", env_cache_dir=env_cache):  # the lock was given back
        pass


def _foreign_database(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY)")
        db.execute("INSERT INTO jobs VALUES ('42')")


def test_a_corrupt_database_is_refused_and_left_as_it_was(tmp_path, env_cache):
    from kfp_spot.emulator import Emulator, EmulatorError

    state = tmp_path / "state"
    state.mkdir()
    (state / "emulator.sqlite").write_bytes(b"garbage\n")
    with pytest.raises(EmulatorError, match=r"cannot use .*move it away or pick another"):
        Emulator(state, env_cache_dir=env_cache).start()
    assert (state / "emulator.sqlite").read_bytes() == b"garbage\n"


def test_another_versions_database_is_refused_and_keeps_its_rows(tmp_path, env_cache):
    from kfp_spot.emulator import Emulator, EmulatorError

    state = tmp_path / "state"
    state.mkdir()
    _foreign_database(state / "emulator.sqlite")
    with pytest.raises(EmulatorError, match="another kfp-spot version"):
        Emulator(state, env_cache_dir=env_cache).start()
    with contextlib.closing(sqlite3.connect(state / "emulator.sqlite")) as db:
        assert db.execute("SELECT id FROM jobs").fetchall() == [("42",)]


def test_a_state_dir_that_cannot_be_made_is_one_clear_error(tmp_path):
    (tmp_path / "file").write_text("")
    result = CliRunner().invoke(
        main, ["emulator", "start", "--state-dir", str(tmp_path / "file" / "state")]
    )
    assert result.exit_code == 1, result.output
    assert result.output.startswith("kfp-spot: error: cannot use the state dir ")
    assert len(result.output.splitlines()) == 1


def test_an_environment_cache_that_cannot_be_made_is_one_clear_error_at_start(tmp_path):
    """Not at each job: every job would fail preparing its environment, after the start."""
    (tmp_path / "file").write_text("")
    cache = tmp_path / "file" / "cache"
    result = CliRunner().invoke(
        main,
        ["emulator", "start", "--port", "0", "--state-dir", str(tmp_path / "state"),
         "--env-cache-dir", str(cache)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert result.output == (
        f"kfp-spot: error: cannot use the environment cache {cache}: Not a directory; pick a "
        "writable directory (--env-cache-dir, or $KFP_SPOT_CACHE_DIR)\n"
    )


@pytest.mark.parametrize(
    "endpoint",
    [
        "notaurl",
        "ftp://x",
        "http://h:99999",
        "http://h:1/v1",
        "http://[::1",  # urlsplit's ValueError traceback
        "http://h:1?x=1",  # the query swallowed the path each command appends
        "http://h:1#",
        "http://\udcff:1",  # a shell's undecodable byte: http.client's UnicodeEncodeError
    ],
)
def test_an_endpoint_that_is_not_http_host_port_is_a_usage_error(endpoint):
    result = CliRunner().invoke(
        main, ["emulator", "jobs"], env={"KFP_SPOT_EMULATOR_ENDPOINT": endpoint}
    )
    assert result.exit_code == 2, result.output
    assert f"{endpoint!r} is not an emulator endpoint; give http://HOST:PORT" in result.output
    assert len(result.output.splitlines()) == 1


@pytest.mark.parametrize(
    ("make", "found"),
    [
        (lambda d: (d / "endpoint").mkdir(), "{d}/endpoint is a directory, not the endpoint file"),
        (lambda d: os.mkfifo(d / "endpoint"), "{d}/endpoint is not a regular file"),
        (lambda d: None, "{d}/endpoint is missing"),
        (lambda d: d.rmdir(), "{d} does not exist"),
    ],
)
def test_a_state_dir_without_an_endpoint_file_says_what_is_there(tmp_path, make, found):
    # A directory named `endpoint` was reported as a missing file.
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    make(state_dir)
    result = CliRunner().invoke(
        main,
        ["emulator", "jobs", "--state-dir", str(state_dir)],
        env={"KFP_SPOT_EMULATOR_ENDPOINT": ""},
    )
    assert result.exit_code == 2, result.output
    (line,) = result.output.splitlines()
    assert line.startswith("kfp-spot: error: no emulator endpoint: pass --endpoint "), line
    assert f"({found.format(d=state_dir)}" in line, line


@pytest.mark.parametrize(
    ("content", "held"),
    [(b"", "is empty"), (b"http://127.0.0.1:8", "holds 'http://127.0.0.1:8', not a whole line")],
)
def test_an_endpoint_file_cut_short_is_not_called(tmp_path, content, held):
    # A partial line is a valid URL of another port: it was called (another emulator's jobs).
    (tmp_path / "endpoint").write_bytes(content)
    result = CliRunner().invoke(main, ["emulator", "jobs", "--state-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert " ".join(result.output.split()) == (
        f"kfp-spot: error: the endpoint file {tmp_path / 'endpoint'} {held}: an emulator writes "
        "http://HOST:PORT and a newline once it serves; start one with `kfp-spot emulator start "
        f"--state-dir {tmp_path}`, or pass --endpoint"
    )


def test_an_emulator_that_is_starting_is_not_reached_at_its_last_runs_port(tmp_path):
    """The endpoint file of the last run names a port that may be another emulator's by now: a
    starting emulator removes it when it takes the state dir, and the CLI says it is starting."""
    from kfp_spot.emulator.service import Service

    (tmp_path / "endpoint").write_text("http://127.0.0.1:9\n")  # the last run's
    service = Service(tmp_path)  # holds the state dir, not serving yet
    try:
        assert not (tmp_path / "endpoint").exists()
        result = CliRunner().invoke(main, ["emulator", "jobs", "--state-dir", str(tmp_path)])
    finally:
        service.stop()
    assert result.exit_code == 1, result.output
    assert " ".join(result.output.split()) == (
        f"kfp-spot: error: the emulator of {tmp_path} is starting: {tmp_path / 'endpoint'} is "
        "written once it serves; try again in a moment, or pass --endpoint"
    )


def test_the_endpoint_file_is_written_whole(tmp_path, monkeypatch):
    """Written as a temp file renamed over it: a reader never sees a partial line."""
    from kfp_spot.emulator import statedir

    renamed = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append((a, b)), real_replace(a, b)))
    statedir.write_endpoint(tmp_path, "http://127.0.0.1:8080")
    assert (tmp_path / "endpoint").read_bytes() == b"http://127.0.0.1:8080\n"
    [(tmp, target)] = renamed
    assert os.path.dirname(tmp) == str(tmp_path) and target == str(tmp_path / "endpoint")


@pytest.mark.parametrize("command", ["logs", "preempt", "attempts"])
@pytest.mark.parametrize(
    "job",
    [
        f"{PARENT}/customJobs/\u00e9",  # the HTTP client's UnicodeEncodeError traceback
        f"{PARENT}/customJobs/1 2",  # http.client's InvalidURL traceback
        "projects/../../../etc",  # another path of the emulator
        f"{PARENT}/customJobs/1?replica=x",
        f"{PARENT}/models/1",
        "",
    ],
)
def test_a_job_name_that_is_no_custom_job_name_is_a_usage_error(command, job, tmp_path):
    (tmp_path / "logs" / "etc").mkdir(parents=True)  # a stopped emulator's state dir
    for where in (["--endpoint", "http://127.0.0.1:1"], ["--state-dir", str(tmp_path)]):
        result = CliRunner().invoke(main, ["emulator", command, job, *where])
        assert result.exit_code == 2, result.output
        assert result.output.startswith(
            f"kfp-spot: error: Invalid value for JOB_NAME: {job!r}: give "
            "projects/P/locations/L/customJobs/ID or the numeric ID"
        ), result.output
        assert len(result.output.splitlines()) == 1


@pytest.mark.parametrize("command", ["logs", "preempt"])
@pytest.mark.parametrize("replica", ["x&y=1", "bogus", "workerpool4-0", "workerpool0-01"])
def test_a_replica_that_is_no_replica_name_is_a_usage_error(command, replica):
    # It was sent as it was: `logs --replica bogus` printed "no logs yet" and exited 0, as if
    # the replica were still to start; no Vertex replica is ever called that.
    args = ["emulator", command, f"{PARENT}/customJobs/1", "--replica", replica]
    result = CliRunner().invoke(main, [*args, "--endpoint", "http://127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert f"{replica!r} is not a replica name; Vertex names replicas workerpoolP-I" in (
        result.output
    )
    assert len(result.output.splitlines()) == 1


def test_an_attempt_past_int32_is_a_usage_error():
    # The emulator reads attempt as an int32: its 400 was the command's error, exit 1.
    args = ["emulator", "logs", "1", "--attempt", str(2**31), "--endpoint", "http://127.0.0.1:1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--attempt': 2147483648 is not in the range 1<=x<=2147483647" in (
        result.output
    )


def test_start_refuses_a_vm_drill_of_no_replica_as_a_usage_error(tmp_path):
    args = ["emulator", "start", "--state-dir", str(tmp_path), "--preempt-vm-at", "worker9-0=1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "'worker9-0' is not a replica name" in result.output


def test_logs_of_an_attempt_the_job_never_had_is_an_error_not_silence(emulator, make_job, api):
    status, job = api("POST", f"{emulator.endpoint}/v1/{PARENT}/customJobs", make_job())
    assert status == 200
    status, err = api("GET", f"{emulator.endpoint}/emulator/v1/{job['name']}/logs?attempt=99")
    assert status == 404 and f"{job['name']} has no attempt 99" in err["error"]["message"]
    result = CliRunner().invoke(
        main, ["emulator", "logs", job["name"], "--attempt", "99", "--endpoint", emulator.endpoint]
    )
    assert result.exit_code == 1 and "has no attempt 99: it has " in result.output


def test_saved_logs_of_an_attempt_the_job_never_had_is_an_error(tmp_path):
    folder = tmp_path / "logs" / "123" / "attempt-1"
    folder.mkdir(parents=True)
    (folder / "workerpool0-0.log").write_text("step 0\n")
    args = ["emulator", "logs", "123", "--state-dir", str(tmp_path)]
    assert CliRunner().invoke(main, args).output == "==> attempt 1 workerpool0-0 <==\nstep 0\n"
    result = CliRunner().invoke(main, [*args, "--attempt", "2"])
    assert result.exit_code == 1, result.output
    assert result.output == (
        f"kfp-spot: error: 123 has no attempt 2 in {tmp_path}: it has attempts 1..1\n"
    )
    # a job the stopped emulator's dir does not hold: not "cannot reach the emulator" (the
    # endpoint file a run leaves behind) nor "no emulator endpoint"
    (tmp_path / "endpoint").write_text("http://127.0.0.1:9\n")
    result = CliRunner().invoke(main, ["emulator", "logs", "124", "--state-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert " ".join(result.output.split()) == (
        f"kfp-spot: error: 124 has no logs in {tmp_path}, whose emulator has stopped; the jobs "
        "there: 123"
    )


@pytest.mark.parametrize("args", [["jobs"], ["attempts", "7"], ["preempt", "7"]])
def test_the_endpoint_file_of_a_stopped_emulator_is_not_called(tmp_path, args):
    # The file outlives its emulator: "cannot reach the emulator ... is it running?", or, once
    # another emulator listened on that port, its jobs listed and its job 7 preempted.
    (tmp_path / "endpoint").write_text("http://127.0.0.1:9\n")
    result = CliRunner().invoke(main, ["emulator", *args, "--state-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert " ".join(result.output.split()) == (
        f"kfp-spot: error: the emulator of {tmp_path} is not running: {tmp_path / 'endpoint'} "
        "names http://127.0.0.1:9, where it served before it stopped; start it again with "
        f"`kfp-spot emulator start --state-dir {tmp_path}`, or pass --endpoint of one that runs"
    )


def test_saved_logs_of_a_replica_the_job_never_ran_is_an_error(tmp_path):
    # A stopped emulator starts no replica: "no logs yet" (exit 0) said one might still come.
    folder = tmp_path / "logs" / "123" / "attempt-1"
    folder.mkdir(parents=True)
    (folder / "workerpool0-0.log").write_text("step 0\n")
    args = ["emulator", "logs", "123", "--state-dir", str(tmp_path)]
    result = CliRunner().invoke(main, [*args, "--replica", "workerpool1-0"])
    assert result.exit_code == 1, result.output
    assert result.output == (
        f"kfp-spot: error: 123 has no replica workerpool1-0 in {tmp_path}: it has workerpool0-0\n"
    )
    result = CliRunner().invoke(main, [*args, "--replica", "workerpool0-0"])
    assert result.output == "==> attempt 1 workerpool0-0 <==\nstep 0\n"


def test_a_misspelt_machine_type_in_capacity_is_refused(tmp_path):
    from kfp_spot.emulator import Emulator, EmulatorError

    with pytest.raises(EmulatorError, match="'n1-standrad-4' is not a machine type"):
        Emulator(tmp_path / "state", capacity={"n1-standrad-4": 2, "*": 1})
    Emulator(tmp_path / "state", capacity={"n1-standard-4": 2, "*": 1})  # known types: taken


@pytest.mark.parametrize(
    "option",
    [
        ["--grace-period", "nan"],
        ["--preempt-every", "inf"],
        ["--preempt-vm-every", "nan"],
        ["--vm-downtime", "inf"],
        ["--stockout-seconds", "1e400"],
        ["--preempt-at", "1,nan"],
        ["--preempt-vm-at", "workerpool1-0=inf"],
    ],
)
def test_a_non_finite_number_of_seconds_is_the_options_usage_error(tmp_path, option):
    # FloatRange took nan and inf; the emulator then refused them as its own error (exit 1),
    # naming its parameter (grace_period, preempt_at[1]) instead of the option.
    result = CliRunner().invoke(main, ["emulator", "start", "--state-dir", str(tmp_path), *option])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option[0]}'" in result.output
    assert "is not a finite number of seconds" in result.output
