"""`kfp-spot jobs list|describe` against the emulator through the real JobServiceClient."""

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from kfp_spot.cli import main
from kfp_spot.emulator import Emulator
from kfp_spot.jobs.inputs import JobInputs
from kfp_spot.jobs.spec import build_custom_job
from kfp_spot.vertex import EMULATOR
from kfp_spot.vertex.client import make_job_client, resolve_endpoint

PARENT = "projects/cli-project/locations/us-central1"
KFP_SPOT = str(Path(sys.executable).with_name("kfp-spot"))
CLOSED = "http://127.0.0.1:9"  # nothing listens there


@pytest.fixture
def emulator_with_job(tmp_path):
    with Emulator(tmp_path / "state", grace_period=1.0) as emu:
        client = make_job_client(resolve_endpoint("us-central1", emu.endpoint))
        job = build_custom_job(
            JobInputs(
                project="cli-project",
                location="us-central1",
                display_name="listed-job",
                package_uris=[str(tmp_path / "missing.tar.gz")],
                python_module="trainer.task",
            ),
            target=EMULATOR,  # a local package path is the emulator's extension
        )
        created = client.create_custom_job(parent=PARENT, custom_job=job)
        yield emu, created.name


def test_list_and_describe_show_the_spot_job(emulator_with_job):
    emu, name = emulator_with_job
    runner = CliRunner()
    listed = runner.invoke(
        main, ["jobs", "list", "--project", "cli-project", "--api-endpoint", emu.endpoint]
    )
    assert listed.exit_code == 0, listed.output
    (line,) = listed.output.strip().splitlines()
    assert line.startswith(name + "\t")
    assert "\tSPOT\tlisted-job" in line
    described = runner.invoke(main, ["jobs", "describe", name, "--api-endpoint", emu.endpoint])
    assert described.exit_code == 0, described.output
    doc = json.loads(described.output)
    assert doc["name"] == name
    assert doc["jobSpec"]["scheduling"]["strategy"] == "SPOT"


def test_a_display_name_with_a_newline_or_tab_stays_on_its_jobs_line(emulator_with_job):
    # Vertex AI takes any text as a display name; written raw, it split the job's line in two
    # and added a column to the tab-separated output.
    emu, first = emulator_with_job
    client = make_job_client(resolve_endpoint("us-central1", emu.endpoint))
    job = client.get_custom_job(name=first)
    job.display_name = "two\nlines\tand a tab"
    second = client.create_custom_job(parent=PARENT, custom_job=job).name
    runner = CliRunner()
    listed = runner.invoke(
        main, ["jobs", "list", "--project", "cli-project", "--api-endpoint", emu.endpoint]
    )
    held = runner.invoke(main, ["emulator", "jobs", "--endpoint", emu.endpoint])
    for result, sep in ((listed, "\t"), (held, "  ")):
        assert result.exit_code == 0, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 2, result.output
        (line,) = [x for x in lines if x.startswith(second + sep)]
        assert line.endswith(f"{sep}two\\nlines\\tand a tab"), line


def test_describe_rejects_a_malformed_name_with_exit_2():
    result = CliRunner().invoke(main, ["jobs", "describe", "customJobs/1"])
    assert result.exit_code == 2
    assert "projects/PROJECT/locations/LOCATION/customJobs/ID" in result.output


def test_describe_in_another_location_than_the_jobs_is_refused_not_answered(emulator_with_job):
    # Vertex AI answers for a job only at its own region's endpoint: the emulator, one endpoint
    # for every region, answered it, so the command now refuses what the cloud would.
    emu, name = emulator_with_job
    args = ["jobs", "describe", name, "--api-endpoint", emu.endpoint, "--location"]
    result = CliRunner().invoke(main, [*args, "europe-west4"])
    assert result.exit_code == 2, result.output
    assert "is in 'us-central1'" in result.output and "--location" in result.output
    assert CliRunner().invoke(main, [*args, "us-central1"]).exit_code == 0


def test_describe_of_an_unknown_job_is_one_clear_error(emulator_with_job):
    emu, name = emulator_with_job
    missing = name.rsplit("/", 1)[0] + "/999"
    result = CliRunner().invoke(main, ["jobs", "describe", missing, "--api-endpoint", emu.endpoint])
    assert result.exit_code == 1
    # The job asked for, once, not the request URL with its query string.
    assert result.output == f"kfp-spot: error: NOT_FOUND: The CustomJob {missing} does not exist.\n"
    assert "http" not in result.output and "?" not in result.output


def test_a_status_api_core_has_no_class_for_is_one_clear_error():
    # api_core keeps a status it has no exception class for as a plain int on the exception; the
    # error must still be one line, not an AttributeError traceback.
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = json.dumps({"error": {"code": 599, "message": "cannot process"}}).encode()
            self.send_response(599)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{httpd.server_address[1]}"
        name = f"{PARENT}/customJobs/1"
        result = CliRunner().invoke(main, ["jobs", "describe", name, "--api-endpoint", endpoint])
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=30)
    assert result.exit_code == 1, result.output
    assert result.output == f"kfp-spot: error: 599: {name}: cannot process\n"
    assert "cannot process" in result.output
    assert "Traceback" not in result.output


def test_an_empty_stdin_to_predict_says_no_instances_were_given():
    result = CliRunner().invoke(
        main,
        ["endpoint", "predict", "projects/local-project/locations/us-central1/endpoints/1"],
        input="",
    )
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert "no instances were given on stdin" in line


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        # json's RecursionError ended the command with a traceback
        ("[" * 30000, "Invalid value for --instances: nests lists and dicts more than 100 levels"),
        # json keeps the last "instances" silently: the first list was never sent
        (
            '{"instances": [1], "instances": [2]}',
            "Invalid value for --instances: key 'instances' is given twice ([1] and [2])",
        ),
        ("[1", "Invalid value for --instances: not JSON: "),
    ],
)
@pytest.mark.parametrize("stdin", [False, True])
def test_predict_instances_that_are_no_request_are_one_line(text, needle, stdin):
    name = "projects/local-project/locations/us-central1/endpoints/1"
    args = ["endpoint", "predict", name, "--api-endpoint", "http://127.0.0.1:9"]
    result = CliRunner().invoke(
        main, args if stdin else [*args, "--instances", text], input=text if stdin else ""
    )
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert needle in line


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        # sent whole: the service refuses a request over its 1.5 MB payload limit
        ("[" + ",".join(["1.5"] * 600_000) + "]", "3000015 bytes as a request: a prediction"),
        # /dev/zero piped in was read until memory ran out: at most 4 x 1.5 MB is read
        ("0" * 7_000_000, "more than 6291456 characters: a prediction request"),
    ],
)
def test_predict_instances_past_the_payload_limit_are_refused_before_sending(text, needle):
    name = "projects/local-project/locations/us-central1/endpoints/1"
    args = ["endpoint", "predict", name, "--api-endpoint", "http://127.0.0.1:9"]
    result = CliRunner().invoke(main, args, input=text)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert needle in line and "holds at most 1572864 bytes (1.5 MB)" in line, line


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["jobs", "list"], "Vertex AI in --location"),
        (["jobs", "describe"], "Vertex AI in --location, else NAME's"),
        (["endpoint", "list"], "Vertex AI in --location"),
        (["endpoint", "describe"], "Vertex AI in NAME's location"),
        (["endpoint", "predict"], "Vertex AI in NAME's location"),
    ],
)
def test_the_api_endpoint_help_names_where_the_default_region_comes_from(args, where):
    result = CliRunner().invoke(main, [*args, "--help"], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert where in " ".join(result.output.split())
    if "--location" in where:
        assert "--location" in result.output.split("--api-endpoint")[0]


def test_jobs_list_loads_neither_gapic_nor_other_command_groups(emulator_with_job):
    # What a command imports is part of its speed: `jobs list` is one REST GET.
    emu, name = emulator_with_job
    script = (
        "import sys\n"
        "from kfp_spot.cli import main\n"
        "try:\n"
        f"    main(['jobs', 'list', '--project', 'cli-project',\n"
        f"          '--api-endpoint', {emu.endpoint!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "from kfp_spot import lightimports\n"
        "gapic_loaded = [m for m in sys.modules if m.startswith('google.cloud.aiplatform_v1')\n"
        "                and not lightimports.is_deferred(m)]\n"
        "heavy = gapic_loaded + [m for m in ('kfp', 'kfp_spot.cli.pipelines',\n"
        "         'kfp_spot.cli.emulator', 'kfp_spot.emulator') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert name in proc.stdout
    assert "HEAVY []" in proc.stdout


def test_describe_of_a_name_with_a_fragment_does_not_describe_another_job(emulator_with_job):
    emu, name = emulator_with_job
    for bad in (f"{name}#x", f"{name}?readMask=name"):
        result = CliRunner().invoke(main, ["jobs", "describe", bad, "--api-endpoint", emu.endpoint])
        assert result.exit_code == 2, result.output
        assert result.output.startswith(f"kfp-spot: error: Invalid value for NAME: {bad!r} is not")


@pytest.mark.parametrize(
    "args",
    [
        ["jobs", "describe", "projects/local-project/zones/us-central1/customJobs/1"],
        ["jobs", "describe", "projects//locations/us-central1/customJobs/1"],
        ["jobs", "describe", "projects/local-project/locations/us-central1/customJobs/"],
        ["jobs", "describe", "projects/ü/locations/us-central1/customJobs/1"],
        ["endpoint", "describe", "projects/local-project/locations/us-central1/customJobs/1"],
        [
            "endpoint",
            "predict",
            "projects/local-project/locations/us-central1/endpoints/1#x",
            "--instances=[1]",
        ],
    ],
)
def test_a_malformed_resource_name_is_refused_before_any_request(args):
    result = CliRunner().invoke(main, [*args, "--api-endpoint", "http://127.0.0.1:9"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for NAME" in result.output and "/ID (PROJECT: " in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["jobs", "list", "--project", "my-project"],
        ["jobs", "describe", "projects/my-project/locations/us-central1/customJobs/1"],
        ["endpoint", "list", "--project", "my-project"],
        ["endpoint", "describe", "projects/my-project/locations/us-central1/endpoints/1"],
    ],
)
def test_an_api_endpoint_that_is_no_url_or_host_is_refused_naming_the_flag(args):
    """`--api-endpoint notaurl` was taken as https://notaurl and asked for Google credentials."""
    result = CliRunner().invoke(main, [*args, "--api-endpoint", "notaurl"])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(
        "kfp-spot: error: Invalid value for --api-endpoint: 'notaurl' is neither a URL nor a "
        "domain name or IP address; expected http://HOST:PORT for the local emulator"
    ), line
    assert "credentials" not in line


@pytest.mark.parametrize("command", ["jobs", "endpoint"])
def test_a_bad_location_in_the_name_is_blamed_on_the_name(command):
    collection = "customJobs" if command == "jobs" else "endpoints"
    result = CliRunner().invoke(
        main, [command, "describe", f"projects/local-project/locations/y/{collection}/1"]
    )
    assert result.exit_code == 2, result.output
    assert result.output.startswith("kfp-spot: error: Invalid value for NAME: location: 'y' is not")


def test_predict_reading_a_terminal_says_what_it_waits_for():
    import os
    import pty
    import select

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [KFP_SPOT, "endpoint", "predict", f"{PARENT}/endpoints/1", "--api-endpoint", CLOSED],
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(follower)
    try:
        # before anything is typed: not a silent wait (60 s: the command's imports under load)
        assert select.select([proc.stderr], [], [], 60)[0], "nothing said while waiting"
        first = proc.stderr.readline()
        assert first.startswith("kfp-spot: reading instances from stdin"), first
        os.write(leader, b"[1]\n\x04")
        _, rest = proc.communicate(timeout=120)
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "cannot reach the API endpoint" in rest


class _HtmlPages(BaseHTTPRequestHandler):
    """A web server that is not the API: HTML error pages."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = b"<!DOCTYPE HTML>\n<html>\n<body>\n<h1>Error response</h1>\n</body>\n</html>\n"
        self.send_response(404, "File not found")
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def html_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _HtmlPages)
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=30)


def test_an_endpoint_answering_html_is_one_line_that_says_so(html_server):

    result = CliRunner().invoke(
        main, ["jobs", "list", "--project", "cli-project", "--api-endpoint", html_server]
    )
    assert result.exit_code == 1
    assert result.output == (
        f"kfp-spot: error: NOT_FOUND: {PARENT}/customJobs: File not "
        "found (an HTML page, not the API's JSON error: is --api-endpoint a Vertex AI API endpoint "
        "or the emulator?)\n"
    )
    result = CliRunner().invoke(main, ["tags", "--host", f"{html_server}/my-project/r"])
    assert result.exit_code == 1
    assert len(result.output.splitlines()) == 1 and result.output.startswith("kfp-spot: error:")
    assert result.output.endswith("File not found (an HTML page, not a registry's answer)\n")


@pytest.mark.parametrize(
    ("args", "option", "says"),
    [
        (["jobs", "list", "--project", ""], "--project", "expected a Google Cloud project ID"),
        (["jobs", "list", "--project", "My Proj"], "--project", "got 'My Proj'"),
        (["jobs", "list", "--project", "p-123456", "--location", ""], "--location", "region"),
        (["endpoint", "list", "--project", ""], "--project", "expected a Google Cloud project ID"),
        (["endpoint", "list", "--project", "p-123456", "--location", "us"], "--location", "region"),
        (
            ["jobs", "describe", f"{PARENT}/customJobs/1", "--location", ""],
            "--location",
            "not a Vertex AI region",
        ),
    ],
)
def test_a_bad_project_or_location_is_refused_before_any_request(args, option, says):
    # As `kfp-spot submit` checks them; the emulator too would refuse them, Vertex AI as well.
    # `projects//locations/...` was sent, and an --api-endpoint skipped the region's check.
    result = CliRunner().invoke(main, [*args, "--api-endpoint", CLOSED])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"kfp-spot: error: Invalid value for {option}: "), result.output
    assert says in result.output
    assert "cannot reach" not in result.output


@pytest.mark.parametrize(
    ("login", "expected"),
    [
        ("no_google_login", "no usable Google Cloud credentials"),
        ("sign_in_unreachable", "cannot reach Google's sign-in service"),
    ],
)
def test_jobs_list_on_vertex_without_a_usable_login_is_one_line(login, expected, request):
    request.getfixturevalue(login)
    result = CliRunner().invoke(
        main, ["jobs", "list", "--project", "my-proj", "--location", "us-central1"]
    )
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert expected in lines[0], lines
    if login == "no_google_login":
        assert "--api-endpoint" in lines[0]  # the emulator needs no login


def test_a_credentials_file_that_is_a_fifo_is_refused_not_waited_on(
    no_google_login, tmp_path, monkeypatch
):
    # google.auth reads GOOGLE_APPLICATION_CREDENTIALS whole: a pipe nobody wrote to held the
    # command for ever (/dev/zero: until memory ran out).
    key = tmp_path / "key.json"
    os.mkfifo(key)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    result = CliRunner().invoke(main, ["jobs", "list", "--project", "my-proj"])
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert f"(GOOGLE_APPLICATION_CREDENTIALS={key} is not a regular file)" in line, line
