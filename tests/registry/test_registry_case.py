"""Ids differing only in case stay two on a case-insensitive disk (macOS's, by default).

Artifact Registry's tags are case-sensitive; the local registry keeps one file per tag (and one
folder per project, repository and package), so two names must differ in more than case, or on a
Mac pushing ``LATEST`` would move ``latest``, and ``p/R`` would be the repository ``p/r``. Checked
here on any disk: no two files of the store differ only in case.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kfp_spot.registry import store as registry_store
from kfp_spot.registry.store import RegistryStore

TAG_CHARS = "ABCXYZabcxyz019._-"


def template_bytes(variant: int) -> bytes:
    return f"pipelineInfo:\n  name: pkg\nroot: {{}}\n# variant {variant}\n".encode()


def folded_duplicates(root: Path) -> list[list[str]]:
    seen: dict[str, list[str]] = {}
    for path in root.rglob("*"):
        seen.setdefault(str(path).casefold(), []).append(str(path))
    return [names for names in seen.values() if len(names) > 1]


@given(st.text(TAG_CHARS, min_size=1, max_size=12))
def test_a_file_name_reads_back_and_has_no_upper_case(tag):
    stem = registry_store.file_stem(tag)
    assert registry_store.name_of_file_stem(stem) == tag
    assert stem == stem.lower()


def test_tags_differing_in_case_are_two_files_on_any_disk(tmp_path: Path):
    store = RegistryStore(tmp_path / "root")
    repo = store.create_repository("my-project", "templates")
    _, first = store.upload(repo, template_bytes(1), ["latest", "v1"])
    _, second = store.upload(repo, template_bytes(2), ["LATEST", "V1"])
    store.create_tag(repo, "pkg", "Latest", first)

    assert folded_duplicates(store.root) == []
    tags = {
        t["name"].rsplit("/", 1)[1]: t["version"].rsplit("/", 1)[1] for t in repo.list_tags("pkg")
    }
    assert tags == {"LATEST": second, "Latest": first, "V1": second, "latest": first, "v1": first}

    store.delete_tag(repo, "pkg", "V1")
    assert repo.resolve("pkg", "v1") == first[len("sha256:") :]
    assert "V1" not in {t["name"].rsplit("/", 1)[1] for t in repo.list_tags("pkg")}


def test_a_tag_file_an_older_version_named_with_upper_case_is_still_that_tag(tmp_path: Path):
    store = RegistryStore(tmp_path / "root")
    repo = store.create_repository("my-project", "templates")
    _, first = store.upload(repo, template_bytes(1), [])
    _, second = store.upload(repo, template_bytes(2), [])
    legacy = repo.path / "pkg" / "tags" / "Stable.json"
    legacy.parent.mkdir()
    legacy.write_text(json.dumps({"version": first}))

    assert repo.resolve("pkg", "Stable") == first[len("sha256:") :]
    store.update_tag(repo, "pkg", "Stable", second)
    assert json.loads(legacy.read_text())["version"] == second
    assert sorted(p.name for p in legacy.parent.iterdir()) == ["Stable.json"]
    store.delete_tag(repo, "pkg", "Stable")
    assert not legacy.exists()


def test_packages_differing_in_case_are_two_folders(tmp_path: Path):
    # (projects and repositories are lower case only, as Artifact Registry's IDs)
    store = RegistryStore(tmp_path / "root")
    repo = store.create_repository("my-project", "templates")
    named = b"pipelineInfo:\n  name: PKG\nroot: {}\n"
    store.upload(repo, template_bytes(2), ["latest"])
    store.upload(repo, named, ["latest"])

    assert folded_duplicates(store.root) == []
    assert repo.package_names() == ["PKG", "pkg"]
    assert repo.read_template("PKG", "latest") == named
    assert repo.read_template("pkg", "latest") == template_bytes(2)
