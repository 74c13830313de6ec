"""Registry ids, versions, tags and hosts are matched whole: a trailing newline is refused."""

from __future__ import annotations

import pytest
import requests

from kfp_spot.registry import RegistryServer, client, hosts
from kfp_spot.registry.store import RegistryStoreError, check_id, check_tag, check_version

HEX = "a" * 64


@pytest.mark.parametrize("kind", ["project", "repository", "package", "tag"])
@pytest.mark.parametrize("bad", ["name\n", "name\r\n", " name", "na/me", "..", "", "-name"])
def test_ids_are_matched_whole(kind, bad):
    assert check_id(kind, "name-1.x_y") == "name-1.x_y"
    with pytest.raises(RegistryStoreError) as info:
        check_id(kind, bad)
    assert info.value.http_status == 400
    assert kind in info.value.message and "1-128 letters" in info.value.message


def test_versions_and_tags_are_matched_whole():
    assert check_version(f"sha256:{HEX}") == HEX
    for bad in (f"sha256:{HEX}\n", f"sha256:{HEX.upper()}", f"sha256:{HEX[:-1]}"):
        with pytest.raises(RegistryStoreError, match="64 lowercase hex digits"):
            check_version(bad)
    with pytest.raises(RegistryStoreError):
        check_tag("latest\n")


def test_client_checks_refuse_a_trailing_newline_before_any_request():
    assert hosts.check_host("http://127.0.0.1:1/my-project/r/") == "http://127.0.0.1:1/my-project/r"
    with pytest.raises(ValueError, match="invalid registry host"):
        hosts.check_host("http://127.0.0.1:1/my-project/r\n")
    assert hosts.is_artifact_registry("https://us-central1-kfp.pkg.dev/my-proj/repo")
    assert not hosts.is_artifact_registry("https://us-central1-kfp.pkg.dev/my-proj/repo\n")
    # Port 1 has no server: these fail on the check, never on a connection.
    with pytest.raises(ValueError, match="invalid package"):
        client.pull("http://127.0.0.1:1/my-project/r", "pkg\n")
    with pytest.raises(ValueError, match="invalid version"):
        client.pull("http://127.0.0.1:1/my-project/r", "pkg", version=f"sha256:{HEX}\n")


def test_the_server_answers_an_encoded_newline_with_400(tmp_path):
    with RegistryServer(tmp_path / "root") as server:
        for path in (
            "/local-project/templates%0A/packages",
            "/local-project/templates/packages/pkg%0A",
        ):
            response = requests.get(server.url + path, timeout=10)
            assert response.status_code == 400, path
            error = response.json()["error"]
            assert error["status"] == "INVALID_ARGUMENT"
            assert "\\n" in error["message"]


def test_a_host_with_a_query_or_fragment_is_refused_saying_why():
    # It was taken, and the client appended /PACKAGE/TAG after the query: every later call
    # went to a URL no registry serves.
    for host in ("http://127.0.0.1:1/my-project/r?x=1", "http://127.0.0.1:1/my-project/r#top"):
        with pytest.raises(ValueError, match="has no query or fragment"):
            hosts.check_host(host)


@pytest.mark.parametrize(
    ("host", "shown"),
    [
        ("http://me:s3cret@127.0.0.1:8787/my-project/r", "http://127.0.0.1:8787/my-project/r"),
        (
            "https://oauth2accesstoken:ya29.tok@us-central1-kfp.pkg.dev/my-project/r/",
            "https://us-central1-kfp.pkg.dev/my-project/r",
        ),
        ("http://@127.0.0.1:8787/my-project/r", "http://127.0.0.1:8787/my-project/r"),
    ],
)
def test_a_user_or_password_in_the_host_is_refused_without_repeating_it(host, shown):
    """They went to the server as basic auth (in clear text over http) and into every message.

    Artifact Registry's URL with a token was not even recognised as Artifact Registry's.
    """
    with pytest.raises(ValueError) as refused:
        hosts.check_host(host)
    message = str(refused.value)
    assert message.startswith(f"invalid registry host {shown!r} with a user name or password")
    assert "s3cret" not in message and "ya29" not in message
    assert message.count("@") == 1  # the fix's "without 'USER@'" only
    with pytest.raises(ValueError, match="with a user name or password"):
        client.list_tags(host, "pkg")


def test_artifact_registry_over_http_is_refused_naming_the_https_url():
    # It was taken as a non-Artifact-Registry host: the template went out in clear text, with
    # the local registry's URL templates and no credentials.
    with pytest.raises(
        ValueError, match=r"https only.*use https://us-central1-kfp\.pkg\.dev/my-project/r$"
    ):
        hosts.check_host("http://us-central1-kfp.pkg.dev/my-project/r")


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("https://us-docker.pkg.dev/my-project/images", "docker"),
        ("https://us-central1-docker.pkg.dev/my-project/images/", "docker"),
        ("https://europe-west4-python.pkg.dev/my-project/wheels", "python"),
        ("http://US-Docker.pkg.dev/my-project/images", "docker"),
    ],
)
def test_an_artifact_registry_host_of_another_format_is_refused_naming_the_kfp_one(host, kind):
    # A Docker repository's URL (where the runtime image is pushed) was taken as a template
    # registry: the pull or push failed at its first request, after the credentials went there.
    with pytest.raises(ValueError) as refused:
        hosts.check_host(host)
    message = str(refused.value)
    assert f"Artifact Registry's host of {kind} repositories" in message
    assert message.endswith("https://LOCATION-kfp.pkg.dev/PROJECT/REPO")
    with pytest.raises(ValueError, match="hold no pipeline templates"):
        client.list_tags(host, "pkg")


def test_the_scheme_and_server_are_matched_without_regard_to_case():
    # KFP's client took an uppercase Artifact Registry host as Artifact Registry while kfp-spot
    # gave it the local registry's URL templates.
    host = hosts.check_host("HTTPS://US-Central1-KFP.pkg.dev/my-proj/my-repo/")
    assert host == "https://us-central1-kfp.pkg.dev/my-proj/my-repo"
    assert hosts.is_artifact_registry(host)


@pytest.mark.parametrize(
    ("host", "says"),
    [
        ("https://us-central1-kfp.pkg.dev/My_Project/templates", "invalid project 'My_Project'"),
        ("https://us-central1-kfp.pkg.dev/proj/templates", "invalid project 'proj'"),
        ("https://us-central1-kfp.pkg.dev/my-project/Templates", "invalid repository 'Templates'"),
        ("https://us-central1-kfp.pkg.dev/my-project/my_repo", "invalid repository 'my_repo'"),
        ("https://us-central1-kfp.pkg.dev/my-project/1repo", "invalid repository '1repo'"),
        ("http://127.0.0.1:1/local/templates", "invalid project 'local'"),
        ("http://127.0.0.1:1/my-project/repo-", "invalid repository 'repo-'"),
    ],
)
def test_a_project_or_repository_artifact_registry_refuses_is_refused_before_any_request(
    host, says
):
    # Taken: the local registry made such a repository, and a team's URL that worked here was
    # refused by Artifact Registry (after credentials were loaded and the template sent).
    with pytest.raises(ValueError, match=f"invalid registry host .*{says}: expected"):
        hosts.check_host(host)
    with pytest.raises(ValueError, match=says):  # port 1: a request would fail otherwise
        client.list_tags(host, "pkg")


@pytest.mark.parametrize(
    ("host", "says"),
    [
        ("http://127.0.0.1:99999/my-project/r", "its port is not a number from 1 to 65535"),
        ("http://127.0.0.1:0/my-project/r", "its port is not a number from 1 to 65535"),
        ("http://127.0.0.1:80a/my-project/r", "its port is not a number from 1 to 65535"),
        ("http://:8787/my-project/r", "it names no server"),
    ],
)
def test_a_server_no_request_can_reach_is_an_invalid_host_not_an_unreachable_registry(host, says):
    """Port 99999 was `cannot reach the registry ...: Failed to parse`, exit 1, as if down."""
    with pytest.raises(ValueError, match=f"^invalid registry host '{host}': {says}$"):
        hosts.check_host(host)


def test_artifact_registrys_project_and_repository_forms_are_taken():
    for host in (
        "https://us-central1-kfp.pkg.dev/my-project/templates",
        "https://europe-west4-kfp.pkg.dev/123456789012/r",
        "http://127.0.0.1:1/example.com:my-project/team-templates-2",
    ):
        assert hosts.check_host(host) == host


def test_the_server_refuses_a_project_or_repository_artifact_registry_refuses(tmp_path):
    with RegistryServer(tmp_path / "root") as server:
        for path, says in [
            ("/local/templates/packages", "invalid project 'local'"),
            ("/my-project/Templates/packages", "invalid repository 'Templates'"),
            ("/v1/projects/local/locations/local/repositories/t/packages", "project 'local'"),
        ]:
            response = requests.get(server.url + path, timeout=10)
            assert response.status_code == 400, path
            assert says in response.json()["error"]["message"], path
        # A ValueError, as push's and pull's refusals: the store's own error has no public name.
        with pytest.raises(ValueError, match=r"^invalid project 'team': expected a Google Cloud"):
            server.repository_url("team", "templates")
        assert not (server.root / "team").exists()


def test_a_repository_an_older_version_made_under_a_refused_name_is_named_not_lost(tmp_path):
    # The old default, local/templates: its templates stayed on disk but no URL reached them.
    old = tmp_path / "root" / "local" / "templates"
    (old / "tiny-add").mkdir(parents=True)
    with RegistryServer(tmp_path / "root") as server:
        server.repository_url()  # the default now: local-project/templates
        (line,) = server.store.unserved_folders()
    assert line.startswith(f"{old} is not served (invalid project 'local': expected")
    assert line.endswith(f"move it to {tmp_path / 'root'}/PROJECT/REPO to serve it")
    assert (old / "tiny-add").is_dir()


def test_a_template_larger_than_the_local_registry_takes_is_refused_before_it_is_read(
    tmp_path, monkeypatch
):
    # It was parsed first (minutes for tens of MB of YAML), then refused by the server with 413.
    monkeypatch.setattr(client, "MAX_TEMPLATE_BYTES", 64)
    big = tmp_path / "big.yaml"
    big.write_text("not: [a, template" + " " * 100)  # never parsed: no YAML error
    with pytest.raises(ValueError, match=r"big\.yaml is 117 bytes; the local registry takes .* 64"):
        client.push(big, "http://127.0.0.1:1/my-project/r")  # port 1: never contacted
