"""Hostile package sources: links leaving the tree and archive bombs are refused, naming the input.

Nothing is staged and nothing is written outside prepare_package's work directory.
"""

import io
import os
import stat
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

from kfp_spot.packaging import SourceError, sources
from tests.packaging.tiny import write_project
from tests.prepare import prepare_package


@pytest.fixture
def staging(tmp_path):
    path = tmp_path / "stage"
    yield path
    assert not path.exists() or not any(path.rglob("*.tar.gz")), "a bad package was staged"


@pytest.fixture
def secret(tmp_path) -> Path:
    path = tmp_path / "outside" / "secret.txt"
    path.parent.mkdir()
    path.write_text("not part of any package\n")
    return path


def test_a_file_link_leaving_a_project_is_refused(tmp_path, staging, secret, monkeypatch):
    project = write_project(tmp_path / "src")
    (project / "tinytrainer" / "data.txt").symlink_to(secret)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the work directory goes
    with pytest.raises(
        SourceError,
        match=rf"source: .*src holds a link that leaves the source tree: "
        rf"tinytrainer/data.txt -> {secret}",
    ):
        prepare_package(str(project), str(staging))
    assert os.listdir(scratch) == []  # the work directory is gone; nothing else was left
    assert secret.read_text() == "not part of any package\n"


def test_a_directory_link_leaving_a_bare_package_is_refused(tmp_path, staging, secret):
    project = write_project(tmp_path / "src")
    (project / "tinytrainer" / "assets").symlink_to(secret.parent, target_is_directory=True)
    with pytest.raises(SourceError, match=r"leaves the source tree: assets -> "):
        prepare_package(
            str(project / "tinytrainer"), str(staging), python_module="tinytrainer.task"
        )


def test_relative_links_that_climb_out_are_refused_too(tmp_path, staging, secret):
    project = write_project(tmp_path / "src")
    (project / "tinytrainer" / "up.txt").symlink_to(Path("..", "..", "outside", "secret.txt"))
    with pytest.raises(SourceError, match=r"leaves the source tree: tinytrainer/up.txt -> \.\./"):
        prepare_package(str(project), str(staging))


def test_broken_and_looping_links_are_refused(tmp_path, staging):
    project = write_project(tmp_path / "a")
    (project / "tinytrainer" / "gone.txt").symlink_to(project / "nowhere.txt")
    with pytest.raises(SourceError, match=r"holds a broken link: tinytrainer/gone.txt"):
        prepare_package(str(project), str(staging))
    loop = write_project(tmp_path / "b")
    (loop / "tinytrainer" / "again").symlink_to(loop, target_is_directory=True)
    with pytest.raises(SourceError, match=r"link to its own parent folder: tinytrainer/again"):
        prepare_package(str(loop), str(staging))


def test_a_named_pipe_in_the_source_is_one_line_naming_it(tmp_path, staging):
    """A FIFO left in a source folder was reported as the copy's raw list of tuples."""
    project = write_project(tmp_path / "src")
    os.mkfifo(project / "tinytrainer" / "pipe")
    with pytest.raises(SourceError) as info:
        prepare_package(str(project), str(staging))
    assert str(info.value) == (
        f"source: {project} holds tinytrainer/pipe, a named pipe (FIFO): special files cannot be "
        "packaged; remove it or move it out of the source"
    )
    # A link to it inside the tree is followed by the copy: refused alike, by the link's name.
    os.remove(project / "tinytrainer" / "pipe")
    (project / ".venv").mkdir()  # never copied itself
    os.mkfifo(project / ".venv" / "pipe")
    (project / "tinytrainer" / "alias").symlink_to(project / ".venv" / "pipe")
    with pytest.raises(SourceError, match=r"holds tinytrainer/alias, a named pipe \(FIFO\)"):
        prepare_package(str(project), str(staging))


def test_links_inside_the_tree_and_in_ignored_folders_are_fine(tmp_path, secret):
    project = write_project(tmp_path / "src")
    (project / "tinytrainer" / "alias.py").symlink_to(project / "tinytrainer" / "task.py")
    venv_bin = project / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(secret)  # never copied: .venv is ignored
    info = prepare_package(str(project), str(tmp_path / "stage"))
    with tarfile.open(info.uri) as tf:
        names = tf.getnames()
        alias = tf.extractfile("tiny_trainer-1.2.3/tinytrainer/alias.py").read()
    assert alias == (project / "tinytrainer" / "task.py").read_bytes()
    assert not any(".venv" in n for n in names)


def _tar_with(path: Path, members: list[tarfile.TarInfo], data: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for member in members:
            payload = data.get(member.name)
            tf.addfile(member, io.BytesIO(payload) if payload is not None else None)
    return path


def _project_members(top: str) -> tuple[list[tarfile.TarInfo], dict[str, bytes]]:
    data = {
        f"{top}/pyproject.toml": b'[project]\nname = "t"\nversion = "1"\n',
        f"{top}/t/__init__.py": b"",
        f"{top}/t/task.py": b"print(1)\n",
    }
    members = []
    for name, payload in data.items():
        info = tarfile.TarInfo(name)
        info.size = len(payload)
        members.append(info)
    return members, data


def test_an_archive_link_leaving_it_is_refused(tmp_path, staging, secret):
    members, data = _project_members("t-1")
    link = tarfile.TarInfo("t-1/t/secret.txt")
    link.type = tarfile.SYMTYPE
    link.linkname = str(secret)
    archive = _tar_with(tmp_path / "t-1.tar.gz", [*members, link], data)
    with pytest.raises(SourceError, match=r"t-1.tar.gz holds an unsafe member: .*secret.txt"):
        prepare_package(str(archive), str(staging))


def test_a_zip_link_leaving_it_is_refused(tmp_path, staging):
    archive = tmp_path / "t-1.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("t-1/pyproject.toml", '[project]\nname = "t"\nversion = "1"\n')
        zf.writestr("t-1/t/__init__.py", "")
        link = zipfile.ZipInfo("t-1/t/secret.txt")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "../../../outside/secret.txt")
    with pytest.raises(
        SourceError,
        match=r"t-1.zip holds a link t-1/t/secret.txt -> \.\./\.\./\.\./outside/secret.txt "
        r"that leaves the source tree",
    ):
        prepare_package(str(archive), str(staging))


def test_a_zip_bomb_is_stopped_before_it_expands(tmp_path, staging):
    # A few hundred KB of zip that would become 300 MB. Refused from the
    # sizes the archive records, before anything is inflated.
    archive = tmp_path / "bomb.zip"
    chunk = bytes(1 << 20)
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bomb/pyproject.toml", '[project]\nname = "bomb"\nversion = "1"\n')
        with zf.open("bomb/data.bin", "w", force_zip64=True) as handle:
            for _ in range(300):
                handle.write(chunk)
    assert archive.stat().st_size < 1 << 20
    with pytest.raises(
        SourceError,
        match=r"source: .*bomb.zip expands to more than 256 MiB; a source archive may hold at "
        r"most 20000 members and 256 MiB",
    ):
        prepare_package(str(archive), str(staging))


def test_a_tar_bomb_stops_at_the_limit(tmp_path, staging, monkeypatch):
    monkeypatch.setattr(sources, "MAX_ARCHIVE_BYTES", 1 << 20)
    members, data = _project_members("big-1")
    blob = tarfile.TarInfo("big-1/t/blob.bin")
    blob.size = 2 << 20
    data[blob.name] = bytes(blob.size)
    archive = _tar_with(tmp_path / "big-1.tar.gz", [*members, blob], data)
    written: list[str] = []
    real_extract = tarfile.TarFile.extract

    def spy(self, member, *args, **kwargs):
        written.append(member.name if isinstance(member, tarfile.TarInfo) else member)
        return real_extract(self, member, *args, **kwargs)

    monkeypatch.setattr(tarfile.TarFile, "extract", spy)
    with pytest.raises(SourceError, match=r"big-1.tar.gz expands to more than 1 MiB"):
        prepare_package(str(archive), str(staging))
    assert "big-1/t/blob.bin" not in written  # refused before it was written


def test_too_many_members_are_refused(tmp_path, staging, monkeypatch):
    monkeypatch.setattr(sources, "MAX_ARCHIVE_MEMBERS", 10)
    members, data = _project_members("many-1")
    for i in range(10):
        info = tarfile.TarInfo(f"many-1/t/m{i}.py")
        data[info.name] = b""
        members.append(info)
    archive = _tar_with(tmp_path / "many-1.tar.gz", members, data)
    with pytest.raises(SourceError, match=r"many-1.tar.gz expands to more than 10 members"):
        prepare_package(str(archive), str(staging))
    zipped = tmp_path / "many-1.zip"
    with zipfile.ZipFile(zipped, "w") as zf:
        for name, payload in data.items():
            zf.writestr(name, payload)
    with pytest.raises(SourceError, match=r"many-1.zip expands to 13 members"):
        prepare_package(str(zipped), str(staging))


def test_the_local_runs_folder_is_never_packaged(tmp_path, secret):
    # `cd project && kfp-spot run --source .` keeps its runs in ./kfp-spot-runs/: checkpoints,
    # emulator state and logs that must not reach the package (nor be copied or looked at).
    project = write_project(tmp_path / "src")
    plain = prepare_package(str(project), str(tmp_path / "stage-plain"))
    runs = project / sources.LOCAL_RUNS_DIR / "20261201-120000"
    (runs / "job" / "checkpoints" / "step-1").mkdir(parents=True)
    (runs / "job" / "checkpoints" / "step-1" / "weights.bin").write_bytes(b"\0" * 4096)
    (runs / "link").symlink_to(secret)  # a link leaving the tree: refused anywhere else
    with_runs = prepare_package(str(project), str(tmp_path / "stage-runs"))
    with tarfile.open(with_runs.uri) as tf:
        assert not any(sources.LOCAL_RUNS_DIR in n for n in tf.getnames())
    assert with_runs.sha256 == plain.sha256  # the same package, byte for byte


@pytest.mark.parametrize(
    ("paths", "found"),
    [
        (["t/model.py", "t/Model.py"], ("t/model.py", "t/Model.py")),
        (["Trainer/a.py", "trainer/b.py"], ("Trainer", "trainer")),
        (["t/caf\u00e9.py", "t/cafe\u0301.py"], ("t/caf\u00e9.py", "t/cafe\u0301.py")),
        (["t/", "t/a.py", "./t/a.py", "t/a.py"], None),  # the same paths again, folders
        (["t/a.py", "t/b.py", "u/A.py"], None),
    ],
)
def test_case_collision_finds_paths_a_case_insensitive_disk_makes_one(paths, found):
    assert sources.case_collision(paths) == found


def test_a_tar_with_two_files_differing_only_in_case_is_refused(tmp_path, staging, monkeypatch):
    # Unpacked on a Mac the second would overwrite the first, and the staged sdist lack it.
    members, data = _project_members("t-1")
    other = tarfile.TarInfo("t-1/t/Task.py")
    data[other.name] = b"print(2)\n"
    other.size = len(data[other.name])
    archive = _tar_with(tmp_path / "t-1.tar.gz", [*members, other], data)
    written: list[str] = []
    real_extract = tarfile.TarFile.extract

    def spy(self, member, *args, **kwargs):
        written.append(member.name if isinstance(member, tarfile.TarInfo) else member)
        return real_extract(self, member, *args, **kwargs)

    monkeypatch.setattr(tarfile.TarFile, "extract", spy)
    with pytest.raises(
        SourceError,
        match=r"t-1.tar.gz holds t-1/t/task.py and t-1/t/Task.py, which differ only in case "
        r"or Unicode form: on a case-insensitive disk \(macOS, Windows\) they are one",
    ):
        prepare_package(str(archive), str(staging))
    assert "t-1/t/Task.py" not in written  # refused before it was written


def test_a_zip_with_two_folders_differing_only_in_case_is_refused(tmp_path, staging):
    archive = tmp_path / "t-1.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("t-1/pyproject.toml", '[project]\nname = "t"\nversion = "1"\n')
        zf.writestr("t-1/t/__init__.py", "")
        zf.writestr("t-1/T/task.py", "print(1)\n")
    with pytest.raises(SourceError, match=r"t-1.zip holds t-1/t and t-1/T, which differ only"):
        prepare_package(str(archive), str(staging))


def test_a_project_with_two_files_differing_only_in_case_is_refused(tmp_path, staging):
    project = write_project(tmp_path / "src")
    (project / "tinytrainer" / "README.txt").write_text("a")
    (project / "tinytrainer" / "readme.txt").write_text("b")
    with pytest.raises(SourceError, match=r"README.txt and .*readme.txt|readme.txt and .*README"):
        prepare_package(str(project), str(staging))
