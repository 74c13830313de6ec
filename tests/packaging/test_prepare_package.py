"""prepare_package on a real project: reproducible, staged by sha256, cached, installable."""

import hashlib
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

from kfp_spot import envcache
from kfp_spot.packaging import component_entry, prepare_package


def sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_same_source_gives_the_same_bytes_and_sha256(project, tmp_path):
    first = prepare_package(str(project), str(tmp_path / "stage-a"))
    # A copy elsewhere, with other mtimes, built later: same bytes.
    copy = tmp_path / "elsewhere" / "tiny"
    shutil.copytree(project, copy)
    for path in copy.rglob("*"):
        os.utime(path, (time.time() + 1000, time.time() + 1000))
    second = prepare_package(str(copy), str(tmp_path / "stage-b"))
    assert first.sha256 == second.sha256
    assert Path(first.uri).read_bytes() == Path(second.uri).read_bytes()
    assert sha256(first.uri) == first.sha256


def test_a_changed_source_gives_a_new_sha256(project, tmp_path):
    first = prepare_package(str(project), str(tmp_path / "stage"))
    (project / "tinytrainer" / "task.py").write_text("print('changed')\n")
    second = prepare_package(str(project), str(tmp_path / "stage"))
    assert first.sha256 != second.sha256
    assert not second.cache_hit


def test_staging_layout_and_metadata(project, tmp_path):
    staging = tmp_path / "stage"
    info = prepare_package(str(project), str(staging))
    assert info.name == "tiny-trainer" and info.version == "1.2.3"
    assert info.uri == str(staging / "tiny-trainer" / info.sha256 / "tiny_trainer-1.2.3.tar.gz")
    assert info.size == Path(info.uri).stat().st_size
    assert info.python_module == "tinytrainer.task"  # the package's one *.task module
    assert info.requirements == ("numpy>=1.20",)
    assert info.package_uris == (info.uri,)
    assert not info.cache_hit
    meta = info.metadata()
    assert meta["sha256"] == info.sha256 and meta["package_uris"] == [info.uri]
    assert meta["requirements"] == ["numpy>=1.20"]
    # The build never writes into the user's tree.
    names = sorted(p.name for p in project.iterdir())
    assert names == ["README.md", "pyproject.toml", "tinytrainer"]


def test_sdist_entries_are_sorted_with_fixed_times_and_owners(project, tmp_path):
    info = prepare_package(str(project), str(tmp_path / "stage"))
    with tarfile.open(info.uri) as tf:
        members = tf.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert {m.mtime for m in members} == {315532800}
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
    assert Path(info.uri).read_bytes()[4:8] == b"\0\0\0\0"  # gzip header mtime


def test_second_prepare_is_a_cache_hit_that_uploads_nothing(project, tmp_path):
    staging = tmp_path / "stage"
    first = prepare_package(str(project), str(staging))
    before = os.stat(first.uri)
    second = prepare_package(str(project), str(staging))
    after = os.stat(second.uri)
    assert second.cache_hit and second.uri == first.uri
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [p.name for p in (staging / "tiny-trainer").iterdir()] == [first.sha256]


def test_staged_sdist_installs_and_its_module_runs(project, tmp_path, env_cache):
    info = prepare_package(str(project), str(tmp_path / "stage"))
    python = envcache.package_env([info.uri], env_cache)
    proc = subprocess.run(
        [str(python), "-m", info.python_module, "--epochs", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert '"trained": true' in proc.stdout and "--epochs" in proc.stdout


def test_wheel_is_staged_by_its_own_sha256_and_the_job_gets_the_sdist(project, tmp_path):
    info = prepare_package(str(project), str(tmp_path / "stage"), build_wheel=True)
    assert info.wheel_uri.endswith("tiny_trainer-1.2.3-py3-none-any.whl")
    assert sha256(info.wheel_uri) == info.wheel_sha256
    assert Path(info.wheel_uri).parent.name == info.wheel_sha256
    assert info.package_uris[0] == info.uri
    again = prepare_package(str(project), str(tmp_path / "stage2"), build_wheel=True)
    assert again.wheel_sha256 == info.wheel_sha256  # wheels are reproducible too


def test_extra_packages_follow_the_trainer(project, tmp_path):
    extra = tmp_path / "deps" / "helper-0.1.tar.gz"
    extra.parent.mkdir()
    extra.write_bytes(b"not checked beyond existence")
    info = prepare_package(str(project), str(tmp_path / "stage"), extra_package_uris=[str(extra)])
    assert info.package_uris == (info.uri, str(extra))


def test_import_check_passes_for_a_good_package(project, tmp_path, env_cache):
    info = prepare_package(
        str(project), str(tmp_path / "stage"), check_import=True, cache_dir=env_cache
    )
    assert info.import_checked


def test_component_entry_stages_next_to_the_artifact_when_no_staging_is_given(project, tmp_path):
    artifact = SimpleNamespace(uri=str(tmp_path / "outputs" / "package"), metadata={})
    outputs = component_entry(source=str(project), package=artifact)
    assert artifact.uri.startswith(str(tmp_path / "outputs" / "package" / "tiny-trainer"))
    assert Path(artifact.uri).is_file()
    assert outputs.package_uris == [artifact.uri]
    meta = artifact.metadata
    assert meta["name"] == "tiny-trainer" and meta["version"] == "1.2.3"
    assert meta["sha256"] == sha256(artifact.uri)
    assert meta["python_module"] == "tinytrainer.task"
    assert meta["size"] == Path(artifact.uri).stat().st_size
    assert meta["cache_hit"] is False and meta["package_uris"] == [artifact.uri]


def test_a_damaged_staged_file_is_replaced_not_reported_as_a_hit(project, tmp_path):
    staging = tmp_path / "stage"
    first = prepare_package(str(project), str(staging))
    good = Path(first.uri).read_bytes()
    Path(first.uri).write_bytes(bytes(len(good)))  # same size, wrong bytes
    second = prepare_package(str(project), str(staging))
    assert not second.cache_hit
    assert Path(second.uri).read_bytes() == good
