"""What `kfp-spot run` prints: a few lines of progress on the terminal, the executor logs in files.

The pieces (output capture, kfp.local's task events, the monitor, the console) are tested on
their own; one small real kfp.local pipeline checks the task-event hook against the installed
kfp; two `kfp-spot run` processes (slow) check the whole: a successful run and a failing one.
"""

import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import click
import pytest

from kfp_spot.progress import (
    Console,
    JobView,
    LocalRunProgress,
    OutputCapture,
    RunMonitor,
    replica_output,
)
from kfp_spot.progress.capture import task_log_name
from kfp_spot.progress.kfplocal import TaskEvent, dag_tasks, parse
from kfp_spot.progress.taskoutput import error_excerpt, task_output, task_warnings

KFP_SPOT = Path(sys.executable).with_name("kfp-spot")
EXAMPLE_TRAINER = Path(__file__).resolve().parents[1] / "examples" / "trainer"
# Anything a terminal would interpret: escape sequences, carriage returns, other C0 controls.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# The status a non-TTY gets as a line every 30 s of a run: "[0:39] launch-spot-job | ...".
STATUS_LINE = re.compile(r"kfp-spot: \[\d+:\d\d\] [\w, -]+ \| ")


def _fd_identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


# --- OutputCapture ----------------------------------------------------------------------------


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_capture_logs_every_level_and_restores_fds_on_error(tmp_path, error):
    before = {fd: _fd_identity(fd) for fd in (1, 2)}
    streams = (sys.stdout, sys.stderr)
    root = logging.getLogger()
    root_state = (root.level, list(root.handlers))
    with pytest.raises(error), OutputCapture(tmp_path / "logs"):
        assert {fd: _fd_identity(fd) for fd in (1, 2)} != before
        print("a python-level line")
        print("an stderr line", file=sys.stderr)
        logging.getLogger("kfp_spot.somewhere").info("an INFO record")
        os.write(1, b"an fd-level line\n")
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; print('child out'); print('child err', file=sys.stderr)",
            ],
            check=True,
        )
        raise error("boom")
    assert {fd: _fd_identity(fd) for fd in (1, 2)} == before
    assert (sys.stdout, sys.stderr) == streams
    assert (root.level, list(root.handlers)) == root_state
    log = (tmp_path / "logs" / "pipeline.log").read_text()
    for line in [
        "a python-level line",
        "an stderr line",
        "- INFO - an INFO record",
        "an fd-level line",
        "child out",
        "child err",
    ]:
        assert line in log


def test_a_stream_kept_past_the_capture_writes_where_it_stood_in_and_closes_quietly(tmp_path):
    # Something made during a run keeps sys.stderr as it was then (a logging.StreamHandler): the
    # router. Collected after the capture had closed its copy of the terminal, its close() met a
    # closed file, which Python 3.13 prints ("Exception ignored in: <..._Router ...>") at the end
    # of every `kfp-spot run`; development mode (-X dev) prints it on 3.11 too.
    script = f"""
import gc, sys
from kfp_spot.progress.capture import OutputCapture
with OutputCapture({str(tmp_path)!r}):
    held = sys.stderr
    print("captured", file=held)
print("after the capture", file=held)
held.flush()
del held
gc.collect()
"""
    run = subprocess.run(
        [sys.executable, "-X", "dev", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == "after the capture\n"
    assert "captured" in (tmp_path / "pipeline.log").read_text()


def test_a_stream_kept_past_the_capture_closes_quietly_after_its_own_stream_closed(
    tmp_path, monkeypatch
):
    # pytest's capture (or a caller's StringIO) is closed before the router kept past the run is
    # collected: Python 3.13 printed the ValueError of the router's close() at the suite's end.
    caller = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # as pytest's CaptureIO is
    monkeypatch.setattr(sys, "stderr", caller)
    with OutputCapture(tmp_path):
        held = sys.stderr
    caller.close()
    held.close()  # what the collection of the router does; raises nothing
    assert held.closed


def test_capture_sends_to_the_terminal_only_what_is_written_through_to_terminal(tmp_path, capsys):
    with OutputCapture(tmp_path) as capture:
        print("captured")
        with capture.to_terminal():
            print("shown")
            click.echo("shown by click", err=True)
            assert not sys.stdout.isatty()
    out, err = capsys.readouterr()
    assert out == "shown\n"
    assert err == "shown by click\n"
    assert "captured" in (tmp_path / "pipeline.log").read_text()
    assert "shown" not in (tmp_path / "pipeline.log").read_text()


def test_capture_splits_lines_by_the_task_of_the_writing_thread(tmp_path):
    with OutputCapture(tmp_path) as capture:
        task_log = capture.begin_task("train/it")
        sys.stdout.write("\x1b[96mhalf ")  # a line in two writes, coloured
        other = threading.Thread(target=print, args=("from another thread",))
        other.start()
        other.join()
        sys.stdout.write("a line\x1b[0m\n")
        capture.end_task()
        print("after the task")
    assert task_log == tmp_path / task_log_name("train/it")
    assert task_log.read_text() == "half a line\n"
    assert (tmp_path / "pipeline.log").read_text().splitlines() == [
        "from another thread",
        "half a line",
        "after the task",
    ]


def test_verbose_capture_also_streams_to_the_terminal_without_colours_when_not_a_tty(
    tmp_path, capsys
):
    with OutputCapture(tmp_path, verbose=True):
        print("\x1b[92mSUCCESS\x1b[0m")
    assert capsys.readouterr().out == "SUCCESS\n"
    assert (tmp_path / "pipeline.log").read_text() == "SUCCESS\n"


def test_task_log_names_are_safe_file_names():
    assert task_log_name("launch-spot-job") == "launch-spot-job.log"
    assert task_log_name("../x y") == "x_y.log"
    assert task_log_name("pipeline") == "task-pipeline.log"


# --- kfp.local's task events and a task's own output ------------------------------------------


def test_parse_reads_kfp_local_messages_as_kfp_local_formats_them():
    from kfp.local import logging_utils, status

    name = logging_utils.format_task_name("launch-spot-job")
    ok = logging_utils.format_status(status.Status.SUCCESS)
    failed = logging_utils.format_status(status.Status.FAILURE)
    pipeline = logging_utils.format_pipeline_name("spot-training")
    assert parse(f"Executing task {name}") == TaskEvent("started", "launch-spot-job")
    assert parse(f"Task {name} finished with status {ok}") == TaskEvent(
        "finished", "launch-spot-job"
    )
    assert parse(f"Task {name} finished with status {failed}") == TaskEvent(
        "finished", "launch-spot-job", ok=False
    )
    assert parse(f"Pipeline {pipeline} finished with status {failed}. Inner task failed: x") == (
        TaskEvent("pipeline_finished", "spot-training", ok=False)
    )
    assert parse(
        "Skipping task evaluate: upstream task(s) ['launch-spot-job'] failed."
    ) == TaskEvent("skipped", "evaluate", detail="upstream task(s) ['launch-spot-job'] failed.")
    assert parse("Skipping conditional task condition-1 (condition evaluated to False)") == (
        TaskEvent("skipped", "condition-1", detail="condition evaluated to False")
    )
    assert parse(f"Task {name} outputs:\n    Output: 'SUCCEEDED'") is None
    assert parse("Streamed logs:\n") is None


def test_a_skipped_condition_is_named_by_the_tasks_in_it():
    from kfp_spot.pipelines.spot_training import spot_training

    groups = dag_tasks(spot_training.pipeline_spec)
    assert groups == {"condition-1": ("promote-model",)}
    events: list[str] = []
    monitor = RunMonitor(events.append, clock_fn=FakeClock())
    monitor.groups = groups
    monitor.on_task_event(
        parse("Skipping conditional task condition-1 (condition evaluated to False)")
    )
    assert events == ["[0:00] promote-model skipped: condition evaluated to False"]


TASK_LOG = """\
10:00:00.000 - INFO - Executing task 'launch-spot-job'
10:00:00.001 - INFO - Streamed logs:

    [KFP Executor 2026-01-01 10:00:00,050 INFO]: Got executor_input:
    {
        "inputs": {
            "parameterValues": {}
        }
    }
    [KFP Executor 2026-01-01 10:00:00,100 INFO]: submitted customJobs/1 (SPOT)
    Traceback (most recent call last):
      File "/x/executor_main.py", line 1, in <module>
        main()
    ValueError: the first error

    During handling of the above exception, another exception occurred:

    Traceback (most recent call last):
      File "/x/launcher.py", line 2, in launch
        raise LaunchFailedError(message)
    kfp_spot.jobs.launcher.LaunchFailedError: USER_ERROR: the replica exited with status 2
    --- workerpool0-0 (attempt 1), last lines ---
    error: argument --epochs: must be an integer >= 1


10:00:01.000 - ERROR - Task 'launch-spot-job' finished with status FAILURE
--------------------------------------------------------------------------------
10:00:01.001 - ERROR - Pipeline 'spot-training' finished with status FAILURE.
"""


def test_task_output_is_what_the_task_printed_and_the_excerpt_starts_at_its_error():
    own = task_output(TASK_LOG)
    assert own[0] == "[KFP Executor 2026-01-01 10:00:00,100 INFO]: submitted customJobs/1 (SPOT)"
    assert own[-1] == "error: argument --epochs: must be an integer >= 1"
    assert not any(" - ERROR - " in line or set(line) == {"-"} for line in own)
    assert error_excerpt(own) == [
        "kfp_spot.jobs.launcher.LaunchFailedError: USER_ERROR: the replica exited with status 2",
        "--- workerpool0-0 (attempt 1), last lines ---",
        "error: argument --epochs: must be an integer >= 1",
    ]


def test_error_excerpt_keeps_a_traceback_quoted_in_the_error_message():
    own = [
        "[KFP Executor] submitted customJobs/1",
        "Traceback (most recent call last):",
        '  File "/x/launcher.py", line 2, in launch',
        "kfp_spot.jobs.launcher.LaunchFailedError: USER_ERROR: replica exited with status 1",
        "--- workerpool0-0 (attempt 1), last lines ---",
        "Traceback (most recent call last):",
        '  File "/x/trainer/task.py", line 280, in main',
        "RuntimeError: no training data",
    ]
    assert error_excerpt(own) == own[3:]


def test_error_excerpt_keeps_the_line_naming_the_field_before_a_quoted_traceback():
    # Before: the excerpt began at the quoted traceback's last line, so the console showed
    # "ModuleNotFoundError: No module named 'sklearn'" without saying which check failed.
    own = [
        "[KFP Executor] building house-prices (project)",
        "evaluation_entry_point: acme_reg.scoring does not import in kfp-spot's runtime image:",
        "Traceback (most recent call last):",
        '  File "<string>", line 1, in <module>',
        '  File "/env/acme_reg/scoring.py", line 2, in <module>',
        "    from sklearn.metrics import r2_score",
        "ModuleNotFoundError: No module named 'sklearn'",
        "Declare what it imports in the package's dependencies.",
    ]
    assert error_excerpt(own) == own[1:]  # with the frame naming the user's file and line
    printed = ["Epoch 1:", *own[2:]]  # the task's own output before a crash: not an error line
    assert error_excerpt(printed) == own[-2:]
    # A component that logs its error (for the task's console) and then exits with it: once.
    logged = ["[KFP Executor 2026-12-03 15:28:06,047 ERROR]: " + own[1], *own[2:]]
    assert error_excerpt(logged + own[1:]) == own[1:]


def test_an_evaluate_that_raised_is_shown_once_with_the_frames_of_the_users_code():
    # Before: the excerpt began at the logged copy's last line ("ZeroDivisionError: ...") and
    # went on with the whole message again, without the step that failed in front.
    message = [
        "evaluate_checkpoint: evaluation with regressor.metrics:evaluate failed (exit 4):",
        "regressor.metrics:evaluate raised:",
        "Traceback (most recent call last):",
        '  File "/site/kfp_spot/evaluation/runner.py", line 124, in main',
        "    result = function(checkpoint_dir, params)",
        '  File "/env/regressor/metrics.py", line 12, in evaluate',
        "    1 / 0",
        "ZeroDivisionError: division by zero",
    ]
    own = [
        "[KFP Executor 2026-12-05 06:32:15,461 INFO]: evaluating /run/job/checkpoints step 6",
        *[f"eval batch {i}" for i in range(200)],  # what the user's evaluate() printed
        "[KFP Executor 2026-12-05 06:32:17,435 ERROR]: " + message[0],
        *message[1:],
        *message,
    ]
    assert error_excerpt(own) == message


def test_an_error_logged_and_then_exited_with_is_shown_once_without_the_tasks_info_lines():
    # Before: the last 20 lines, so the executor's "Looking for component ..." records came
    # first and the one error twice (its log record, then the task's exit message).
    error = (
        "evaluate_checkpoint: checkpoint: no kfp-spot checkpoint under /run/job/checkpoints: "
        "expected step-<n>/manifest.json directories, found ckpt-0.pkl"
    )
    own = [
        "[KFP Executor 2026-12-05 06:36:58,473 INFO]: Looking for component `evaluate_checkpoint`",
        '[KFP Executor 2026-12-05 06:36:58,473 INFO]: Loading KFP component "evaluate_checkpoint"',
        f"[KFP Executor 2026-12-05 06:36:58,600 ERROR]: {error}",
        error,
    ]
    assert error_excerpt(own) == [error]
    two_lines = [*own[:2], f"{own[2]}:", "  the detail", f"{error}:", "  the detail"]
    assert error_excerpt(two_lines) == [f"{error}:", "  the detail"]


def test_an_error_without_a_traceback_is_shown_without_the_tasks_progress_records():
    # Before: the last 20 lines, so a package that does not build was told after eight lines
    # of "Looking for component", "Building sdist..." and the image's warning.
    error = "source: regressor/data.py line 12: invalid syntax (the built package would fail)"
    own = [
        "[KFP Executor 2026-12-05 06:47:45,861 INFO]: Looking for component `prepare_package`",
        "kfp-spot: warning: executor image sklearn-cpu.1-6 reached its end of availability",
        "[KFP Executor 2026-12-05 06:47:46,185 INFO]: building syn (project)",
        "[KFP Executor 2026-12-05 06:47:47,152 INFO]: Building wheel...",
        "[KFP Executor 2026-12-05 06:47:47,152 WARNING]: the build printed a warning",
        error,
    ]
    assert error_excerpt(own) == own[-2:]
    assert error_excerpt(own[:4]) == own[:4]  # nothing but progress: what there is


def test_error_excerpt_without_a_traceback_is_the_last_lines_and_long_ones_are_elided():
    lines = [f"line {i}" for i in range(100)]
    assert error_excerpt(lines, limit=5) == lines[-5:]
    long_error = ["Traceback (most recent call last):", '  File "x"', "E: message"]
    long_error += [f"detail {i}" for i in range(50)]
    excerpt = error_excerpt(long_error, limit=8)
    assert len(excerpt) == 8
    assert excerpt[:3] == ["E: message", "detail 0", "... (44 lines left out)"]
    assert excerpt[-1] == "detail 49"


# --- RunMonitor -------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _row(attempt, start=True, end=None, billable=0.0):
    row = {"attempt": attempt, "strategy": "SPOT", "machineType": "n1-standard-4"}
    row["billableSeconds"] = billable
    if start:
        row["startTime"] = "2026-01-01T00:00:00Z"
    if end:
        row["endReason"] = end
    return row


def test_monitor_tells_task_and_attempt_events_once_each_in_order():
    clock = FakeClock()
    events: list[str] = []
    statuses: list[str] = []
    jobs: list[JobView] = [
        JobView("projects/local-project/locations/l/customJobs/old", "JOB_STATE_SUCCEEDED")
    ]
    step: list[int | None] = [None]
    monitor = RunMonitor(events.append, statuses.append, clock_fn=clock)
    monitor.watch(lambda: list(jobs), lambda name: step[0])  # "old" was there before: not ours
    monitor.on_task_event(TaskEvent("started", "launch-spot-job"))
    name = "projects/local-project/locations/l/customJobs/123"
    jobs.append(JobView(name, "JOB_STATE_RUNNING", (_row(1, billable=0.5),)))
    clock.now += 2
    monitor.poll()
    monitor.poll()  # nothing new: nothing said
    step[0] = 3
    jobs[-1] = JobView(name, "JOB_STATE_RUNNING", (_row(1, end="PREEMPTED", billable=1.04),))
    clock.now += 1
    monitor.poll()
    jobs[-1] = JobView(name, "JOB_STATE_RUNNING", (jobs[-1].attempts[0], _row(2, billable=4.2)))
    monitor.poll()
    monitor.refresh()
    assert (
        statuses[-1] == "[0:03] launch-spot-job | attempt 2 running for 4.2 s | checkpoint step 3"
    )
    jobs[-1] = JobView(
        name, "JOB_STATE_SUCCEEDED", (jobs[-1].attempts[0], _row(2, end="SUCCEEDED", billable=65))
    )
    step[0] = 30
    clock.now += 70
    monitor.on_task_event(TaskEvent("finished", "launch-spot-job"))  # polls first
    assert events == [
        "[0:00] launch-spot-job started",
        "[0:02]   CustomJob 123 submitted",
        "[0:02]   attempt 1 running (SPOT, n1-standard-4)",
        "[0:03]   attempt 1 preempted after 1.0 s; latest checkpoint: step 3",
        "[0:03]   attempt 2 running (SPOT, n1-standard-4)",
        "[1:13]   attempt 2 succeeded after 1:05; latest checkpoint: step 30",
        "[1:13] launch-spot-job succeeded in 1:13",
    ]
    assert statuses[-1] == ""  # nothing runs any more


def test_the_status_ends_with_the_last_line_the_running_attempt_printed(tmp_path):
    # A trainer that checkpoints once an epoch showed "no checkpoint yet" for the whole epoch:
    # its own progress, in its log in the emulator's state dir, was nowhere on the console.
    name = "projects/local-project/locations/l/customJobs/123"
    log = tmp_path / "emulator" / "logs" / "123" / "attempt-2" / "workerpool0-0.log"
    log.parent.mkdir(parents=True)
    log.write_text("loading data\n\x1b[32mepoch 1/50\x1b[0m\n 12%|#2  | 6/50\r 14%|#4  | 7/50\r")
    jobs: list[JobView] = []
    statuses: list[str] = []
    monitor = RunMonitor([].append, statuses.append, clock_fn=FakeClock())
    monitor.watch(lambda: list(jobs), lambda name: None, replica_output(tmp_path / "emulator"))
    monitor.on_task_event(TaskEvent("started", "launch-spot-job"))
    attempts = (_row(1, end="PREEMPTED"), _row(2, billable=4.2))
    jobs.append(JobView(name, "JOB_STATE_RUNNING", attempts))
    monitor.poll()
    monitor.refresh()
    assert statuses[-1] == (
        "[0:00] launch-spot-job | attempt 2 running for 4.2 s | no checkpoint yet | 14%|#4 | 7/50"
    )
    log.write_text("x" * 200 + "\n\n")
    monitor.refresh()
    assert statuses[-1].endswith(" | " + "x" * 77 + "...")
    log.unlink()  # the attempt has not printed yet: the status as before
    monitor.refresh()
    assert statuses[-1].endswith("| no checkpoint yet")


def test_a_task_without_a_job_shows_the_last_line_it_printed_in_the_status(tmp_path):
    # An evaluate() that scores for minutes showed "[3:10] evaluate-checkpoint" and nothing
    # else: what it printed went to the task's log only.
    log = tmp_path / "evaluate-checkpoint.log"
    started = TASK_LOG.split("    [KFP Executor 2026-01-01 10:00:00,100 INFO]")[0]
    log.write_text(started)  # kfp.local's record and the executor's input: nothing of its own
    statuses: list[str] = []
    monitor = RunMonitor([].append, statuses.append, clock_fn=FakeClock())
    monitor.on_task_event(TaskEvent("started", "evaluate-checkpoint"), log)
    assert statuses[-1] == "[0:00] evaluate-checkpoint"
    log.write_text(
        started
        + "    [KFP Executor 2026-01-01 10:00:00,100 INFO]: evaluating /c step 6\n"
        + "    eval batch 299/1000\n    \x1b[1meval batch 300/1000\x1b[0m\n"
    )
    monitor.refresh()
    assert statuses[-1] == "[0:00] evaluate-checkpoint | eval batch 300/1000"
    log.write_text(started + "    [KFP Executor 2026-01-01 10:00:00,100 INFO]: evaluating /c\n")
    monitor.refresh()
    assert statuses[-1] == "[0:00] evaluate-checkpoint | evaluating /c"  # without the prefix


def test_monitor_names_the_job_once_there_are_several_and_an_attempt_that_never_ran():
    events: list[str] = []
    monitor = RunMonitor(events.append, clock_fn=FakeClock())
    first, second = (
        "projects/local-project/locations/l/customJobs/1",
        "projects/local-project/locations/l/customJobs/2",
    )
    jobs: list[JobView] = []
    monitor.watch(lambda: jobs)
    jobs.append(JobView(first, "JOB_STATE_FAILED", (_row(1, start=False, end="CANCELLED"),)))
    jobs.append(JobView(second, "JOB_STATE_RUNNING", (_row(1),)))
    monitor.poll()
    assert events == [
        "[0:00]   CustomJob 1 submitted",
        "[0:00]   attempt 1 cancelled before it ran",
        "[0:00]   CustomJob 1 failed",
        "[0:00]   CustomJob 2 submitted",
        "[0:00]   CustomJob 2: attempt 1 running (SPOT, n1-standard-4)",
    ]


def test_each_jobs_attempt_lines_show_its_own_checkpoint_step():
    """Two launches at once (a ParallelFor) write two checkpoint directories: each attempt line
    names the step of its own job's directory, not the first job's."""
    events: list[str] = []
    statuses: list[str] = []
    monitor = RunMonitor(events.append, statuses.append, clock_fn=FakeClock())
    short, long = (
        "projects/local-project/locations/l/customJobs/4",
        "projects/local-project/locations/l/customJobs/6",
    )
    steps = {short: 4, long: 2}
    jobs: list[JobView] = []
    monitor.watch(lambda: list(jobs), steps.get)  # the jobs there now are not this run's
    monitor.on_task_event(TaskEvent("started", "launch-spot-job"))
    jobs += [JobView(name, "JOB_STATE_RUNNING", (_row(1),)) for name in (short, long)]
    monitor.poll()
    jobs[0] = JobView(short, "JOB_STATE_SUCCEEDED", (_row(1, end="SUCCEEDED", billable=2),))
    monitor.poll()
    steps[long] = 6
    jobs[1] = JobView(long, "JOB_STATE_SUCCEEDED", (_row(1, end="SUCCEEDED", billable=3),))
    steps[short] = 99  # read once the job had ended: a later change is not its own
    monitor.poll()
    ends = [e.split("]", 1)[1] for e in events if "succeeded after" in e]
    assert ends == [
        "   CustomJob 4: attempt 1 succeeded after 2.0 s; latest checkpoint: step 4",
        "   CustomJob 6: attempt 1 succeeded after 3.0 s; latest checkpoint: step 6",
    ]


def test_monitor_ignores_a_poll_when_the_jobs_cannot_be_read():
    events: list[str] = []
    monitor = RunMonitor(events.append, clock_fn=FakeClock())
    monitor.watch(lambda: None)
    monitor.poll()
    assert events == []


def test_failure_lines_name_the_task_its_log_and_its_own_error(tmp_path):
    log = tmp_path / "launch-spot-job.log"
    log.write_text(TASK_LOG)
    events: list[str] = []
    monitor = RunMonitor(events.append, clock_fn=FakeClock())
    monitor.on_task_event(TaskEvent("started", "launch-spot-job"), log)
    monitor.on_task_event(TaskEvent("finished", "launch-spot-job", ok=False))
    monitor.on_task_event(TaskEvent("started", "quiet"), tmp_path / "missing.log")
    monitor.on_task_event(TaskEvent("finished", "quiet", ok=False))
    assert monitor.failure_lines() == [
        f"launch-spot-job FAILED; its log: {log}",
        "  | kfp_spot.jobs.launcher.LaunchFailedError: USER_ERROR: the replica exited with "
        "status 2",
        "  | --- workerpool0-0 (attempt 1), last lines ---",
        "  | error: argument --epochs: must be an integer >= 1",
        f"quiet FAILED; its log: {tmp_path / 'missing.log'}",
        "  | (it printed nothing)",
    ]


def test_a_replica_killed_by_a_signal_is_said_to_be_in_words(tmp_path):
    # A replica the OOM killer ends leaves no traceback: its log stops mid-way and the error
    # said only "exited with a non-zero status of 137".
    log = tmp_path / "launch-spot-job.log"
    log.write_text(
        TASK_LOG.replace("status 2", "status 137 (Vertex's wording: a non-zero status)")
        .replace(
            "USER_ERROR: the replica exited with",
            "USER_ERROR: The replica workerpool0-0 exited with a non-zero status of 137. With",
        )
        .replace("error: argument --epochs: must be an integer >= 1", "loading 40 GB into memory")
    )
    monitor = RunMonitor([].append, clock_fn=FakeClock())
    monitor.on_task_event(TaskEvent("started", "launch-spot-job"), log)
    monitor.on_task_event(TaskEvent("finished", "launch-spot-job", ok=False))
    lines = monitor.failure_lines()
    assert lines[-2:] == [
        "  | loading 40 GB into memory",
        "  status 137 is 128+9: the process was killed by SIGKILL (most often out of memory: "
        "the kernel's OOM killer)",
    ]
    log.write_text(TASK_LOG)  # status 2: the trainer's own exit, said by its own output
    assert not any("is 128+" in line for line in monitor.failure_lines())


def test_kfp_locals_error_for_a_task_that_had_started_keeps_the_tasks_log(tmp_path):
    log = tmp_path / "launch-spot-job.log"
    log.write_text(TASK_LOG)
    monitor = RunMonitor([].append, clock_fn=FakeClock())
    monitor.on_task_event(TaskEvent("started", "launch-spot-job"), log)
    monitor.on_task_event(TaskEvent("errored", "launch-spot-job", ok=False, detail="boom"))
    lines = monitor.failure_lines()
    assert lines[0] == f"launch-spot-job FAILED; its log: {log}"
    assert lines[-2:] == ["  kfp.local's own error:", "  | boom"]


PACKAGE_LOG = """\
10:00:00.000 - INFO - Executing task 'prepare-package'
10:00:00.001 - INFO - Streamed logs:

    [KFP Executor 2026-01-01 10:00:00,050 INFO]: building regressor (project)
    kfp-spot: warning: executor image sklearn-cpu.1-6 reached its end of availability
    kfp-spot: warning: regressor 0.3.0 installs 65 MiB, the largest files regressor/table.bin
    kfp-spot: warning: executor image sklearn-cpu.1-6 reached its end of availability
    [KFP Executor 2026-01-01 10:00:00,100 INFO]: package regressor 0.3.0 staged

10:00:01.000 - INFO - Task 'prepare-package' finished with status SUCCESS
10:00:01.001 - WARNING - kfp-spot: warning: not the task's: kfp.local's own record
"""


def test_task_warnings_are_the_warning_lines_the_task_printed_each_once():
    assert task_warnings(PACKAGE_LOG) == [
        "executor image sklearn-cpu.1-6 reached its end of availability",
        "regressor 0.3.0 installs 65 MiB, the largest files regressor/table.bin",
    ]
    assert task_warnings(TASK_LOG) == []


def test_the_monitor_gathers_each_tasks_warnings_once_naming_every_task_that_printed_it(tmp_path):
    package, launch = tmp_path / "prepare-package.log", tmp_path / "launch-spot-job.log"
    package.write_text(PACKAGE_LOG)
    launch.write_text(
        PACKAGE_LOG.replace("prepare-package", "launch-spot-job").replace("installs", "takes")
    )
    events: list[str] = []
    monitor = RunMonitor(events.append, clock_fn=FakeClock())
    for name, log in (("prepare-package", package), ("launch-spot-job", launch)):
        monitor.on_task_event(TaskEvent("started", name), log)
        monitor.on_task_event(TaskEvent("finished", name))
    monitor.on_task_event(TaskEvent("started", "quiet"), tmp_path / "missing.log")
    # Told as each task ends (a package too large to install at every start is for acting on
    # before the training), each once a run; the run's summary lists them again.
    told = [re.sub(r"^\[[^]]*\] ", "", e) for e in events if "warning" in e]
    assert told == [
        "prepare-package: warning: executor image sklearn-cpu.1-6 reached its end of availability",
        "prepare-package: warning: regressor 0.3.0 installs 65 MiB, the largest files "
        "regressor/table.bin",
        "launch-spot-job: warning: regressor 0.3.0 takes 65 MiB, the largest files "
        "regressor/table.bin",
    ]
    assert events.index(next(e for e in events if "prepare-package succeeded" in e)) < (
        events.index(next(e for e in events if "warning" in e))
    )
    # one the run noted at its start (the executor image's end of availability) is not repeated
    events.clear()
    noted = RunMonitor(events.append, clock_fn=FakeClock())
    noted.told("executor image sklearn-cpu.1-6 reached its end of availability")
    noted.on_task_event(TaskEvent("started", "prepare-package"), package)
    noted.on_task_event(TaskEvent("finished", "prepare-package"))
    assert [re.sub(r"^\[[^]]*\] ", "", e) for e in events if "warning" in e] == [
        "prepare-package: warning: regressor 0.3.0 installs 65 MiB, the largest files "
        "regressor/table.bin"
    ]
    assert monitor.warnings() == [
        (
            "executor image sklearn-cpu.1-6 reached its end of availability",
            ("prepare-package", "launch-spot-job"),
        ),
        (
            "regressor 0.3.0 installs 65 MiB, the largest files regressor/table.bin",
            ("prepare-package",),
        ),
        (
            "regressor 0.3.0 takes 65 MiB, the largest files regressor/table.bin",
            ("launch-spot-job",),
        ),
    ]


def test_a_failed_pipeline_that_names_no_failed_task_still_has_a_failure_line():
    monitor = RunMonitor([].append, clock_fn=FakeClock())
    monitor.on_task_event(TaskEvent("started", "say-hello"))
    monitor.on_task_event(TaskEvent("finished", "say-hello"))
    assert monitor.failure_lines() == []
    monitor.on_task_event(TaskEvent("pipeline_finished", "tiny", ok=False))
    assert monitor.failure_lines() == [
        "pipeline FAILED, though no task did: kfp.local's reason is in pipeline.log"
    ]


# --- Console ----------------------------------------------------------------------------------


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_console_on_a_non_tty_writes_plain_lines_and_a_status_now_and_then():
    stream, clock = Stream(tty=False), FakeClock()
    console = Console(lambda: stream, plain_every=30, width=80, clock_fn=clock)
    console.event("task \x1b[96mx\x1b[0m\tstarted\r")
    console.status("[0:01] train | attempt 1 running")
    clock.now += 29
    console.status("[0:30] train | attempt 1 running")
    clock.now += 2
    console.status("[0:32] train | attempt 1 running")
    console.status("")
    assert stream.getvalue() == (
        "kfp-spot: task x    started\nkfp-spot: [0:32] train | attempt 1 running\n"
    )
    assert not CONTROL.search(stream.getvalue().replace("\n", ""))


def test_console_without_plain_status_prints_only_events():
    stream, clock = Stream(tty=False), FakeClock()
    console = Console(lambda: stream, plain_every=None, clock_fn=clock)
    console.status("a")
    clock.now += 1000
    console.status("b")
    console.event("done")
    assert stream.getvalue() == "kfp-spot: done\n"


def test_console_on_a_tty_rewrites_one_status_line_and_lifts_it_for_events():
    stream = Stream(tty=True)
    console = Console(lambda: stream, prefix="", width=20)
    console.status("a status longer than the terminal")
    console.status("short")
    console.event("an event")
    console.clear()
    erase = "\r\x1b[2K"
    assert stream.getvalue() == (
        f"{erase}| a status longer t"  # cut to width - 1: a wrapped line cannot be rewritten
        f"{erase}/ short"
        f"{erase}an event\n/ short"
        f"{erase}"
    )


# --- a real kfp.local pipeline (no emulator): the hook against the installed kfp -------------


def _tiny_pipeline():
    from kfp import dsl

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def say_hello() -> str:
        print("hello from the first task")
        return "hello"

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def fail_loudly(text: str):
        print(f"got {text}")
        raise ValueError("the second task's own error")

    @dsl.pipeline(name="tiny")
    def tiny():
        fail_loudly(text=say_hello().output)

    return tiny


def test_a_kfp_local_run_is_split_into_task_logs_and_its_failure_is_shown(tmp_path, capsys):
    from kfp import local

    pipeline = _tiny_pipeline()
    events: list[str] = []
    local.init(
        local.SubprocessRunner(use_venv=False),
        pipeline_root=str(tmp_path / "root"),
        raise_on_error=False,
    )
    with LocalRunProgress(tmp_path / "logs", progress=events.append) as shown:
        pipeline()
        assert shown.report_failures()
    assert [
        re.sub(r"^\[\d+:\d\d\] ", "", e).split(" in ")[0].split(" after ")[0] for e in events[1:6]
    ] == [
        "say-hello started",
        "say-hello succeeded",
        "fail-loudly started",
        "fail-loudly FAILED",
        "pipeline FAILED",
    ]
    failure = events[6:]
    assert failure[0] == f"fail-loudly FAILED; its log: {tmp_path / 'logs' / 'fail-loudly.log'}"
    assert "  | ValueError: the second task's own error" in failure
    hello = (tmp_path / "logs" / "say-hello.log").read_text()
    assert "hello from the first task" in hello
    assert "the second task's own error" not in hello
    assert "Executing task 'fail-loudly'" in (tmp_path / "logs" / "pipeline.log").read_text()
    out, err = capsys.readouterr()
    assert "KFP Executor" not in out + err  # the executor logs went to the files only


def _side_by_side_pipeline():
    """Iterations of a dsl.ParallelFor that run side by side and fail, each in its own words."""
    from kfp import dsl

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def sweep_step(lr: str):
        import time

        print(f"training with lr={lr}")
        time.sleep(2)  # both iterations run at once
        raise ValueError(f"diverged at lr={lr}")

    @dsl.pipeline(name="side-by-side")
    def side_by_side():
        with dsl.ParallelFor(["0.1", "0.01"]) as lr:
            sweep_step(lr=lr)

    return side_by_side


def test_iterations_running_side_by_side_each_keep_their_log_and_their_error(tmp_path):
    """Both iterations wrote into one `sweep-step.log` (kfp.local names them alike), indented
    twice over by kfp.local's print patch: the failure shown was two lines of neither's error."""
    from kfp import local

    events: list[str] = []
    local.init(
        local.SubprocessRunner(use_venv=False),
        pipeline_root=str(tmp_path / "root"),
        raise_on_error=False,
    )
    with LocalRunProgress(tmp_path / "logs", progress=events.append) as shown:
        _side_by_side_pipeline()()
        assert shown.report_failures()
    started = sorted(re.sub(r"^\[\d+:\d\d\] ", "", e) for e in events if "started" in e)
    assert started == ["sweep-step (2) started", "sweep-step started"]
    logs = {
        name: (tmp_path / "logs" / f"{name}.log").read_text()
        for name in ("sweep-step", "sweep-step_2")
    }
    said = {name: re.findall(r"diverged at lr=([\d.]+)", text) for name, text in logs.items()}
    assert sorted(sorted(set(v)) for v in said.values()) == [["0.01"], ["0.1"]], said
    failures = [e for e in events if e.startswith("  | ValueError: diverged at lr=")]
    assert sorted(failures) == [
        "  | ValueError: diverged at lr=0.01",
        "  | ValueError: diverged at lr=0.1",
    ], events


def _loop_item_in_a_list_pipeline():
    """A pipeline kfp.local cannot run (Vertex AI can): a loop item's field inside a list."""
    from kfp import dsl

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def show(words: list) -> str:
        return " ".join(words)

    @dsl.pipeline(name="Loop In A List")
    def loop_in_a_list():
        with dsl.ParallelFor(items=[{"lr": "0.1"}, {"lr": "0.01"}]) as config:
            show(words=["--lr", config.lr])

    return loop_in_a_list


def test_a_pipeline_kfp_local_fails_before_any_task_is_shown_with_kfp_locals_reason(tmp_path):
    from kfp import local

    events: list[str] = []
    local.init(
        local.SubprocessRunner(use_venv=False),
        pipeline_root=str(tmp_path / "root"),
        raise_on_error=False,
    )
    with LocalRunProgress(tmp_path / "logs", progress=events.append) as shown:
        _loop_item_in_a_list_pipeline()()
        assert shown.report_failures()
    failure = [e for e in events[1:] if not e.startswith("[")]
    assert re.fullmatch(r"for-loop-2-iteration-\d FAILED before it ran: kfp.local.*", failure[0])
    assert "pipelinechannel--loop-item-param-1-subvar-lr' not found" in failure[1]
    assert failure[2] == (
        "  kfp.local cannot pass a dsl.ParallelFor item's field ('lr') inside an f-string, a list "
        "or a dict (Vertex AI Pipelines can): pass the field to an input of its own, or build the "
        "value in a component of yours"
    )


def test_a_local_run_kfp_local_could_not_run_is_a_failed_run(tmp_path):
    from kfp_spot.pipelines import local as spot_local

    result = spot_local.run(
        _loop_item_in_a_list_pipeline(), {}, run_dir=tmp_path / "run", preemptions=0, progress=None
    )
    assert not result.succeeded
    assert result.outcome_text == "PIPELINE_FAILED"
    assert json.loads((tmp_path / "run" / "run.json").read_text())["outcome"] == "PIPELINE_FAILED"


def test_a_local_run_notes_what_only_a_run_on_vertex_ai_would_show(tmp_path):
    """A team's pipeline of the loaded launch YAML without .set_caching_options(False), named so
    that the SDK's PipelineJob ID is refused: both passed a local run in silence (it never caches
    and makes no PipelineJob); submitted with the SDK, the second run on Vertex AI replayed the
    launch without training. (kfp.local fails this pipeline before any task runs: cheap.)"""
    from kfp import components, dsl

    from kfp_spot.pipelines import local as spot_local

    root = Path(__file__).resolve().parents[1]
    launch = components.load_component_from_file(
        str(root / "components" / "launch_spot_job" / "component.yaml")
    )

    @dsl.pipeline(name="2024 Sweep")
    def sweep(api_endpoint: str = ""):
        with dsl.ParallelFor(items=[{"lr": "0.1"}]) as config:
            launch(
                container_image_uri="us-docker.pkg.dev/p/r/trainer:1",
                args=["--lr", config.lr],
                api_endpoint=api_endpoint,
            ).set_cpu_limit("8")

    events: list[str] = []
    result = spot_local.run(
        sweep, {}, run_dir=tmp_path / "run", preemptions=0, progress=events.append
    )
    assert not result.succeeded
    notes = [e for e in events if e.startswith("note: ")]
    assert (
        "note: on Vertex AI Pipelines, task 'for-loop-2/launch-spot-job' (launch_spot_job) is "
        "cached: a rerun with the same inputs replays the earlier outcome without training; "
        "compile it with .set_caching_options(False)"
    ) in " ".join(notes), notes
    assert (
        "note: task 'for-loop-2/launch-spot-job' (launch_spot_job) sets its own container's "
        "machine (CPU limit 8): on Vertex AI Pipelines that sizes the task"
    ) in notes[1], notes
    assert any(
        n.startswith(
            "note: pipeline name '2024-sweep' (10 characters) makes a PipelineJob ID "
            "'2024-sweep-YYYYMMDDHHMMSS' Vertex AI refuses: the name must start with a letter"
        )
        for n in notes
    ), notes


def test_a_pipeline_output_named_outcome_of_its_own_does_not_end_the_run_in_a_traceback(tmp_path):
    """A team's pipeline whose `outcome` output is no launch outcome ("shipped") ended the run,
    after it succeeded, in `ValueError: 'shipped' is not a valid Outcome`, with no run.json."""
    from typing import NamedTuple

    from kfp import dsl

    from kfp_spot.pipelines import local as spot_local

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def verdict() -> str:
        return "shipped"

    class Outputs(NamedTuple):
        outcome: str

    @dsl.pipeline(name="Has Outcome")
    def has_outcome() -> Outputs:
        return Outputs(outcome=verdict().output)

    result = spot_local.run(has_outcome, {}, run_dir=tmp_path / "run", preemptions=0, progress=None)
    assert result.succeeded
    assert json.loads((tmp_path / "run" / "run.json").read_text())["outcome"] == "SUCCEEDED"


def test_pipeline_outputs_named_metrics_and_passed_of_another_type_are_left_out(tmp_path):
    """A team's `metrics` output that is text (a summary line) ended the run, after it
    succeeded, in `AttributeError: 'str' object has no attribute 'metadata'`, with no run.json."""
    from typing import NamedTuple

    from kfp import dsl

    from kfp_spot.pipelines import local as spot_local

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def summary() -> str:
        return "accuracy=0.9"

    class Outputs(NamedTuple):
        metrics: str
        passed: str

    @dsl.pipeline(name="Text Metrics")
    def text_metrics() -> Outputs:
        line = summary().output
        return Outputs(metrics=line, passed=line)

    result = spot_local.run(
        text_metrics, {}, run_dir=tmp_path / "run", preemptions=0, progress=None
    )
    assert result.succeeded and result.metrics == {} and result.passed is None
    assert json.loads((tmp_path / "run" / "run.json").read_text())["outcome"] == "SUCCEEDED"


# --- `kfp-spot run` end to end (slow) ---------------------------------------------------------


# A successful run's console is checked on the run of tests/test_pipeline_local.py, which
# asserts what that run did too (one whole run for both).


@pytest.mark.slow
def test_a_failing_run_shows_the_failing_task_and_its_own_error(tmp_path):
    source = tmp_path / "trainer"
    shutil.copytree(EXAMPLE_TRAINER, source)
    task = source / "trainer" / "task.py"
    task.write_text(
        task.read_text().replace(
            "def main(argv: Sequence[str] | None = None) -> int:\n",
            "def main(argv: Sequence[str] | None = None) -> int:\n"
            "    raise RuntimeError('no training data in /data/digits: the trainer gave up')\n",
        )
    )
    run_dir = tmp_path / "run"
    args = ["--run-dir", str(run_dir), "--source", str(source), "--preemptions", "0"]
    proc = subprocess.run(
        [str(KFP_SPOT), "run", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1
    assert proc.stdout.startswith("outcome:            PIPELINE_FAILED\n")
    assert re.search(r"^kfp-spot: \[\d+:\d\d\] launch-spot-job FAILED after ", proc.stderr, re.M)
    assert re.search(r"attempt 1 FAILED after [\d.]+ s", proc.stderr)
    report = proc.stderr[proc.stderr.index("kfp-spot: launch-spot-job FAILED; its log: ") :]
    assert str(run_dir.resolve() / "logs" / "launch-spot-job.log") in report.splitlines()[0]
    assert "LaunchFailedError" in report  # the launcher's own error ...
    assert (
        "RuntimeError: no training data in /data/digits: the trainer gave up" in report
    )  # ... with the replica's
    assert "evaluate-checkpoint skipped" in proc.stderr
    # A slow run adds a status line every so often (time-driven): the bound is on the rest.
    lines = [
        line
        for line in proc.stdout.splitlines() + proc.stderr.splitlines()
        if not STATUS_LINE.match(line)
    ]
    # ... and what was added on purpose: where the training printed (training_logs) and the
    # tasks' warnings at the end (here the default executor image's end of availability, noted
    # at the start, so not told again as prepare-package ends)
    assert len(lines) <= 47, "\n".join(lines)
    assert lines[-1].startswith("kfp-spot: warning: prepare-package, launch-spot-job: ")
    assert not CONTROL.search((proc.stdout + proc.stderr).replace("\n", ""))


def test_monitor_says_where_a_job_went_when_the_launch_moved_regions():
    events: list[str] = []
    monitor = RunMonitor(events.append, clock_fn=FakeClock())
    home = "projects/local-project/locations/us-central1/customJobs/1"
    again = "projects/local-project/locations/us-central1/customJobs/2"
    away = "projects/local-project/locations/europe-west4/customJobs/3"
    jobs: list[JobView] = []
    monitor.watch(lambda: jobs)
    for name in (home, again, away):
        jobs.append(JobView(name, "JOB_STATE_QUEUED"))
        monitor.poll()
    assert [e for e in events if "submitted" in e] == [
        "[0:00]   CustomJob 1 submitted",
        "[0:00]   CustomJob 2 submitted",
        "[0:00]   CustomJob 3 submitted in europe-west4",
    ]


def test_a_job_that_ends_without_success_says_why_before_the_launch_moves_on():
    # A stockout failed the job in the first region and the next one was submitted in the second,
    # with nothing on the console between: the service's words are what says why.
    events: list[str] = []
    monitor = RunMonitor(events.append, clock_fn=FakeClock())
    first = "projects/local-project/locations/us-central1/customJobs/1"
    second = "projects/local-project/locations/europe-west4/customJobs/2"
    stockout = "Resources are insufficient in region: us-central1.\nPlease try a different region."
    jobs: list[JobView] = []
    monitor.watch(lambda: jobs)
    monitor.poll()  # the jobs there before the run: none
    jobs = [JobView(first, "JOB_STATE_RUNNING", (_row(1),))]
    monitor.poll()
    jobs = [
        JobView(first, "JOB_STATE_FAILED", (_row(1, end="PREEMPTED", billable=2),), stockout),
        JobView(second, "JOB_STATE_RUNNING", (_row(1),)),
    ]
    monitor.poll()
    monitor.poll()  # said once
    assert events[2:] == [
        "[0:00]   attempt 1 preempted after 2.0 s",
        "[0:00]   CustomJob 1 failed: Resources are insufficient in region: us-central1. "
        "Please try a different region.",
        "[0:00]   CustomJob 2 submitted in europe-west4",
        "[0:00]   CustomJob 2: attempt 1 running (SPOT, n1-standard-4)",
    ]


def test_a_cancelled_job_is_said_without_the_code_name_as_its_reason():
    events: list[str] = []
    monitor = RunMonitor(events.append, clock_fn=FakeClock())
    name = "projects/local-project/locations/l/customJobs/1"
    jobs: list[JobView] = []
    monitor.watch(lambda: jobs)
    monitor.poll()  # the jobs there before the run: none
    jobs = [
        JobView(name, "JOB_STATE_CANCELLED", (_row(1, start=False, end="CANCELLED"),), "CANCELED")
    ]
    monitor.poll()
    assert events[-1] == "[0:00]   CustomJob 1 cancelled"


def test_a_job_whose_code_failed_is_said_by_its_attempt_line_only():
    events: list[str] = []
    monitor = RunMonitor(events.append, clock_fn=FakeClock())
    name = "projects/local-project/locations/l/customJobs/1"
    jobs: list[JobView] = []
    monitor.watch(lambda: jobs)
    monitor.poll()  # the jobs there before the run: none
    jobs = [JobView(name, "JOB_STATE_FAILED", (_row(1, end="FAILED"),), "replica exited 1")]
    monitor.poll()
    assert events == [
        "[0:00]   CustomJob 1 submitted",
        "[0:00]   attempt 1 running (SPOT, n1-standard-4)",
        "[0:00]   attempt 1 FAILED after 0.0 s",
    ]
