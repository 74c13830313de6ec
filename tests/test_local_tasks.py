"""kfp_spot.pipelines.local_tasks stands in for kfp.local's ``run_local_subprocess`` during a
local run: it must keep taking what kfp.local passes, and kfp.local must still look it up by
name at each task (else the stand-in is never called and an interrupted run leaves its task)."""

from __future__ import annotations

import inspect
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from kfp.local import subprocess_task_handler

from kfp_spot.pipelines import local_tasks


def test_the_stand_in_takes_what_kfp_local_passes():
    ours = inspect.signature(local_tasks._run_local_subprocess)
    theirs = inspect.signature(subprocess_task_handler.run_local_subprocess)
    assert list(ours.parameters) == list(theirs.parameters)


def test_kfp_local_calls_it_through_its_module_at_each_task():
    source = inspect.getsource(subprocess_task_handler)
    calls = re.findall(r"(?<![.\w])run_local_subprocess\(", source)
    assert len(calls) >= 2  # its definition and the task's call, by the module-global name


def test_the_stand_in_is_in_place_only_while_a_run_is_active():
    original = subprocess_task_handler.run_local_subprocess
    with local_tasks.tasks_end_with_the_run():
        with local_tasks.tasks_end_with_the_run():
            assert subprocess_task_handler.run_local_subprocess is local_tasks._run_local_subprocess
        assert subprocess_task_handler.run_local_subprocess is local_tasks._run_local_subprocess
    assert subprocess_task_handler.run_local_subprocess is original


def test_an_interrupt_another_thread_takes_stops_a_task_that_prints_nothing(tmp_path, capsys):
    # The kernel hands a signal sent to the process to any of its threads. One taken by another
    # thread (the emulator's, the progress display's) must still stop a task that is silent.
    started, ran_out = tmp_path / "started", tmp_path / "ran-out"
    script = (
        "import pathlib, signal, sys, time\n"
        "def stop(*_):\n"
        "    print('stopped on SIGTERM', flush=True)\n"
        "    sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"pathlib.Path({str(started)!r}).write_text('x')\n"
        "time.sleep(60)\n"  # silent: no line for the main thread to wake up on
        f"pathlib.Path({str(ran_out)!r}).write_text('x')\n"
    )
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    gone = threading.Event()

    def interrupt_from_another_thread() -> None:
        while not started.exists() and not gone.wait(0.05):
            pass
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # this thread takes it

    other = threading.Thread(target=interrupt_from_another_thread)
    try:
        with local_tasks.tasks_end_with_the_run():
            other.start()
            with pytest.raises(KeyboardInterrupt):
                subprocess_task_handler.run_local_subprocess([sys.executable, "-c", script])
        assert not ran_out.exists()  # stopped by the interrupt, not left to run to its end
        assert "stopped on SIGTERM" in capsys.readouterr().out  # its last words are in its log
    finally:
        gone.set()
        other.join()
        signal.signal(signal.SIGINT, previous)


def test_each_task_has_a_temporary_directory_of_its_own_removed_when_it_ends(
    tmp_path, monkeypatch, capsys
):
    # KFP's command for a Python component writes its source into a `mktemp -d` of its own:
    # on Vertex AI that goes with the task's container; locally it must go with the task.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where this process's temp dirs go
    script = 'd=$(mktemp -d) && echo src > "$d/ephemeral_component.py" && echo "$d $GIVEN"'
    with local_tasks.tasks_end_with_the_run():
        for _ in range(2):
            status = subprocess_task_handler.run_local_subprocess(
                ["sh", "-c", script], {"GIVEN": "by-kfp-local"}
            )
            assert status == 0
    printed = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert [given for _, given in printed] == ["by-kfp-local"] * 2  # kfp.local's env still set
    made = [Path(directory) for directory, _ in printed]
    assert made[0].parent != made[1].parent  # one temporary directory per task
    assert all(path.parent.parent == tmp_path for path in made)
    assert list(tmp_path.iterdir()) == []  # both gone with their tasks


@pytest.mark.parametrize("stop", local_tasks.STOP_SIGNALS, ids=lambda s: s.name)
def test_a_stop_signal_interrupts_a_run_only_where_the_program_left_it_to_python(stop):
    def own(signum, frame):  # a program's own handler is its business
        pass

    previous = signal.signal(stop, signal.SIG_DFL)  # as a program starts
    try:
        with local_tasks.tasks_end_with_the_run():
            with local_tasks.tasks_end_with_the_run(), pytest.raises(KeyboardInterrupt):
                signal.raise_signal(stop)  # as Ctrl-C: the run stops its task
            assert signal.getsignal(stop) != signal.SIG_DFL  # the outer run's still
        assert signal.getsignal(stop) == signal.SIG_DFL  # put back by the last exit
        for kept in (own, signal.SIG_IGN):  # nohup ignores SIGHUP
            signal.signal(stop, kept)
            with local_tasks.tasks_end_with_the_run():
                assert signal.getsignal(stop) is kept
            assert signal.getsignal(stop) is kept
    finally:
        signal.signal(stop, previous)


def test_the_python_stand_in_takes_what_kfp_local_passes():
    ours = inspect.signature(local_tasks._replace_python_executable)
    theirs = inspect.signature(subprocess_task_handler.replace_python_executable)
    assert list(ours.parameters) == list(theirs.parameters)
    source = inspect.getsource(subprocess_task_handler)
    assert re.search(r"(?<![.\w])replace_python_executable\(\s*self\.full_command", source)


def test_only_the_commands_own_python3_becomes_this_interpreter(tmp_path):
    # kfp.local replaced "python3" in the task's inputs too: a source below
    # .../lib/python3.13/site-packages (an installed kfp-spot's example) became a missing path.
    from kfp import local

    from tests.local_echo import echo

    given = "/venv/lib/python3.13/site-packages/kfp_spot/examples python3 ~/python3-work"
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path))
    with local_tasks.tasks_end_with_the_run():
        assert echo(text=given).output == given


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Python has -P from 3.11")
def test_a_task_does_not_import_the_modules_of_the_folder_the_run_started_in(tmp_path, monkeypatch):
    # `cd my-project && kfp-spot run --source .` with a tokenize.py there: every task imported
    # it instead of Python's own (inspect imports tokenize) and failed before its first line.
    # A task's container on Vertex AI holds none of that folder.
    from kfp import local

    from tests.local_echo import echo

    project = tmp_path / "my project"
    project.mkdir()
    (project / "tokenize.py").write_text("raise SystemExit('the project tokenize.py imported')\n")
    monkeypatch.chdir(project)
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    with local_tasks.tasks_end_with_the_run():
        assert echo(text="ran").output == "ran"


def test_the_interpreter_may_live_in_a_folder_whose_name_has_spaces(tmp_path, capsys):
    # A venv under "~/My Projects": its python was put unquoted into the task's shell command.
    folder = tmp_path / "My Projects" / "bin"
    folder.mkdir(parents=True)
    python = folder / "python"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    with local_tasks.tasks_end_with_the_run():
        command = subprocess_task_handler.replace_python_executable(
            ["sh", "-ec", "exec python3 -c 'print(6 * 7)'"], str(python)
        )
        assert subprocess_task_handler.run_local_subprocess(command) == 0
    assert "42" in capsys.readouterr().out


@pytest.mark.skipif(not hasattr(os, "WNOWAIT"), reason="needs waitid(WNOWAIT) to keep a zombie")
def test_stopping_a_task_that_just_ended_is_quiet_where_the_group_answers_eperm(monkeypatch):
    # macOS answers killpg on a group whose processes have exited, not yet reaped, with EPERM
    # (Linux with success): a Ctrl-C right as a task ends must not turn into a PermissionError.
    process = subprocess.Popen(
        [sys.executable, "-c", "pass"], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    reader = threading.Thread(target=process.stdout.read)
    reader.start()
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # exited, still a zombie
    sent = []

    def macos_killpg(pgid, signum):
        sent.append(signum)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(local_tasks.os, "killpg", macos_killpg)
    local_tasks._stop(process, reader)
    assert sent == [signal.SIGTERM]
    assert process.returncode == 0
    process.stdout.close()


@pytest.mark.skipif(sys.platform != "linux", reason="MAX_ARG_STRLEN is Linux's")
def test_a_task_whose_inputs_are_too_long_for_one_argument_fails_with_a_line(capsys):
    # A parameter of some hundred kB (a long training_args list) is in the executor input, one
    # argument: the exec's E2BIG ended `kfp-spot run` with a traceback.
    inputs = "x" * (local_tasks.MAX_ARG_BYTES + 10)
    assert local_tasks._run_local_subprocess(["sh", "-c", "true", inputs]) == 1
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("kfp-spot: error: the task cannot start: its command is more than")
    assert f"has {local_tasks.MAX_ARG_BYTES + 10} bytes, and Linux takes 131072 in one" in line
