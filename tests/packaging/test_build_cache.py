"""The build cache: the same source built with the same tools is taken from the cache, byte for
byte what a build gives; any change to the tree is a new build."""

import hashlib
import os
import shutil
import tarfile
import textwrap
import time
from pathlib import Path

from kfp_spot.packaging import prepare_package
from kfp_spot.packaging.build import backend_requires, build_key, run_build
from tests.packaging.probe_plugin import PLUGIN, install_plugin, legacy_project


def _fresh(project: Path, dest: Path) -> Path:
    """A copy of the tree, as prepare_package builds one (a build writes into its tree)."""
    return Path(shutil.copytree(project, dest))


def _digests(built) -> tuple[str, str]:
    return tuple(hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in built)


def test_a_rebuild_of_the_same_source_comes_from_the_cache_with_the_same_bytes(project, tmp_path):
    cache = tmp_path / "cache"
    first = run_build(_fresh(project, tmp_path / "t1"), tmp_path / "one", cache_dir=cache)
    (entry,) = (cache / "builds").iterdir()
    kept = {p.name: p.read_bytes() for p in entry.iterdir() if p.name != "asked.json"}
    assert kept == {p.name: p.read_bytes() for p in (first.sdist, first.wheel)}
    assert (entry / "asked.json").read_text() == "{}"  # setuptools asks for nothing more here
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
    (kept,) = entry.glob("*.whl")
    assert (entry / "asked.json").read_text() == "{}"  # setuptools asks for nothing more here
    kept.write_bytes(b"the wheel prepare_package built")  # marked: a rebuild would not say so
    (wheel,) = envcache.build_wheels([sdist], tmp_path / "out", cache)
    assert wheel.read_bytes() == b"the wheel prepare_package built"
    assert wheel.parent.parent == tmp_path / "out"
    # Without a cache it is built, and the build is the wheel prepare_package checked.
    (rebuilt,) = envcache.build_wheels([sdist], tmp_path / "uncached")
    assert rebuilt.name == kept.name


def _probe(sdist: Path) -> str:
    with tarfile.open(sdist) as archive:
        (member,) = [m for m in archive.getmembers() if m.name.endswith(".egg-info/probe.txt")]
        handle = archive.extractfile(member)
        assert handle is not None
        return handle.read().decode()


def test_what_the_backend_asked_for_in_another_version_is_built_again(tmp_path, monkeypatch):
    site = tmp_path / "site"
    monkeypatch.syspath_prepend(str(site))  # installed, as this interpreter sees it
    monkeypatch.setenv("PYTHONPATH", str(site))
    project = legacy_project(
        tmp_path / "legacy",
        textwrap.dedent(f"""\
            from setuptools import setup
            setup(name="probed", version="1.0", py_modules=["probed"],
                  setup_requires=["{PLUGIN}"])
            """),
    )
    cache = tmp_path / "cache"
    install_plugin(site, "1.0")
    first = run_build(_fresh(project, tmp_path / "t1"), tmp_path / "one", cache_dir=cache)
    assert _probe(first.sdist) == "1.0"
    (entry,) = (cache / "builds").iterdir()
    assert (entry / "asked.json").read_text() == f'{{"{PLUGIN}": "1.0"}}'
    again = run_build(_fresh(project, tmp_path / "t2"), tmp_path / "two", cache_dir=cache)
    assert again.sdist.read_bytes() == first.sdist.read_bytes()
    install_plugin(site, "2.0")  # the tree and its declared requirements unchanged
    upgraded = run_build(_fresh(project, tmp_path / "t3"), tmp_path / "three", cache_dir=cache)
    assert _probe(upgraded.sdist) == "2.0"
    # the stale entry gave way: the next build with 2.0 is a hit, not another build
    (entry,) = (cache / "builds").iterdir()
    assert (entry / "asked.json").read_text() == f'{{"{PLUGIN}": "2.0"}}'


def test_the_key_follows_what_the_build_requirements_require_in_turn(
    project, tmp_path, monkeypatch
):
    site = tmp_path / "site"
    monkeypatch.syspath_prepend(str(site))

    def install(name: str, version: str, requires: str = "") -> None:
        for old in site.glob(f"{name.replace('-', '_')}-*.dist-info"):
            shutil.rmtree(old)
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        extra = f"Requires-Dist: {requires}\n" if requires else ""
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{extra}"
        )

    install("kfpspot-probe-backend", "1.0", "kfpspot-probe-helper")
    install("kfpspot-probe-helper", "1.0")
    key = build_key(project, ["kfpspot-probe-backend"])
    install("kfpspot-probe-helper", "1.1")  # the backend's own requirement, upgraded
    assert build_key(project, ["kfpspot-probe-backend"]) != key


def test_a_kept_wheel_whose_build_asked_for_another_version_is_built_again(tmp_path, monkeypatch):
    """The wheel of an sdist a job installs, kept by the emulator's environments, records what its
    build asked for (a setup_requires) as the build cache's entries do: an upgraded plugin
    builds it again, and the new wheel takes the entry's place."""
    from kfp_spot import envcache

    site = tmp_path / "site"
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    project = legacy_project(
        tmp_path / "src" / "probed-1.0",
        textwrap.dedent(f"""\
            from setuptools import setup
            setup(name="probed", version="1.0", py_modules=["probed"],
                  setup_requires=["{PLUGIN}"])
            """),
    )
    sdist = tmp_path / "probed-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(project, arcname=project.name)
    cache = tmp_path / "cache"
    install_plugin(site, "1.0")
    (first,) = envcache.build_wheels([sdist], tmp_path / "one", cache)
    (entry,) = (cache / "wheels").iterdir()
    assert (entry / "asked.json").read_text() == f'{{"{PLUGIN}": "1.0"}}'
    (kept,) = entry.glob("*.whl")
    kept.write_bytes(b"kept")  # marked: a rebuild would not give these bytes
    (again,) = envcache.build_wheels([sdist], tmp_path / "two", cache)
    assert again.read_bytes() == b"kept"
    install_plugin(site, "2.0")  # the sdist and its declared requirements unchanged
    (upgraded,) = envcache.build_wheels([sdist], tmp_path / "three", cache)
    assert upgraded.read_bytes() != b"kept" and upgraded.name == first.name
    (entry,) = (cache / "wheels").iterdir()
    assert (entry / "asked.json").read_text() == f'{{"{PLUGIN}": "2.0"}}'
