"""The real kfp.registry.RegistryClient against the local registry server."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import threading
from pathlib import Path

import pytest
import requests
import urllib3
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from kfp.registry import RegistryClient
from kfp.registry import registry_client as kfp_registry_client

import kfp_spot.registry as registry
from kfp_spot.cli import main
from kfp_spot.registry import CONTEXT_FILE, RegistryServer, RegistryServerError
from kfp_spot.registry.server import _parse_multipart
from kfp_spot.vertex.signin import AUTH_FIX


def _sha(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def server(tmp_path: Path):
    with RegistryServer(tmp_path / "registry") as srv:
        yield srv


def test_real_client_uploads_lists_tags_and_downloads(server, template: Path, tmp_path: Path):
    host = server.repository_url("my-project", "templates")
    client = RegistryClient(host=host, config_file=CONTEXT_FILE)

    package, version = client.upload_pipeline(str(template), tags=["0.1.0", "latest"])
    assert package == "tiny-add"
    assert version == _sha(template)

    packages = client.list_packages()
    assert [p["name"].rsplit("/", 1)[-1] for p in packages] == ["tiny-add"]
    assert client.get_package("tiny-add")["name"] == packages[0]["name"]
    versions = client.list_versions("tiny-add")
    assert [v["name"].rsplit("/", 1)[-1] for v in versions] == [version]
    assert sorted(t["name"].rsplit("/", 1)[-1] for t in versions[0]["relatedTags"]) == [
        "0.1.0",
        "latest",
    ]
    assert client.get_version("tiny-add", version)["name"] == versions[0]["name"]
    tags = {t["name"].rsplit("/", 1)[-1]: t["version"] for t in client.list_tags("tiny-add")}
    assert set(tags) == {"0.1.0", "latest"}
    assert all(v.endswith(f"/versions/{version}") for v in tags.values())

    created = client.create_tag("tiny-add", version, "stable")
    assert created["version"].endswith(version)
    assert client.get_tag("tiny-add", "stable")["name"].endswith("/tags/stable")
    with pytest.raises(requests.HTTPError) as exc_info:
        client.create_tag("tiny-add", version, "stable")
    assert exc_info.value.response.status_code == 409
    client.delete_tag("tiny-add", "stable")
    with pytest.raises(requests.HTTPError):
        client.get_tag("tiny-add", "stable")

    by_tag = client.download_pipeline("tiny-add", tag="latest", file_name=str(tmp_path / "a.yaml"))
    by_version = client.download_pipeline(
        "tiny-add", version=version, file_name=str(tmp_path / "b.yaml")
    )
    assert Path(by_tag).read_bytes() == template.read_bytes()
    assert Path(by_version).read_bytes() == template.read_bytes()


def test_new_upload_moves_latest_and_keeps_old_versions(server, template, template_v2, tmp_path):
    host = server.repository_url()
    first = registry.push(template, host, "0.1.0")
    second = registry.push(template_v2, host, "0.2.0")
    assert first.package == second.package == "tiny-add"
    assert first.version != second.version
    tags = {t.tag: t.version for t in registry.list_tags(host, "tiny-add")}
    assert tags == {"0.1.0": first.version, "0.2.0": second.version, "latest": second.version}

    old = registry.pull(host, "tiny-add", tag="0.1.0", output=tmp_path / "old.yaml")
    assert old.read_bytes() == template.read_bytes()
    latest = registry.pull(host, "tiny-add", output=tmp_path / "latest.yaml")
    assert latest.read_bytes() == template_v2.read_bytes()

    client = registry.registry_client(host)
    client.update_tag("tiny-add", first.version, "latest")
    assert {t.tag: t.version for t in registry.list_tags(host, "tiny-add")}["latest"] == (
        first.version
    )
    # A tagged version is protected; untagged ones can go.
    with pytest.raises(requests.HTTPError) as exc_info:
        client.delete_version("tiny-add", first.version)
    assert "tagged" in exc_info.value.response.json()["error"]["message"]
    client.delete_tag("tiny-add", "0.2.0")
    assert client.delete_version("tiny-add", second.version) is True
    assert [v["name"].rsplit("/", 1)[-1] for v in client.list_versions("tiny-add")] == [
        first.version
    ]
    assert client.delete_package("tiny-add") is True
    assert registry.list_packages(host) == []


def test_registry_survives_a_restart(tmp_path: Path, template: Path):
    root = tmp_path / "registry"
    with RegistryServer(root) as first:
        pushed = registry.push(template, first.repository_url("my-project", "r"), "1.0.0")
    with RegistryServer(root) as second:  # a new process would see the same: state is on disk
        host = second.repository_url("my-project", "r")
        assert {t.tag for t in registry.list_tags(host, "tiny-add")} == {"1.0.0", "latest"}
        pulled = registry.pull(host, "tiny-add", version=pushed.version, output=tmp_path / "x.yaml")
        assert pulled.read_bytes() == template.read_bytes()


def test_default_context_needs_no_config_file(server, template: Path, tmp_path: Path):
    if os.path.exists(kfp_registry_client.LOCAL_REGISTRY_CONTEXT):
        pytest.skip("a user registry context overrides KFP's default context on this machine")
    host = server.repository_url("my-project", "r")
    client = RegistryClient(host=host)  # no config file, no auth
    package, version = client.upload_pipeline(str(template), tags="latest")
    assert [t["name"].rsplit("/", 1)[-1] for t in client.list_tags(package)] == ["latest"]
    assert client.get_version(package, version)["name"].endswith(version)
    out = client.download_pipeline(package, tag="latest", file_name=str(tmp_path / "t.yaml"))
    assert Path(out).read_bytes() == template.read_bytes()


def _holds_nothing(host: str) -> None:
    """Nothing was ever stored in the repository (created, as ``repository_url`` makes it)."""
    assert registry.list_packages(host) == []


def _never_created(host: str) -> None:
    """The repository does not exist: Artifact Registry's 404."""
    with pytest.raises(registry.RegistryError, match=r"answered 404 .* repository .* not found"):
        registry.list_packages(host)


def test_repositories_are_separate(server, template: Path):
    registry.push(template, server.repository_url("my-project", "one"), "1")
    assert registry.list_packages(server.repository_url("my-project", "one")) == ["tiny-add"]
    _holds_nothing(server.repository_url("my-project", "two"))
    _never_created(f"{server.url}/my-project/three")  # a push to one made no other


def test_a_repository_never_pushed_to_is_not_found_as_on_artifact_registry(server, template):
    # A misspelt PROJECT/REPO listed as an empty repository (exit 0, no output): the team took
    # its templates for gone. Artifact Registry answers 404 for a repository never created.
    never = f"{server.url}/my-team/tmpl"  # as a user spells a URL; repository_url would create it
    result = CliRunner().invoke(main, ["tags", "--host", never])
    assert result.exit_code == 1
    (line,) = result.output.splitlines()
    assert line.endswith(
        "repository projects/my-team/locations/local/repositories/tmpl not found: check "
        "PROJECT/REPO in the host, or create it (`kfp-spot registry serve --repository "
        "my-team/tmpl`; on Artifact Registry `gcloud artifacts repositories create tmpl "
        "--repository-format=kfp --location=LOCATION`)"
    ), line
    # Nor does a push create it, as on Artifact Registry: the template is not stored anywhere.
    with pytest.raises(registry.RegistryError, match=r"answered 404 .*/tmpl not found"):
        registry.push(template, never)
    assert not (server.root / "my-team").exists()
    registry.push(template, server.repository_url("my-team", "tmpl"))  # created, then pushed to
    assert registry.list_packages(never) == ["tiny-add"]
    with pytest.raises(registry.RegistryError, match=r"repository .*/tpl not found"):
        registry.list_tags(f"{server.url}/my-team/tpl", "tiny-add")


def test_upload_of_a_non_template_is_refused_with_the_reason(server, tmp_path: Path):
    bogus = tmp_path / "notes.yaml"
    bogus.write_text("root: {dag: {tasks: {}}}\n")
    with pytest.raises(ValueError, match=r"notes\.yaml: has no pipelineInfo\.name"):
        registry.push(bogus, server.repository_url(), "1")
    # The registry refuses it too, when a client uploads it without asking push().
    client = RegistryClient(host=server.repository_url(), config_file=CONTEXT_FILE)
    with pytest.raises(requests.HTTPError, match="400"):
        client.upload_pipeline(str(bogus), tags=["1"])
    _holds_nothing(server.repository_url())


def test_push_of_a_template_referring_to_nothing_leaves_latest_on_the_good_one(
    server, template: Path, tmp_path: Path
):
    """A task naming a component the file lost (a bad merge, a hand edit) never becomes latest.

    A registry takes such a file (it is YAML with a pipeline name); every default pull would
    then get a run that fails at that task.
    """
    host = server.repository_url()
    good = registry.push(template, host, "1")
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "pipelineInfo: {name: tiny-add}\n"
        "root: {dag: {tasks: {add: {componentRef: {name: comp-add}}}}}\n"
    )
    with pytest.raises(ValueError, match=r"broken\.yaml: not a compiled pipeline KFP can run"):
        registry.push(broken, host, "2")
    tags = {info.tag: info.version for info in registry.list_tags(host, "tiny-add")}
    assert tags == {"1": good.version, "latest": good.version}


def test_pull_of_a_missing_tag_names_it_and_writes_nothing(server, template, tmp_path):
    host = server.repository_url()
    registry.push(template, host, "1")
    target = tmp_path / "out.yaml"
    with pytest.raises(registry.RegistryError, match=r"tag 'nope'.*not found"):
        registry.pull(host, "tiny-add", tag="nope", output=target)
    assert list(tmp_path.iterdir()) == [tmp_path / "registry"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"host": "ftp://x/p/r"}, "invalid registry host"),
        ({"host": "http://127.0.0.1:1/only-project"}, "invalid registry host"),
        ({"version": "sha256:abc"}, "invalid tag"),
        ({"version": "has space"}, "invalid tag"),
    ],
)
def test_push_validates_its_arguments(template, kwargs, message):
    args = {"host": "http://127.0.0.1:1/my-project/r", "version": "1.0"} | kwargs
    with pytest.raises(ValueError, match=message):
        registry.push(template, args["host"], args["version"])


def test_tags_given_as_one_text_are_one_tag_as_the_kfp_client_takes_them(server, template):
    """`tags="stable"` tagged the upload s, t, a, b, l and e, one tag per letter."""
    host = server.repository_url()
    result = registry.push(template, host, tags="stable")
    assert result.tags == ("stable",)
    assert [row.tag for row in registry.list_tags(host, "tiny-add")] == ["stable"]


def test_a_version_given_with_tags_is_one_of_the_tags(server, template):
    """push(path, host, "1.2.0", tags=["stable"]) tagged `stable` alone: the version was dropped
    without a word, where `kfp-spot push --version 1.2.0 --tag stable` sets it."""
    host = server.repository_url()
    result = registry.push(template, host, "1.2.0", tags=["stable"])
    assert result.tags == ("1.2.0", "stable")
    assert {row.tag for row in registry.list_tags(host, "tiny-add")} == {"1.2.0", "stable"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"version": 2}, "invalid tag 2: a tag is text, not int (e.g. '2')"),
        ({"tags": [1.5]}, "invalid tag 1.5: a tag is text, not float (e.g. '1.5')"),
        ({"tags": 3}, "invalid tags 3: give a list of tags"),
    ],
)
def test_tags_of_another_type_than_text_are_one_line_naming_them(template, kwargs, message):
    """A Python caller's `version=2` was an AttributeError from inside the tag check."""
    with pytest.raises(ValueError) as exc_info:
        registry.push(template, "http://127.0.0.1:1/my-project/r", **kwargs)
    assert str(exc_info.value).startswith(message), exc_info.value


def test_a_directory_given_as_the_template_is_named_as_one(tmp_path: Path):
    """It was "does not exist (compile it first)", of a folder that is there."""
    with pytest.raises(ValueError, match=r"is a directory \(give the compiled YAML file\)"):
        registry.push(tmp_path, "http://127.0.0.1:1/my-project/r")


def test_unreachable_registry_is_one_clear_error(tmp_path: Path):
    with RegistryServer(tmp_path / "gone") as srv:
        dead = srv.repository_url()
    with pytest.raises(registry.RegistryError, match="cannot reach the registry"):
        registry.list_tags(dead, "tiny-add")


def test_one_root_one_server(tmp_path: Path):
    with (
        RegistryServer(tmp_path / "root"),
        pytest.raises(RegistryServerError, match="in use by another registry server"),
    ):
        RegistryServer(tmp_path / "root")


@pytest.mark.parametrize("root", ["", " ", None])
def test_a_root_naming_no_folder_is_refused_not_the_working_directory(tmp_path, monkeypatch, root):
    """RegistryServer("") kept its state in the working directory (`registry serve --root ""` is
    refused); None was a TypeError from inside pathlib."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RegistryServerError, match=r"^root .* names no folder: give the folder"):
        RegistryServer(root)
    assert list(tmp_path.iterdir()) == []


def test_a_root_that_cannot_be_made_is_one_clear_error_naming_it(tmp_path: Path):
    (tmp_path / "file").write_text("")
    with pytest.raises(RegistryServerError, match=r"file/root'.*Not a directory.*can be made"):
        RegistryServer(tmp_path / "file" / "root")
    result = CliRunner().invoke(
        main, ["registry", "serve", "--port", "0", "--root", str(tmp_path / "file" / "root")]
    )
    assert result.exit_code == 1, result.output
    (line,) = result.output.splitlines()
    assert line.startswith("kfp-spot: error: cannot keep the registry's state in ")


def test_artifact_registry_hosts_use_the_clients_own_context():
    assert registry.is_artifact_registry("https://us-central1-kfp.pkg.dev/my-proj/repo")
    assert not registry.is_artifact_registry("http://127.0.0.1:8787/my-proj/repo")


@settings(max_examples=50, deadline=None)
@given(
    content=st.binary(max_size=2000),
    tags=st.text(alphabet=st.characters(codec="utf-8"), max_size=30),
)
def test_multipart_parser_is_byte_exact(content: bytes, tags: str):
    body, content_type = urllib3.encode_multipart_formdata(
        {"tags": tags, "content": ("t.yaml", content)}
    )
    fields = _parse_multipart(content_type, body)
    assert fields["content"] == content
    assert fields["tags"] == tags.encode()


def test_artifact_registry_without_credentials_is_one_clear_error(monkeypatch, tmp_path):
    # No network: google.auth fails on the missing key file before any request is made.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing-key.json"))
    with pytest.raises(registry.RegistryError, match="no usable Google credentials") as caught:
        registry.list_tags("https://us-central1-kfp.pkg.dev/my-proj/repo", "tiny-add")
    (line,) = str(caught.value).splitlines()
    assert line.endswith(f": {AUTH_FIX}")  # the same fix Vertex AI submissions give


def test_an_invalid_tag_in_an_upload_stores_nothing(server, template):
    client = registry.registry_client(server.repository_url())
    with pytest.raises(requests.HTTPError) as exc_info:
        client.upload_pipeline(str(template), tags=["ok", "sha256:nope"])
    assert exc_info.value.response.status_code == 400
    _holds_nothing(server.repository_url())


@pytest.mark.parametrize(
    ("tags", "which"), [(["a", "", "b"], "tag 2 of 3"), (["a", ""], "tag 2 of 2"), ([""], None)]
)
def test_an_empty_tag_in_an_upload_is_refused_naming_it_not_dropped(server, template, tags, which):
    """`a,,b` tagged a and b and dropped the empty one without a word; [""] sends no tags."""
    client = registry.registry_client(server.repository_url())
    if which is None:  # the client sends "" for no tags: an upload that sets none
        client.upload_pipeline(str(template), tags=tags)
        assert registry.list_tags(server.repository_url(), "tiny-add") == []
        return
    with pytest.raises(requests.HTTPError) as exc_info:
        client.upload_pipeline(str(template), tags=tags)
    assert exc_info.value.response.status_code == 400
    message = exc_info.value.response.json()["error"]["message"]
    assert message.startswith(f"tags {','.join(tags)!r}: {which} is empty"), message
    _holds_nothing(server.repository_url())


def test_concurrent_pushes_all_land(server, template, template_v2):
    from concurrent.futures import ThreadPoolExecutor

    host = server.repository_url()
    jobs = [(template if i % 2 else template_v2, f"v{i}") for i in range(12)]
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda job: registry.push(job[0], host, job[1], (job[1],)), jobs))
    tags = {t.tag: t.version for t in registry.list_tags(host, "tiny-add")}
    assert tags == {f"v{i}": r.version for i, r in enumerate(results)}
    assert {r.version for r in results} == {_sha(template), _sha(template_v2)}


@pytest.mark.parametrize(
    ("file", "text", "reason"),
    [
        ("tags/latest.json", "{truncated", "latest.json is not JSON"),
        # JSON of another shape (a file edited by hand): the handler's TypeError or KeyError
        # dropped the connection, and the client said the registry could not be reached.
        ("tags/latest.json", "[1]", "latest.json holds list JSON, not an object"),
        ("tags/latest.json", '{"version": 5}', "latest.json has no str 'version'"),
        ("package.json", "{}", "package.json has no str 'createTime'"),
        ("versions/*.json", '{"createTime": "x"}', ".json has no str 'updateTime'"),
    ],
)
def test_a_corrupt_state_file_is_a_500_with_the_reason_not_a_dropped_connection(
    server, template, file, text, reason
):
    host = server.repository_url()
    registry.push(template, host, "1")
    package = server.root / "local-project" / "templates" / "tiny-add"
    (state_file,) = package.glob(file)
    state_file.write_text(text)
    with pytest.raises(registry.RegistryError, match=r"answered 500.*unreadable: ") as caught:
        if file == "package.json":
            registry.list_packages(host)
        elif file.startswith("versions"):
            registry.list_untagged(host, "tiny-add")
        else:
            registry.list_tags(host, "tiny-add")
    assert f"{package}/" in str(caught.value) and reason in str(caught.value), caught.value


def test_a_web_page_answered_to_a_pull_is_refused_and_nothing_written(tmp_path: Path):
    """A proxy's sign-in page (200, HTML) in front of the host was written as the template,
    exit 0, found out only when a run or a submit read it."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<!DOCTYPE html><html><body>Sign in to continue</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Page) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        host = f"http://127.0.0.1:{httpd.server_address[1]}/my-team/templates"
        try:
            with pytest.raises(registry.RegistryError, match="with a web page, not a template"):
                registry.pull(host, "tiny-add", output=tmp_path / "t.yaml")
        finally:
            httpd.shutdown()
    assert list(tmp_path.iterdir()) == []


def test_pull_into_a_directory_is_refused_naming_a_file_to_give(server, template, tmp_path):
    host = server.repository_url()
    registry.push(template, host, "1")
    folder = tmp_path / "templates"
    folder.mkdir()
    with pytest.raises(ValueError, match=r"output .*templates.* is a directory.*tiny-add_1"):
        registry.pull(host, "tiny-add", tag="1", output=folder)
    assert list(folder.iterdir()) == []
    assert not list(tmp_path.glob(".*.partial"))


def test_upload_of_broken_yaml_is_refused_in_one_line_naming_where(server, tmp_path: Path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("pipelineInfo: [name\n")
    with pytest.raises(ValueError) as refused:
        registry.push(broken, server.repository_url(), "1")
    assert "\n" not in str(refused.value)
    assert re.search(r"broken\.yaml: not YAML .* line 2, column 1", str(refused.value))
    # The registry's own answer, to a client that uploads it without asking push().
    client = registry.registry_client(server.repository_url())
    with pytest.raises(registry.RegistryError) as caught:
        registry.transport.call(server.repository_url(), client.upload_pipeline, str(broken))
    message = str(caught.value)
    assert "\n" not in message
    assert re.search(r"not YAML: .* at line 2, column 1", message), message


@pytest.mark.parametrize("package", ["ünï", "../etc", "has space", ""])
def test_list_tags_refuses_an_invalid_package_name_before_asking(package):
    # As pull does: a name the registry can never hold is a usage error, not the server's 404
    # ("no route") or 400 after a request. The host is unreachable: no request may be made.
    with pytest.raises(ValueError, match=r"invalid package"):
        registry.list_tags("http://127.0.0.1:1/my-project/r", package)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("not json", r"not JSON"),
        ("[]", r"expected a JSON object .* not a list"),
        ('{"upload_url": 5}', r"'upload_url' must be a string .* not 5"),
        ('{"upload_url": {"x": 1}}', r"'upload_url' must be a string"),
        # json's RecursionError traceback; the last of two templates won silently
        ("[" * 30000, r"nests lists and dicts more than 2 levels deep; expected an object"),
        ('{"a": "x", "a": "y"}', r"key 'a' is given twice \(\"x\" and \"y\"\)"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_it(server, tmp_path: Path, content, needle):
    # RegistryClient itself answered "Expecting value: line 1 column 1 (char 0)" (no file named)
    # or an AttributeError traceback from inside kfp.registry.
    config = tmp_path / "ctx.json"
    config.write_text(content)
    with pytest.raises(ValueError, match=rf"invalid config file .*ctx\.json: {needle}"):
        registry.list_packages(server.repository_url(), config_file=str(config))
    result = CliRunner().invoke(
        main, ["tags", "--host", server.repository_url(), "--config-file", str(config)]
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "ctx.json" in result.output


def test_pull_to_an_output_that_cannot_be_made_is_one_line_naming_it(server, template, tmp_path):
    host = server.repository_url()
    registry.push(template, host, "1")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=r"invalid output .*a-file/t\.yaml.*cannot create"):
        registry.pull(host, "tiny-add", tag="1", output=blocker / "t.yaml")
    result = CliRunner().invoke(
        main, ["pull", "tiny-add", "--host", host, "--tag", "1", "-o", str(blocker / "t.yaml")]
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "a-file" in result.output


@pytest.mark.parametrize("output", [5, ["t.yaml"]])
def test_pull_to_an_output_that_is_no_path_is_one_line_before_any_request(output):
    # Path(5) raised a TypeError from inside pathlib; no registry is called before it
    with pytest.raises(ValueError, match=r"invalid output .*: give the file to write as a path"):
        registry.pull("http://127.0.0.1:9/proj/repo", "tiny-add", tag="1", output=output)


def test_pull_into_a_symlink_replaces_its_target_and_keeps_the_link(server, template, tmp_path):
    host = server.repository_url()
    registry.push(template, host, "1")
    (tmp_path / "shared").mkdir()
    target = tmp_path / "shared" / "current.yaml"
    target.write_text("old\n")
    link = tmp_path / "current.yaml"
    link.symlink_to(target)
    assert registry.pull(host, "tiny-add", tag="1", output=link) == link
    assert link.is_symlink() and target.read_bytes() == template.read_bytes()
    assert os.listdir(tmp_path / "shared") == ["current.yaml"]


def test_pull_into_a_stream_writes_to_it_and_leaves_it_a_stream(server, template, tmp_path):
    # `-o /dev/stdout` (a pipe) was renamed over: the download replaced the device node (as root,
    # /dev/stdout itself) with a regular file and the reader got nothing.
    host = server.repository_url()
    registry.push(template, host, "1")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = CliRunner().invoke(main, ["pull", "tiny-add", "--host", host, "-o", str(fifo)])
    reader.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert received == [template.read_bytes()]
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and sorted(os.listdir(tmp_path)) == [
        "pipe",
        "registry",
    ]
    assert result.stdout == ""  # the path would follow the template on a stream like stdout


def test_a_push_of_latest_alone_makes_no_listing_call(server, template, caplog):
    # Only a tag other than latest can be reported as moved; the default push lists nothing.
    import logging

    host = server.repository_url()
    with caplog.at_level(logging.INFO, logger="kfp_spot.registry.server"):
        registry.push(template, host)
        assert not [r for r in caplog.messages if "/tags" in r]
        registry.push(template, host, "1.0.0")
        assert [r for r in caplog.messages if '"GET ' in r and "/tags" in r]


def test_kfp_spot_tags_asks_the_registry_for_the_tags_once(
    server, template: Path, template_v2: Path, monkeypatch: pytest.MonkeyPatch
):
    # `kfp-spot tags PACKAGE` listed the tags, then list_untagged listed them again to know
    # which versions they name: two round trips to Artifact Registry for one listing.
    host = server.repository_url("my-team", "templates")
    registry.push(template, host)
    registry.push(template_v2, host)
    asked: list[str] = []
    real = RegistryClient.list_tags

    def counted(self: RegistryClient, package_name: str) -> object:
        asked.append(package_name)
        return real(self, package_name)

    monkeypatch.setattr(RegistryClient, "list_tags", counted)
    listed = CliRunner().invoke(main, ["tags", "tiny-add", "--host", host])
    assert listed.exit_code == 0, listed.output
    assert asked == ["tiny-add"]
    assert len(listed.stdout.splitlines()) == 2  # latest, and the upload latest moved away from


def test_a_config_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path):
    # `--config-file <(...)` run twice, or a named pipe nobody writes to: the read blocked
    # forever before any request.
    config = tmp_path / "ctx.json"
    os.mkfifo(config)
    with pytest.raises(ValueError, match=r"invalid config file .*ctx\.json: not a regular file"):
        registry.list_packages("http://127.0.0.1:1/my-project/r", config_file=str(config))
