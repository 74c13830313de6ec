"""The build cache: the same source built with the same tools is taken from the cache, byte for
byte what a build gives; any change to the tree is a new build."""

import hashlib
import os
import shutil
import time
from pathlib import Path

from kfp_spot.packaging import prepare_package
from kfp_spot.packaging.build import backend_requires, build_key, run_build


def _fresh(project: Path, dest: Path) -> Path:
    """A copy of the tree, as prepare_package builds one (a build writes into its tree)."""
    return Path(shutil.copytree(project, dest))


def _digests(built) -> tuple[str, str]:
    return tuple(hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in built)


def test_a_rebuild_of_the_same_source_comes_from_the_cache_with_the_same_bytes(project, tmp_path):
    cache = tmp_path / "cache"
    first = run_build(_fresh(project, tmp_path / "t1"), tmp_path / "one", cache_dir=cache)
    (entry,) = (cache / "builds").iterdir()
    kept = {p.name: p.read_bytes() for p in entry.iterdir()}
    assert kept == {p.name: p.read_bytes() for p in (first.sdist, first.wheel)}
    uncached = run_build(_fresh(project, tmp_path / "t2"), tmp_path / "two")
    assert _digests((uncached.sdist, uncached.wheel)) == _digests((first.sdist, first.wheel))
    # What a hit returns is the kept copy: marked here, so the test sees it was not rebuilt.
    (entry / first.wheel.name).write_bytes(b"kept")
    again = run_build(_fresh(project, tmp_path / "t3"), tmp_path / "three", cache_dir=cache)
    assert again.wheel.read_bytes() == b"kept"
    assert again.sdist.read_bytes() == kept[first.sdist.name]
    assert again.sdist.parent == tmp_path / "three" and not again.isolated


def test_the_key_follows_content_and_the_executable_bit_not_modification_times(project):
    requires = backend_requires(project)
    key = build_key(project, requires)
    task = project / "tinytrainer" / "task.py"
    os.utime(task, (time.time() + 1000, time.time() + 1000))
    assert build_key(project, requires) == key
    task.chmod(0o755)
    executable = build_key(project, requires)
    assert executable != key
    task.write_text(task.read_text() + "# changed\n")
    assert build_key(project, requires) not in (key, executable)
    assert build_key(project, [*requires, "wheel"]) != build_key(project, requires)


def test_prepare_package_with_a_build_cache_stages_what_a_build_stages(project, tmp_path):
    cache = tmp_path / "cache"
    fresh = prepare_package(str(project), str(tmp_path / "a"))
    cached = [
        prepare_package(str(project), str(tmp_path / f"b{i}"), build_cache_dir=cache)
        for i in range(2)
    ]
    assert {c.sha256 for c in cached} == {fresh.sha256}
    (project / "tinytrainer" / "task.py").write_text("print('changed')\n")
    changed = prepare_package(str(project), str(tmp_path / "c"), build_cache_dir=cache)
    assert changed.sha256 != fresh.sha256
    assert len(list((cache / "builds").iterdir())) == 2


def test_prepare_package_hands_its_wheel_to_the_environments_that_install_its_sdist(
    project, tmp_path
):
    """The job's environment (on the emulator) and the evaluation's install the staged sdist:
    they take the wheel prepare_package built of it instead of building it again."""
    from kfp_spot import envcache

    cache = tmp_path / "cache"
    info = prepare_package(str(project), str(tmp_path / "stage"), build_cache_dir=cache)
    sdist = Path(info.uri)
    (entry,) = (cache / "wheels").iterdir()
    (kept,) = entry.iterdir()
    assert kept.name.endswith(".whl")
    kept.write_bytes(b"the wheel prepare_package built")  # marked: a rebuild would not say so
    (wheel,) = envcache.build_wheels([sdist], tmp_path / "out", cache)
    assert wheel.read_bytes() == b"the wheel prepare_package built"
    assert wheel.parent.parent == tmp_path / "out"
    # Without a cache it is built, and the build is the wheel prepare_package checked.
    (rebuilt,) = envcache.build_wheels([sdist], tmp_path / "uncached")
    assert rebuilt.name == kept.name
