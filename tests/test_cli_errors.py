"""Every bad command line is one clear line on stderr with exit code 2.

Most cases call the script's own ``main`` in the test's process (:mod:`tests.cli_in_process`: the
same parsing, checks and printing, without a process start and its imports per case). The first
usage error, the first template refusal per command, the empty path options, the compile and the
source refusals run the installed ``kfp-spot`` script: a refusal is one line with no traceback and
the right exit code from the process itself.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_in_process import run_cli

KFP_SPOT = Path(sys.executable).with_name("kfp-spot")
_DEEP_ARGS = "training_args=" + "[" * 30 + "]" * 30
SPOT_TRAINING = (
    Path(__file__).resolve().parents[1] / "pipelines" / "spot_training" / "pipeline.yaml"
)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["bogus"], "No such command 'bogus'"),
        (["run", "--preemptions", "9"], "--preemptions"),
        (["run", "--source", "/nonexistent/src"], "--source"),
        (["run", "--regions", "us-central1,europe-wst4"], "--regions"),
        (["run", "--regions", "us-central1,us-central1"], "--regions"),
        (["run", "--param", "foo"], "'foo' is not NAME=VALUE"),
        (  # the last one would win silently: a gate the user did not mean
            ["run", "--param", 'thresholds={"mse": "<=1"}', "--param", 'thresholds={"r2": 0.9}'],
            """Invalid value for --param: thresholds is given twice ('{"mse": "<=1"}' and """
            """'{"r2": 0.9}'); give each name once""",
        ),
        (
            [
                "submit",
                str(SPOT_TRAINING),
                "--project",
                "p-123456",
                "--label",
                "a=1",
                "--label",
                "a=2",
            ],
            "--label: a is given twice ('1' and '2')",
        ),
        (["submit", "/nonexistent.yaml", "--project", "p-123456"], "TEMPLATE"),
        (["compile", "--base-image", "x:1"], "needs output_dir"),
        (["jobs", "describe", "customJobs/1"], "projects/PROJECT/locations/LOCATION"),
        (
            ["jobs", "list", "--project", "local-project", "--api-endpoint", "ftp://x"],
            "Invalid value for --api-endpoint: 'ftp://x' has scheme 'ftp'",
        ),
        (["emulator", "start", "--port", "-1"], "--port"),
        (  # was exit 1, as if the emulator had failed, for a misspelt machine type
            ["emulator", "start", "--capacity", "n1-standrd-4=2"],
            "Invalid value for '--capacity': capacity: 'n1-standrd-4' is not a machine type",
        ),
        (  # the last count won silently
            ["emulator", "start", "--capacity", "n1-standard-4=1,n1-standard-4=2"],
            "Invalid value for '--capacity': n1-standard-4 is given twice (1 and 2)",
        ),
        (  # was exit 1 from the emulator, not naming the option
            ["emulator", "start", "--capacity", "0"],
            "Invalid value for '--capacity': capacity must be an integer >= 1",
        ),
        (  # no limit at all, silently (`--capacity "$N"` with N unset)
            ["emulator", "start", "--capacity", ""],
            "Invalid value for '--capacity': is empty: give VMs per machine type as N",
        ),
        (  # no drill at all, silently (`--preempt-at "$TIMES"` with TIMES unset)
            ["emulator", "start", "--preempt-at", ""],
            "Invalid value for '--preempt-at': is empty: write e.g. 5,12.5,30",
        ),
        (  # the emulator's error (exit 1), naming no option
            ["emulator", "start", "--host", " "],
            "Invalid value for '--host': is empty: name an interface, e.g. 127.0.0.1",
        ),
        (  # staged into a folder named "gs:" in the working directory, and the run went on
            ["run", "--param", "staging_uri=gs:/my-bucket/staging"],
            "prepare_package input staging_uri: 'gs:/my-bucket/staging' is not a URI (gs: "
            "without '//')",
        ),
        (["run", "--param", "staging_uri=gs://"], "staging_uri: 'gs://' names no bucket"),
        (  # json's RecursionError traceback, and the whole value echoed in the line
            ["run", "--param", "thresholds=" + "[" * 5000],
            "parameter thresholds is of type Dict; '" + "[" * 74 + "...[' is not one (nests lists "
            "and dicts more than 20 levels",
        ),
        (
            ["submit", str(SPOT_TRAINING), "--project", "p-123456", "--param", _DEEP_ARGS],
            "is not one (nests lists and dicts more than 20 levels deep",
        ),
        # A shell passes an undecodable byte ($'\xff') as a lone surrogate: protobuf's ParseError
        # and the HTTP client's UnicodeEncodeError tracebacks.
        (
            [
                "submit",
                str(SPOT_TRAINING),
                "--project",
                "p-123456",
                "--param",
                'thresholds={"acc\udcff": ">=0.9"}',
            ],
            "parameter 'thresholds': 'acc\\udcff' is not valid Unicode text (a lone surrogate)",
        ),
        *(
            (
                [
                    group,
                    "list",
                    "--project",
                    "local-project",
                    "--api-endpoint",
                    "http://127.0.0.1:9",
                    "--filter",
                    'display_name="\udcff"',
                ],
                "Invalid value for '--filter': 'display_name=\"\\udcff\"' is not valid Unicode",
            )
            for group in ("jobs", "endpoint")
        ),
        # Another tool's spelling of an option (gcloud's --region, a registry's address) points
        # at ours where the command has it: click's guess by spelling was `--help`, or nothing.
        (
            ["jobs", "list", "--project", "p-123456", "--region", "europe-west4"],
            "No such option '--region'. Did you mean '--location'?",
        ),
        (
            ["pull", "spot-training", "--repo", "x"],
            "No such option '--repo'. Did you mean '--host'?",
        ),
        (  # click's own guesses stay beside it
            ["run", "--region", "europe-west4"],
            "No such option '--region'. (Did you mean one of: '--location', '--preemptions', "
            "'--regions'?)",
        ),
        (["compile", "--region", "x"], "No such option '--region'. (see"),  # none to point at
        # An unknown command: guesses among all of a group's commands (the lazy top-level group
        # had loaded none, so click guessed nothing), and another tool's name for one of them.
        (["comple"], "No such command 'comple'. Did you mean 'compile'? (see `kfp-spot --help`)"),
        (["job", "list"], "No such command 'job'. Did you mean 'jobs'?"),
        (["jobs", "get", "x"], "No such command 'get'. Did you mean 'describe'?"),
        (["download", "spot-training"], "No such command 'download'. Did you mean 'pull'?"),
        (  # replaced by the run's own emulator without a word (one started apart saw nothing)
            ["run", "--param", "api_endpoint=http://127.0.0.1:8080"],
            "--param api_endpoint=... is for --vertex; a local run starts its own emulator",
        ),
        (  # the emulator's drill options were dropped without a word: no drill on Vertex AI
            ["run", "--vertex", "--project", "p-123456", "--preemptions", "3", "--run-dir", "r"],
            "--run-dir, --preemptions: for a local run only, not with --vertex",
        ),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args, needle, capfd, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a default run directory would be claimed here
    if args[0] in ("bogus", "comple", "job"):  # the installed script: no command loaded yet
        proc = subprocess.run([str(KFP_SPOT), *args], capture_output=True, text=True, timeout=120)
    else:
        proc = run_cli(args, capfd)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("kfp-spot: error:")
    assert needle in lines[0]
    assert proc.stdout == ""


_TASK = b"pipelineInfo: {name: x}\ncomponents: {comp-train: {executorLabel: exec-train}}\n"


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"a: [1\n", "not YAML"),
        # PyYAML's composer recurses per level: a RecursionError traceback before. A thousand
        # levels are twice what it reaches; deeper text only makes its scanner slower (quadratic).
        (b"[" * 1000 + b"]" * 1000, "not YAML (nested too deeply to read"),
        (b"\xd3\xff\x00binary", "not YAML"),
        # A tab where YAML wants spaces: libyaml's parser takes it, but KFP and the Vertex AI SDK
        # read templates with PyYAML's own, which refuses it; so does every check here.
        (b"pipelineInfo: {name: x}\nroot:\t{dag: {tasks: {}}}\n", "not YAML"),
        (b"", "the file is empty"),
        # Aliases of aliases ("billion laughs"): parsed at once, then KFP's parse of the spec
        # ran for ever; an alias inside its own list, for ever too.
        (
            b"pipelineInfo: {name: x}\nroot: {dag: {tasks: {}}, inputDefinitions: {parameters: "
            + b"{p: {parameterType: LIST, defaultValue: [&a0 [1,1,1,1,1,1,1,1,1,1]"
            + b"".join(
                b", &a%d [%s]" % (i, b",".join([b"*a%d" % (i - 1)] * 10)) for i in range(1, 8)
            )
            + b"]}}}}\n",
            "not YAML (its aliases (*name) expand it to more than 1000",
        ),
        (b"a: &a [*a]\n", "not YAML (an alias (*name) refers to a list or mapping that holds it)"),
        (b"- 1\n- 2\n", "not a compiled pipeline or component spec"),
        (b"pipelineInfo: {name: x}\n", "not a compiled pipeline or component spec"),
        (b"root: {dag: 5}\npipelineInfo: {name: x}\n", "not a compiled pipeline KFP can load"),
        (  # a field the pipeline spec's schema lacks, which KFP reads only as the run starts
            b"root: {dag: {tasks: {}}, bogusField: 1}\npipelineInfo: {name: x}\n",
            "not a compiled pipeline KFP can load (Failed to parse root field: ",
        ),
        # References that name nothing parse, and kfp.local met them only at that task, with a
        # KeyError traceback after the tasks before it had run (a hand-edited template).
        (
            _TASK + b"root: {dag: {tasks: {train: {componentRef: {name: comp-tain}}}}}\n",
            "not a compiled pipeline KFP can run (task 'train' runs component 'comp-tain', "
            "which components does not hold; ",
        ),
        (
            _TASK + b"root: {dag: {tasks: {train: {componentRef: {name: comp-train}}}}}\n",
            "not a compiled pipeline KFP can run (component 'comp-train' runs executor "
            "'exec-train', which deploymentSpec.executors does not hold)",
        ),
        (
            _TASK
            + b"deploymentSpec: {executors: {exec-train: {container: {image: python:3.11}}}}\n"
            + b"root: {dag: {tasks: {train: {componentRef: {name: comp-train}, "
            + b"dependentTasks: [prepare]}}}}\n",
            "not a compiled pipeline KFP can run (task 'train' waits for task 'prepare', which "
            "its DAG does not hold)",
        ),
    ],
)
@pytest.mark.parametrize("command", ["run", "submit"])
def test_a_template_that_is_not_a_compiled_pipeline_is_one_line(
    tmp_path, command, content, needle, capfd
):
    template = tmp_path / "template.yaml"
    template.write_bytes(content)
    if command == "run":
        args = ["run", "--template", str(template), "--run-dir", str(tmp_path / "run")]
    else:
        args = ["submit", str(template), "--project", "p-123456"]
    if content == b"a: [1\n":  # the installed script itself
        proc = subprocess.run([str(KFP_SPOT), *args], capture_output=True, text=True, timeout=120)
    else:
        proc = run_cli(args, capfd)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"kfp-spot: error: template {template}: {needle}")
    assert not (tmp_path / "run").exists()  # nothing started


def test_a_compile_output_dir_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "yamls"
    proc = subprocess.run(
        [str(KFP_SPOT), "compile", "--output-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(
        f"kfp-spot: error: cannot write the YAMLs: Not a directory ({out}"
    )
    assert "give --output-dir a directory that can be made and written" in proc.stderr


def test_a_source_file_prepare_package_cannot_build_is_refused_before_the_run(tmp_path):
    source = tmp_path / "pyproject.toml"  # a file of the project, not the project
    source.write_text('[project]\nname = "mine"\nversion = "1"\n')
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [str(KFP_SPOT), "run", "--source", str(source), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("kfp-spot: error: source: ")
    assert "is a file but neither a .py script nor a source archive (.tar.gz" in error
    assert "emulator listening" not in proc.stderr  # refused before anything started
    assert not run_dir.exists() or not any(run_dir.iterdir())


def test_a_cache_dir_that_cannot_be_made_is_refused_before_the_run(tmp_path, capfd, monkeypatch):
    # Before: the run started, packaged the source, then its CustomJob failed "before it ran"
    # with "[Errno 17] File exists", naming neither the cache nor the variable that chose it.
    (tmp_path / "a-file").write_text("")
    run_dir = tmp_path / "run"
    monkeypatch.setenv("KFP_SPOT_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    proc = run_cli(["run", "--run-dir", str(run_dir)], capfd)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(
        f"kfp-spot: error: the package environment cache {tmp_path / 'a-file' / 'cache'} cannot "
        "be made (Not a directory): point KFP_SPOT_CACHE_DIR (else XDG_CACHE_HOME) at a writable"
    )
    assert not run_dir.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--run-dir", ""],
        ["run", "--run-dir", "  "],
        ["emulator", "start", "--state-dir", ""],
        ["emulator", "start", "--env-cache-dir", " "],
        ["compile", "--output-dir", ""],
        ["registry", "serve", "--root", ""],
        ["pull", "-o", "", "spot-training", "--host", "http://127.0.0.1:9/my-project/r"],
    ],
)
def test_an_empty_path_option_is_refused_not_read_as_the_working_directory(tmp_path, args):
    # `--run-dir "$DIR"` with DIR unset: the run, the emulator's state or the YAMLs went into
    # the working directory, beside whatever it held.
    proc = subprocess.run(
        [str(KFP_SPOT), *args], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    option = next(a for a in args if a.startswith("-"))
    assert lines[0].startswith(f"kfp-spot: error: Invalid value for '{option}'"), lines[0]
    assert "is empty: give a path, or leave the option out for its default" in lines[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dry_run", [["--dry-run"], []])
def test_a_region_only_kfp_spot_extra_regions_allows_is_one_line_when_the_sdk_refuses_it(
    dry_run, capfd, monkeypatch
):
    # The way the location error points to: aiplatform.init and PipelineJob then refused the
    # region with a ValueError traceback (their own list), dry run or not, nothing sent.
    monkeypatch.setenv("KFP_SPOT_EXTRA_REGIONS", "mars-central9")
    args = ["submit", str(SPOT_TRAINING), "--project", "p-123456", "--location", "mars-central9"]
    args += ["--pipeline-root", "gs://my-bucket/root", "--skip-image-check", *dry_run]
    proc = run_cli(args, capfd)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("kfp-spot: error: location: google-cloud-aiplatform "), line
    assert "submits to no region 'mars-central9' (KFP_SPOT_EXTRA_REGIONS lets" in line


@pytest.mark.parametrize("command", ["submit", "push"])
def test_a_template_that_is_a_fifo_is_not_said_to_be_missing(tmp_path, command, capfd):
    # "template t.yaml: no such file (compile it first)", for a file that is there.
    fifo = tmp_path / "t.yaml"
    os.mkfifo(fifo)
    where = (
        ["--project", "p-123456"] if command == "submit" else ["--host", "http://h:1/my-project/r"]
    )
    proc = run_cli([command, str(fifo), *where], capfd)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"{fifo} is not a regular file" in line and "give " in line, line
    assert "does not exist" not in line and "no such file" not in line, line


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--run-dir", "PATH"],
        ["registry", "serve", "--root", "PATH", "--port", "0"],
        ["pull", "p", "--host", "http://127.0.0.1:9/my-project/r", "-o", "PATH"],
        ["emulator", "logs", "1", "--state-dir", "PATH"],
        ["emulator", "jobs", "--state-dir", "PATH"],
    ],
)
@pytest.mark.parametrize("kind", ["symlink loop", "name too long"])
def test_a_path_option_no_file_can_be_at_is_one_line(tmp_path, args, kind, capfd, monkeypatch):
    # pathlib's exists() and resolve() raise on these where click.Path took them as not there
    # yet: a traceback from the run, the registry, pull and the emulator's client commands.
    monkeypatch.chdir(tmp_path)
    if kind == "symlink loop":
        (tmp_path / "a").symlink_to(tmp_path / "b")
        (tmp_path / "b").symlink_to(tmp_path / "a")
        path, reason = "a", "Too many levels of symbolic links"
    else:
        path, reason = "x" * 300, "File name too long"
    option = args[args.index("PATH") - 1]
    proc = run_cli([path if a == "PATH" else a for a in args], capfd)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"kfp-spot: error: Invalid value for '{option}"), line
    assert f"cannot be used ({reason}): give another path" in line, line
    assert len(line) < 400, line  # the 300 characters cut


def test_an_endpoint_file_of_garbage_is_not_echoed_whole(tmp_path, capfd):
    (tmp_path / "endpoint").write_text("x" * 1_000_000)
    proc = run_cli(["emulator", "jobs", "--state-dir", str(tmp_path)], capfd)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"the endpoint file {tmp_path / 'endpoint'}: 'xxx" in line, line
    assert "is not an emulator endpoint; give http://HOST:PORT" in line
    assert len(line) < 600, len(line)


def test_a_source_that_is_a_fifo_is_refused_before_the_run(tmp_path, capfd):
    # The run started its emulator and failed in prepare-package (a `task.py` pipe: its read
    # waited for a writer).
    source = tmp_path / "task.py"
    os.mkfifo(source)
    run_dir = tmp_path / "run"
    args = ["run", "--source", str(source), "--run-dir", str(run_dir)]
    proc = run_cli([*args, "--param", "evaluation_entry_point=task:evaluate"], capfd)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"kfp-spot: error: source: {source} is neither a directory nor a "), line
    assert not run_dir.exists()
