"""Random histories of uploads, tag moves, deletes and restarts, checked against a simple model.

The real RegistryClient talks to a real server; after every step the registry must agree with a
dictionary model (package -> versions, tags), including right after the server restarts.
"""

import hashlib
import shutil
import tempfile
from pathlib import Path

import requests
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import kfp_spot.registry as registry
from kfp_spot.registry import RegistryServer

PACKAGES = ("pkg-a", "pkg-b")
TAGS = ("latest", "stable", "1.0", "2.0")


def template_bytes(package: str, variant: int) -> bytes:
    return f"pipelineInfo:\n  name: {package}\nroot: {{}}\n# variant {variant}\r\n".encode()


def version_of(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


class RegistryModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="registry-model-"))
        self.server = RegistryServer(self.tmp / "root").start()
        self.versions: dict[str, dict[str, bytes]] = {}  # package -> version -> content
        self.tags: dict[str, dict[str, str]] = {}  # package -> tag -> version
        # Created once, as `gcloud artifacts repositories create` makes one; a restart keeps it.
        self.host = self.server.repository_url("my-project", "r")

    @property
    def client(self):
        return registry.registry_client(self.host)

    def teardown(self) -> None:
        self.server.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(
        package=st.sampled_from(PACKAGES),
        variant=st.integers(0, 3),
        tags=st.lists(st.sampled_from(TAGS), max_size=2, unique=True),
    )
    def upload(self, package, variant, tags):
        content = template_bytes(package, variant)
        path = self.tmp / "upload.yaml"
        path.write_bytes(content)
        name, version = self.client.upload_pipeline(str(path), tags=tags)
        assert (name, version) == (package, version_of(content))
        self.versions.setdefault(package, {})[version] = content
        for tag in tags:
            self.tags.setdefault(package, {})[tag] = version

    @precondition(lambda self: any(self.versions.values()))
    @rule(data=st.data(), tag=st.sampled_from(TAGS))
    def set_tag(self, data, tag):
        package = data.draw(st.sampled_from(sorted(p for p, v in self.versions.items() if v)))
        version = data.draw(st.sampled_from(sorted(self.versions[package])))
        if tag in self.tags.get(package, {}):
            self.client.update_tag(package, version, tag)
        else:
            self.client.create_tag(package, version, tag)
        self.tags.setdefault(package, {})[tag] = version

    @precondition(lambda self: any(self.tags.values()))
    @rule(data=st.data())
    def delete_tag(self, data):
        package = data.draw(st.sampled_from(sorted(p for p, t in self.tags.items() if t)))
        tag = data.draw(st.sampled_from(sorted(self.tags[package])))
        self.client.delete_tag(package, tag)
        del self.tags[package][tag]

    @precondition(lambda self: any(self.versions.values()))
    @rule(data=st.data())
    def delete_version(self, data):
        package = data.draw(st.sampled_from(sorted(p for p, v in self.versions.items() if v)))
        version = data.draw(st.sampled_from(sorted(self.versions[package])))
        tagged = version in self.tags.get(package, {}).values()
        try:
            self.client.delete_version(package, version)
        except requests.HTTPError as exc:
            assert tagged and exc.response.status_code == 400
            return
        assert not tagged
        del self.versions[package][version]

    @rule()
    def restart(self):
        self.server.stop()
        self.server = RegistryServer(self.tmp / "root").start()
        self.host = f"{self.server.url}/my-project/r"  # not created again: the restart kept it

    @invariant()
    def registry_matches_the_model(self):
        host = self.host
        assert registry.list_packages(host) == sorted(self.versions)
        for package, versions in self.versions.items():
            listed = [v["name"].rsplit("/", 1)[-1] for v in self.client.list_versions(package)]
            assert sorted(listed) == sorted(versions)
            tags = {t.tag: t.version for t in registry.list_tags(host, package)}
            assert tags == self.tags.get(package, {})
            for tag, version in tags.items():
                out = registry.pull(host, package, tag=tag, output=self.tmp / "pulled.yaml")
                assert out.read_bytes() == versions[version]


TestRegistryModel = RegistryModel.TestCase
TestRegistryModel.settings = settings(max_examples=10, stateful_step_count=12, deadline=None)
