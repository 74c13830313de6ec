"""`kfp-spot registry serve`, `push`, `pull`, `tags` as users run them (separate processes)."""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from kfp_spot.cli import main
from tests.cli_in_process import run_cli

KFP_SPOT = shutil.which("kfp-spot", path=str(Path(sys.executable).parent)) or "kfp-spot"


@contextmanager
def serve(root: Path, repository: str = "my-team/templates") -> Iterator[str]:
    """Run `kfp-spot registry serve --port 0 --repository REPOSITORY`; yield its base URL."""
    proc = subprocess.Popen(
        [
            KFP_SPOT,
            "registry",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--root",
            str(root),
            "--repository",
            repository,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
    try:
        try:
            first = lines.get(timeout=30)
        except queue.Empty:
            pytest.fail("registry serve printed no URL within 30 s")
        assert first.startswith("kfp-spot registry listening on http://127.0.0.1:"), (
            first + proc.stderr.read() if proc.poll() is not None else first
        )
        yield first.rsplit(" ", 1)[-1].strip()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KFP_SPOT, *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


@pytest.mark.slow
def test_push_restart_pull_through_the_cli(tmp_path: Path, template: Path):
    root = tmp_path / "root"
    with serve(root) as url:
        pushed = cli(
            "push", str(template), "--host", f"{url}/my-team/templates", "--version", "0.3.0"
        )
        assert pushed.returncode == 0, pushed.stderr
        digest = "sha256:" + hashlib.sha256(template.read_bytes()).hexdigest()
        assert pushed.stdout.split() == ["tiny-add", digest, "tags:", "0.3.0,", "latest"]

    with serve(root) as url:  # a restarted server on another port serves the same templates
        host = f"{url}/my-team/templates"
        listed = cli("tags", "tiny-add", "--host", host)
        assert listed.returncode == 0, listed.stderr
        assert [line.split() for line in listed.stdout.splitlines()] == [
            ["0.3.0", digest],
            ["latest", digest],
        ]
        packages = cli("tags", "--host", host)
        assert packages.stdout.split() == ["tiny-add"]
        pulled = cli("pull", "tiny-add", "--host", host, cwd=tmp_path)
        assert pulled.returncode == 0, pulled.stderr
        assert (tmp_path / pulled.stdout.strip()).read_bytes() == template.read_bytes()
        assert pulled.stderr == f"kfp-spot: downloading tiny-add from {host} ...\n"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["Not A Name"], "package"),
        (["tiny-add", "--tag", "no/slash"], "tag"),
        (["tiny-add", "--version", "sha256:xyz"], "version"),
    ],
)
def test_a_pull_refused_for_its_arguments_says_nothing_of_downloading(tmp_path, args, needle):
    result = CliRunner().invoke(
        main,
        [
            "pull",
            *args,
            "--host",
            "http://127.0.0.1:1/my-project/r",
            "--output",
            str(tmp_path / "t"),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "downloading" not in result.output
    (line,) = result.output.splitlines()
    assert line.startswith("kfp-spot: error:") and needle in line, line
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--version", "sha256:abc"], "tag 'sha256:abc'"),
        (["--tag", "no/slash"], "tag 'no/slash'"),
        (["--version", ""], "tag ''"),
    ],
)
def test_a_push_refused_for_its_arguments_says_nothing_of_uploading(template: Path, args, needle):
    # As pull: the tags are checked before anything is sent, so "uploading ..." was a false
    # report of an upload that never started.
    result = CliRunner().invoke(
        main, ["push", str(template), *args, "--host", "http://127.0.0.1:1/my-project/r"]
    )
    assert result.exit_code == 2, result.output
    assert "uploading" not in result.output
    errors = [line for line in result.output.splitlines() if "error:" in line]
    assert len(errors) == 1 and needle in errors[0], result.output


def test_a_bad_tag_is_the_one_line_before_any_warning_of_the_template(tmp_path, monkeypatch):
    """The tags are checked first: a bad --version came after a warning of the template's image
    that the refused push made moot."""
    from kfp_spot.pipelines import catalog

    monkeypatch.setenv("KFP_SPOT_CONFIG_DIR", str(tmp_path / "config"))  # no image records
    committed = catalog.pipeline_path("spot_training")
    host = "http://127.0.0.1:1/my-project/r"
    result = CliRunner().invoke(main, ["push", str(committed), "--version", "1 0", "--host", host])
    assert result.exit_code == 2, result.output
    (line,) = result.output.splitlines()
    assert line.startswith("kfp-spot: error: invalid tag '1 0'"), line


def test_bad_host_is_one_line_and_exit_2(template: Path):
    result = CliRunner().invoke(main, ["push", str(template), "--host", "not-a-url"])
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert line.startswith("kfp-spot: error:") and "invalid registry host 'not-a-url'" in line


def test_missing_template_is_exit_2(tmp_path: Path):
    result = CliRunner().invoke(
        main, ["push", str(tmp_path / "none.yaml"), "--host", "http://127.0.0.1:1/my-project/r"]
    )
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_pull_with_tag_and_version_is_exit_2():
    result = CliRunner().invoke(
        main,
        [
            "pull",
            "x",
            "--host",
            "http://127.0.0.1:1/my-project/r",
            "--tag",
            "a",
            "--version",
            "sha256:0",
        ],
    )
    assert result.exit_code == 2
    assert "either --tag or --version" in result.output


def test_host_comes_from_the_environment(tmp_path: Path, template: Path):
    from kfp_spot.registry import RegistryServer

    with RegistryServer(tmp_path / "root") as server:
        env = {"KFP_SPOT_REGISTRY": server.repository_url()}
        pushed = CliRunner().invoke(main, ["push", str(template)], env=env)
        assert pushed.exit_code == 0, pushed.output
        listed = CliRunner().invoke(main, ["tags", "tiny-add"], env=env)
        assert "latest" in listed.output


def test_registry_failure_is_exit_1_with_the_registrys_reason(tmp_path: Path):
    from kfp_spot.registry import RegistryServer

    with RegistryServer(tmp_path / "root") as server:
        result = CliRunner().invoke(
            main,
            [
                "pull",
                "absent",
                "--host",
                f"{server.url}/local-project/templates",
                "-o",
                str(tmp_path / "a.yaml"),
            ],
        )
    assert result.exit_code == 1
    assert "repository projects/local-project/locations/local/repositories/templates not found" in (
        result.output
    )
    assert os.listdir(tmp_path) == ["root"]


def test_serve_on_a_taken_port_is_one_line_and_exit_1(tmp_path: Path):
    from kfp_spot.registry import RegistryServer

    with RegistryServer(tmp_path / "one") as taken:
        result = CliRunner().invoke(
            main,
            ["registry", "serve", "--port", str(taken.port), "--root", str(tmp_path / "two")],
        )
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{taken.port}" in result.output


@pytest.mark.parametrize("host", ["", "  "])
def test_serve_on_an_empty_host_is_refused_not_every_interface(tmp_path: Path, host):
    # ("", port) binds every interface: the templates were served to the whole network
    result = CliRunner().invoke(
        main, ["registry", "serve", "--host", host, "--port", "0", "--root", str(tmp_path / "r")]
    )
    assert result.exit_code == 1, result.output
    (line,) = result.output.strip().splitlines()
    assert line == (
        f"kfp-spot: error: host {host!r} names no interface; give one, e.g. 127.0.0.1 (or "
        "0.0.0.0 to serve every interface on purpose)"
    )
    assert not (tmp_path / "r").exists()


def test_push_warns_of_an_image_vertex_could_not_pull(tmp_path: Path, monkeypatch):
    """A run made from a registry template (the Vertex AI console) skips `kfp-spot submit`'s
    image check: the push says when the template's image was never pushed nor released."""
    from kfp_spot import RUNTIME_IMAGE, __version__
    from kfp_spot.image import ImageRecord, remember
    from kfp_spot.pipelines import catalog
    from kfp_spot.registry import RegistryServer

    monkeypatch.setenv("KFP_SPOT_CONFIG_DIR", str(tmp_path / "config"))  # no image records
    committed = catalog.pipeline_path("spot_training")
    with RegistryServer(tmp_path / "reg", port=0) as server:
        host = server.repository_url("my-team", "templates")
        result = CliRunner().invoke(main, ["push", str(committed), "--host", host])
        assert result.exit_code == 0, result.output
        assert "warning:" in result.stderr and "which Vertex AI could not pull" in result.stderr
        assert "run in " + RUNTIME_IMAGE in result.stderr
        remember(ImageRecord(RUNTIME_IMAGE, "pushed", __version__, "sha256:1d"))
        again = CliRunner().invoke(main, ["push", str(committed), "--host", host])
        assert again.exit_code == 0, again.output
        assert "warning" not in again.stderr


@pytest.fixture(scope="module")
def good_pushed(tmp_path_factory: pytest.TempPathFactory, template: Path) -> Iterator[str]:
    """A registry holding the good template as 1 and latest: its repository URL.

    Shared by the broken-template cases (each pushes only a refused template, so 'latest' stays
    the good one throughout); the registry served and pushed to as separate processes is
    test_push_restart_pull_through_the_cli's.
    """
    from kfp_spot.registry import RegistryServer

    with RegistryServer(tmp_path_factory.mktemp("broken-pushes"), port=0) as server:
        host = server.repository_url("my-team", "templates")
        pushed = CliRunner().invoke(main, ["push", str(template), "--host", host, "--version", "1"])
        assert pushed.exit_code == 0, pushed.output
        yield host


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"a: [1\n", "not YAML"),
        (b"hello\n", "not a compiled pipeline or component spec"),
        (  # a task naming a component the file lost (a bad merge, a hand edit)
            b"pipelineInfo: {name: tiny-add}\nroot: {dag: {tasks: {add: {componentRef: "
            b"{name: comp-add}}}}}\n",
            "not a compiled pipeline KFP can run (task 'add' runs component 'comp-add'",
        ),
        (b"root: {dag: {tasks: {}}}\n", "has no pipelineInfo.name"),
    ],
)
def test_a_broken_template_is_refused_and_latest_keeps_the_good_one(
    tmp_path: Path, good_pushed: str, content: bytes, needle: str, capfd
):
    # Before: a non-YAML file or one KFP cannot read was a traceback; one with a dangling
    # reference was uploaded and moved 'latest' to it, so every default pull got a broken run.
    broken = tmp_path / "broken.yaml"
    broken.write_bytes(content)
    host = good_pushed
    before = run_cli(["tags", "tiny-add", "--host", host], capfd)
    assert before.returncode == 0 and "latest" in before.stdout, before.stderr
    args = ["push", str(broken), "--host", host, "--version", "2"]
    # The first case runs the installed script itself: no traceback from the process.
    refused = cli(*args) if content == b"a: [1\n" else run_cli(args, capfd)
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith(f"kfp-spot: error: template {broken}: ") and needle in line
    assert run_cli(["tags", "tiny-add", "--host", host], capfd).stdout == before.stdout


def test_push_warns_of_a_platform_spec_submit_would_refuse(tmp_path: Path, template: Path):
    # `kfp-spot submit` refuses a template with a second YAML document; push took it silently.
    two = tmp_path / "two.yaml"
    two.write_text(template.read_text() + "---\nplatforms:\n  kubernetes: {}\n")
    from kfp_spot.registry import RegistryServer

    with RegistryServer(tmp_path / "registry") as server:
        result = CliRunner().invoke(main, ["push", str(two), "--host", server.repository_url()])
        assert result.exit_code == 0, result.output
        warnings = [line for line in result.output.splitlines() if "2 YAML documents" in line]
        assert len(warnings) == 1 and "`kfp-spot submit` refuses this template" in warnings[0]
        plain = CliRunner().invoke(main, ["push", str(template), "--host", server.repository_url()])
        assert "YAML documents" not in plain.output


def test_push_without_version_tags_latest_only_and_leaves_the_teams_version_tags(
    tmp_path: Path, template: Path, template_v2: Path
):
    # kfp-spot's own version (0.1.0) was the default --version: a team's push without it moved
    # their own 0.1.0 tag to a template that is not their 0.1.0.
    from kfp_spot.registry import RegistryServer

    with RegistryServer(tmp_path / "registry") as server:
        host = server.repository_url("my-team", "templates")
        first = CliRunner().invoke(
            main, ["push", str(template), "--host", host, "--version", "0.1.0"]
        )
        assert first.exit_code == 0, first.output
        result = CliRunner().invoke(main, ["push", str(template_v2), "--host", host])
        assert result.exit_code == 0, result.output
        digest = "sha256:" + hashlib.sha256(template_v2.read_bytes()).hexdigest()
        assert result.stdout == f"tiny-add {digest} tags: latest\n"
        hints = [line for line in result.stderr.splitlines() if "--version" in line]
        assert len(hints) == 1 and "tagged 'latest' only" in hints[0], result.stderr
        listed = CliRunner().invoke(main, ["tags", "tiny-add", "--host", host])
        old = "sha256:" + hashlib.sha256(template.read_bytes()).hexdigest()
        assert [line.split() for line in listed.stdout.splitlines()] == [
            ["0.1.0", old],
            ["latest", digest],
        ]
        tagged = CliRunner().invoke(
            main, ["push", str(template_v2), "--host", host, "--version", "0.2.0"]
        )
        assert tagged.stdout == f"tiny-add {digest} tags: 0.2.0, latest\n"
        assert "tagged 'latest' only" not in tagged.stderr


def test_push_from_python_without_a_version_sets_latest_only(tmp_path: Path, template: Path):
    from kfp_spot import registry
    from kfp_spot.registry import RegistryServer

    with RegistryServer(tmp_path / "registry") as server:
        host = server.repository_url()
        result = registry.push(template, host)
        assert result.tags == ("latest",)
        assert [t.tag for t in registry.list_tags(host, "tiny-add")] == ["latest"]


def test_an_unreachable_registry_is_one_line_naming_the_cause(tmp_path: Path, template: Path):
    # urllib3's "HTTPConnectionPool(...): Max retries exceeded ... (Caused by ...)" was the
    # message; and https:// to the local (http) server said only "WRONG_VERSION_NUMBER".
    from kfp_spot.registry import RegistryServer

    refused = CliRunner().invoke(main, ["tags", "--host", "http://127.0.0.1:1/my-team/templates"])
    assert refused.exit_code == 1
    (line,) = refused.output.splitlines()
    assert line == (
        "kfp-spot: error: cannot reach the registry at http://127.0.0.1:1/my-team/templates: "
        "Connection refused (no server listens there: is `kfp-spot registry serve` running on "
        "that port?)"
    )
    with RegistryServer(tmp_path / "registry") as server:
        https = "https" + server.repository_url("my-team", "templates")[4:]
        result = CliRunner().invoke(main, ["push", str(template), "--host", https])
    assert result.exit_code == 1
    (line,) = [line for line in result.output.splitlines() if "error:" in line]
    assert "Max retries" not in line and "Pool" not in line, line
    assert line.endswith(
        f"(no https server answered there; a local `kfp-spot registry serve` speaks http: "
        f"{server.repository_url('my-team', 'templates')})"
    ), line


def test_a_package_or_tag_not_found_names_the_ones_the_repository_holds(
    tmp_path: Path, template: Path
):
    # A pipeline is filed under its compiled name and tags match case by case: "tiny_add" or
    # "V1.0" only said "not found", and the user had to list the repository to see why.
    from kfp_spot.registry import RegistryServer

    with RegistryServer(tmp_path / "registry") as server:
        host = server.repository_url("my-team", "templates")
        pushed = CliRunner().invoke(
            main, ["push", str(template), "--host", host, "--version", "V1.0"]
        )
        assert pushed.exit_code == 0, pushed.output
        out = str(tmp_path / "t.yaml")
        for args, ending in [
            (["pull", "tiny_add", "-o", out], "; the repository's packages: tiny-add"),
            (["tags", "tiny_add"], "; the repository's packages: tiny-add"),
            (["pull", "tiny-add", "--tag", "v1.0", "-o", out], "; tiny-add's tags: V1.0, latest"),
        ]:
            result = CliRunner().invoke(main, [*args, "--host", host])
            assert result.exit_code == 1, result.output
            (line,) = [line for line in result.output.splitlines() if "error:" in line]
            assert "not found" in line and line.endswith(ending), line
        missing_version = "sha256:" + "0" * 64
        result = CliRunner().invoke(
            main, ["pull", "tiny-add", "--version", missing_version, "-o", out, "--host", host]
        )
        assert result.exit_code == 1 and result.output.rstrip().endswith("not found"), result.output


def test_a_push_that_moves_a_version_tag_says_which_template_it_named(
    tmp_path: Path, template: Path, template_v2: Path
):
    # Re-pushing a changed pipeline under a released --version moved that tag without a word:
    # everyone pulling 1.0.0 got a different template from then on.
    from kfp_spot.registry import RegistryServer

    old = "sha256:" + hashlib.sha256(template.read_bytes()).hexdigest()
    with RegistryServer(tmp_path / "registry") as server:
        host = server.repository_url("my-team", "templates")
        args = ["--host", host, "--version", "1.0.0", "--tag", "stable"]
        first = CliRunner().invoke(main, ["push", str(template), *args])
        assert first.exit_code == 0 and "warning" not in first.stderr, first.output
        moved = CliRunner().invoke(main, ["push", str(template_v2), *args])
        assert moved.exit_code == 0, moved.output
        warnings = [line for line in moved.stderr.splitlines() if "warning:" in line]
        assert [w.split("warning: ", 1)[1].split(" moved")[0] for w in warnings] == [
            "tag '1.0.0' of tiny-add",
            "tag 'stable' of tiny-add",
        ], moved.stderr  # never 'latest', which moves on every push
        assert all(f"from {old}, another template" in w for w in warnings)
        assert f"`kfp-spot pull tiny-add --version {old}` still gets that one" in warnings[0]
        again = CliRunner().invoke(main, ["push", str(template_v2), *args])
        assert again.exit_code == 0 and "warning" not in again.stderr, again.output


def test_an_empty_template_and_a_comma_list_of_tags_say_what_they_are(tmp_path, template):
    # An empty file (a failed compile) was "not a compiled pipeline or component spec", and
    # `--tag prod,stable` only "invalid tag": each now says what it is and what to do.
    empty = tmp_path / "pipeline.yaml"
    empty.write_text("\n")
    host = "http://127.0.0.1:1/my-team/templates"
    result = CliRunner().invoke(main, ["push", str(empty), "--host", host])
    assert result.exit_code == 2
    assert result.output.startswith(f"kfp-spot: error: template {empty}: the file is empty ")
    result = CliRunner().invoke(main, ["push", str(template), "--host", host, "--tag", "a,b"])
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert "invalid tag 'a,b'" in line and "give each tag on its own (`--tag a --tag b`)" in line


@pytest.mark.parametrize("command", [["submit"], ["run", "--template"]])
def test_a_registry_url_for_a_template_is_told_the_pull_that_fetches_it(command):
    # The Vertex AI SDK takes a template's registry URL, so teams give it here too; it was
    # "File '...' does not exist".
    url = "https://us-central1-kfp.pkg.dev/my-proj/repo/fraud-model/1.2.0"
    result = CliRunner().invoke(main, [*command, url])
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert (
        f"{url!r} is a URL, not a file: pull the template first with `kfp-spot pull fraud-model "
        "--host https://us-central1-kfp.pkg.dev/my-proj/repo --tag 1.2.0 -o fraud-model.yaml`, "
        "then give fraud-model.yaml"
    ) in line, line


def test_a_registry_url_given_to_the_python_calls_is_told_the_pull_as_the_command_is(tmp_path):
    """vertex.dry_run(URL) was "template https:/us-central1-... does not exist (compile it
    first)", the URL mangled into a path; local.run(URL) said it does not exist."""
    from kfp_spot.pipelines import local, vertex

    url = "https://us-central1-kfp.pkg.dev/my-proj/repo/fraud-model/1.2.0"
    pull_it = "pull the template first with `kfp-spot pull fraud-model --host https://us-central1"
    with pytest.raises(vertex.SubmissionError, match=f"^{url!r} is a URL, not a file: {pull_it}"):
        vertex.dry_run(url, project="my-proj-1", pipeline_root="gs://bkt/root")
    with pytest.raises(local.LocalRunError, match=f"^{url!r} is a URL, not a file: {pull_it}"):
        local.run(url, run_dir=tmp_path / "run", progress=None)
    assert not (tmp_path / "run").exists()


def test_a_registry_url_of_no_version_a_pull_takes_says_so_not_pull_it():
    # It was told `kfp-spot pull fraud-model ... --version sha256:abc`, which pull refuses.
    url = "https://us-central1-kfp.pkg.dev/my-proj/repo/fraud-model/sha256:abc"
    result = CliRunner().invoke(main, ["submit", url])
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert f"{url!r} is a URL, not a file, and not a template's: invalid version" in line, line
    assert "kfp-spot pull" not in line


@pytest.mark.parametrize("command", [["submit"], ["run", "--template"]])
def test_a_registry_url_of_a_repository_artifact_registry_refuses_says_so_not_pull_it(command):
    # It was told the `kfp-spot pull` that fetches it, which then failed on the host.
    url = "https://us-central1-kfp.pkg.dev/proj/Templates/fraud-model/1.2.0"
    result = CliRunner().invoke(main, [*command, url])
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert f"{url!r} is a URL, not a file, and invalid registry host" in line, line
    assert "invalid project 'proj': expected a Google Cloud project ID" in line
    assert "kfp-spot pull" not in line


def test_tags_lists_the_uploads_no_tag_names_any_more(tmp_path, template, template_v2):
    # Pushed without --version, an upload is named by its digest alone once latest moves on:
    # `kfp-spot tags` showed nothing of it, so the earlier pipeline seemed gone.
    from kfp_spot import registry
    from kfp_spot.registry import RegistryServer

    with RegistryServer(tmp_path / "registry") as server:
        host = server.repository_url("my-team", "templates")
        first = registry.push(template, host)
        second = registry.push(template_v2, host)
        listed = CliRunner().invoke(main, ["tags", "tiny-add", "--host", host])
        assert listed.exit_code == 0, listed.output
        lines = listed.stdout.splitlines()
        assert lines[0].split() == ["latest", second.version]
        assert lines[1].startswith(f"-       {first.version}  untagged, uploaded 20"), lines
        assert len(lines) == 2
        assert [v for v, _ in registry.list_untagged(host, "tiny-add")] == [first.version]


def test_serving_on_every_interface_names_the_url_other_machines_use(tmp_path: Path):
    # `--host 0.0.0.0` (sharing with a team) printed only http://0.0.0.0:PORT/... URLs, which
    # no other machine can connect to.
    from kfp_spot.cli.registry import machine_name

    proc = subprocess.Popen(
        [
            KFP_SPOT,
            "registry",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--root",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    port = first.strip().rsplit(":", 1)[-1]
    assert first.startswith("kfp-spot registry listening on http://0.0.0.0:"), first
    assert (
        f"  other machines:  http://{machine_name()}:{port}/local-project/templates (this "
        "machine's name; 0.0.0.0 is no address to connect to)\n"
    ) in proc.stderr.read()


@pytest.mark.parametrize(
    ("fqdn", "hostname", "named"),
    [
        ("vm.example.com", "vm", "vm.example.com"),
        ("localhost", "vm", "vm"),  # /etc/hosts maps the host name to 127.0.0.1, as on many VMs
        ("localhost.localdomain", "build-7", "build-7"),
        ("ip6-localhost", "vm", "vm"),
    ],
)
def test_serve_on_every_interface_names_this_machine_not_localhost(
    monkeypatch, fqdn, hostname, named
):
    """`other machines:` must be a name another machine can reach: never `localhost`."""
    import socket

    from kfp_spot.cli.registry import machine_name

    monkeypatch.setattr(socket, "getfqdn", lambda *a: fqdn)
    monkeypatch.setattr(socket, "gethostname", lambda: hostname)
    assert machine_name() == named


def test_serve_creates_the_repositories_it_is_given_and_a_push_creates_none(
    tmp_path: Path, template: Path
):
    # The local registry made a repository at the first push to any PROJECT/REPO, where
    # Artifact Registry refuses a push to one never created: a typo worked here and failed there.
    from kfp_spot.registry import RegistryServer

    with serve(tmp_path / "root", "my-team/templates") as url:
        assert cli("push", str(template), "--host", f"{url}/my-team/templates").returncode == 0
        typo = cli("push", str(template), "--host", f"{url}/my-team/templtes")
        assert typo.returncode == 1, typo.stderr
        assert (
            "repository projects/my-team/locations/local/repositories/templtes not found: check "
            "PROJECT/REPO in the host, or create it (`kfp-spot registry serve --repository "
            "my-team/templtes`;"
        ) in typo.stderr
    with RegistryServer(tmp_path / "root") as server:  # the repository outlives the server
        assert server.store.repository("my-team", "templates").path.is_dir()
        assert not server.store.repository("local-project", "templates").path.exists()
    for bad, says in [
        ("team", "'team' is not PROJECT/REPO"),
        ("team/a/b", "'team/a/b' is not PROJECT/REPO"),
        ("team!/templates", "invalid project 'team!'"),
        ("my-team/", "invalid repository ''"),
        # Artifact Registry's rules: a project ID (6-30 characters), a repository ID in lowercase
        ("team/templates", "invalid project 'team'"),
        ("my-team/Templates", "invalid repository 'Templates'"),
        ("my-team/templates-", "invalid repository 'templates-'"),
        ("my-team/t.v2", "invalid repository 't.v2'"),
    ]:
        # --host '' is refused too, after --repository: a repository let through cannot hang
        # the test in a server that serves until interrupted.
        serve_args = ["serve", "--host", "", "--root", str(tmp_path / "r"), "--repository", bad]
        refused = CliRunner().invoke(main, ["registry", *serve_args])
        assert refused.exit_code == 2, refused.output
        assert "--repository" in refused.output and says in refused.output, refused.output


@pytest.mark.parametrize("command", ["tags", "pull"])
def test_a_registry_that_never_answers_is_given_up_on(command, tmp_path, capfd, monkeypatch):
    # kfp.registry sends with no timeout: a server that takes the connection and never answers
    # (a stuck registry, another service on that port) held the command forever.
    from kfp_spot.registry import transport

    monkeypatch.setattr(transport, "READ_TIMEOUT_S", 0.5)
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        host = f"http://127.0.0.1:{silent.getsockname()[1]}/my-team/templates"
        args = [
            command,
            *(["pipeline", "-o", str(tmp_path / "t.yaml")] if command == "pull" else []),
        ]
        result = run_cli([*args, "--host", host], capfd)
    finally:
        silent.close()
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"kfp-spot: error: cannot reach the registry at {host}: timed out (the registry did not "
        "answer in time)"
    )
    assert not (tmp_path / "t.yaml").exists()
