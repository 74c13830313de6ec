"""The light kfp-spot-trainer wheel: computed from the import graph, reproducible, staged."""

import base64
import hashlib
import importlib.util
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from importlib import metadata as importlib_metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import kfp_spot
from kfp_spot.packaging import PackagingError, trainer_dist
from tests.packaging.tiny import write_project
from tests.prepare import prepare_package


def _wheel_files(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def test_contents_follow_the_trainer_import_graph():
    spec = trainer_dist.contents()
    names = set(spec.files)
    # The trainer package, and what it imports from kfp_spot, with the parent package.
    assert {
        "kfp_spot/__init__.py",
        "kfp_spot/version.py",
        "kfp_spot/fs.py",
        "kfp_spot/checkpoints/__init__.py",
        "kfp_spot/trainer/__init__.py",
        "kfp_spot/trainer/manager.py",
    } <= names
    trainer_files = {
        p.relative_to(trainer_dist.package_dir().parent).as_posix()
        for p in (trainer_dist.package_dir() / "trainer").rglob("*.py")
    }
    assert trainer_files <= names
    # Nothing of the pipeline side: no launcher, emulator, evaluation, CLI, validation.
    for prefix in ("kfp_spot/jobs", "kfp_spot/emulator", "kfp_spot/evaluation", "kfp_spot/cli"):
        assert not any(n.startswith(prefix) for n in names), prefix
    assert "kfp_spot/validation.py" not in names and "kfp_spot/envcache.py" not in names
    assert spec.version == kfp_spot.__version__


def test_requirements_are_declared_and_pinned_like_kfp_spot():
    spec = trainer_dist.contents()
    assert spec.requirements == (
        "fsspec>=2024.6",  # gs:// where no /gcs mount exists
        "google-crc32c>=1.5",  # every file's checksum
        'gcsfs>=2024.6; extra == "gcs"',
    )
    # Each pin is the full kfp-spot's own (one place pins are written: pyproject.toml).
    own = {str(r) for r in map(Requirement, importlib_metadata.requires("kfp-spot") or [])}
    assert {r.split(";")[0] for r in spec.requirements} <= own
    assert spec.requires_python == ">=3.10"


def _without(site_packages: Path, view: Path, hidden: tuple[str, ...]) -> None:
    """``view``: links to every entry of ``site_packages`` except those named ``hidden*``."""
    view.mkdir()
    for entry in site_packages.iterdir():
        if not entry.name.lower().startswith(hidden):
            (view / entry.name).symlink_to(entry)


FRAMEWORKS = ("keras", "xgboost", "transformers")


def test_wheel_does_not_depend_on_the_frameworks_installed_where_it_is_built(tmp_path):
    for name in FRAMEWORKS:  # this environment has them (the dev extra)...
        assert importlib.util.find_spec(name) is not None, name
    here = trainer_dist.build_trainer_wheel(tmp_path / "here")
    meta = next(v for k, v in _wheel_files(here).items() if k.endswith("METADATA")).decode()
    required = [line for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    assert not [line for line in required if any(f in line for f in FRAMEWORKS)], required
    # ...and a Python that sees the same site-packages without them builds the same bytes.
    view = tmp_path / "site"
    _without(Path(sysconfig.get_paths()["purelib"]), view, FRAMEWORKS)
    script = textwrap.dedent(
        f"""
        import importlib.metadata, importlib.util, site, sys
        from pathlib import Path
        site.addsitedir({str(view)!r})
        for name in {FRAMEWORKS!r}:
            assert importlib.util.find_spec(name) is None, name
        for dist in ("keras", "xgboost-cpu", "transformers"):
            try:
                importlib.metadata.distribution(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
            sys.exit(dist + " is visible")
        from kfp_spot.packaging import trainer_dist
        print(trainer_dist.build_trainer_wheel(Path({str(tmp_path / "there")!r})))
        """
    )
    run = subprocess.run(
        [sys.executable, "-S", "-c", script], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    assert "no installed distribution" not in run.stderr
    there = Path(run.stdout.strip().splitlines()[-1])
    assert there.read_bytes() == here.read_bytes()


def test_the_wheel_is_built_once_per_content(tmp_path, monkeypatch):
    package = _fake_kfp_spot(tmp_path / "src", "import fsspec\n")
    cache = tmp_path / "cache"
    first = trainer_dist.cached_trainer_wheel(cache, scratch_dir=tmp_path / "s", root=package)
    assert first.parent.parent == cache / "kfp-spot-trainer"

    def not_again(*args, **kwargs):
        raise AssertionError("done again")

    with monkeypatch.context() as patched:  # a tree seen before: neither parsed nor built
        patched.setattr(trainer_dist, "build_trainer_wheel", not_again)
        patched.setattr(trainer_dist, "contents", not_again)
        again = trainer_dist.cached_trainer_wheel(cache, scratch_dir=tmp_path / "s", root=package)
    assert again == first
    # A file it does not ship changed: parsed again, the same content, so the same wheel.
    (package / "unused.py").write_text("import kfp\nVALUE = 2\n")
    with monkeypatch.context() as patched:
        patched.setattr(trainer_dist, "build_trainer_wheel", not_again)
        same = trainer_dist.cached_trainer_wheel(cache, scratch_dir=tmp_path / "s", root=package)
    assert same == first
    # A changed file it ships is a new content: a new wheel, under a new key.
    (package / "helper.py").write_text("import fsspec\nVALUE = 1\n")
    changed = trainer_dist.cached_trainer_wheel(cache, scratch_dir=tmp_path / "s", root=package)
    assert changed.parent != first.parent and first.is_file()
    assert _wheel_files(changed)["kfp_spot/helper.py"] == b"import fsspec\nVALUE = 1\n"
    # Nothing left beside the wheels and the index (a build is renamed into place whole).
    assert sorted(p.name for p in (cache / "kfp-spot-trainer").iterdir()) == sorted(
        [first.parent.name, changed.parent.name, "trees"]
    )


def test_wheel_is_reproducible_and_its_record_is_valid(tmp_path):
    first = trainer_dist.build_trainer_wheel(tmp_path / "a")
    second = trainer_dist.build_trainer_wheel(tmp_path / "b")
    assert first.name == f"kfp_spot_trainer-{kfp_spot.__version__}-py3-none-any.whl"
    assert first.read_bytes() == second.read_bytes()
    files = _wheel_files(first)
    dist_info = f"kfp_spot_trainer-{kfp_spot.__version__}.dist-info"
    meta = files[f"{dist_info}/METADATA"].decode()
    assert "Name: kfp-spot-trainer" in meta and f"Version: {kfp_spot.__version__}" in meta
    assert "Requires-Dist: fsspec>=2024.6" in meta
    record = files[f"{dist_info}/RECORD"].decode().splitlines()
    assert len(record) == len(files)
    for line in record:
        name, digest, size = line.rsplit(",", 2)
        if name.endswith("RECORD"):
            continue
        data = files[name]
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == f"sha256={expected}" and int(size) == len(data)
    source = (trainer_dist.package_dir() / "trainer" / "manager.py").read_bytes()
    assert files["kfp_spot/trainer/manager.py"] == source


def _fake_kfp_spot(root: Path, helper: str) -> Path:
    package = root / "kfp_spot"
    (package / "trainer").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "unused.py").write_text("import kfp\n")
    (package / "trainer" / "__init__.py").write_text(
        textwrap.dedent(
            """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                import kfp_spot.unused
            def later():
                from kfp_spot import helper
                return helper
            """
        )
    )
    (package / "helper.py").write_text(helper)
    return package


def test_files_follow_imports_and_requirements_stay_declared(tmp_path):
    package = _fake_kfp_spot(
        tmp_path,
        textwrap.dedent(
            """
            import json
            import fsspec
            try:
                import not_installed_anywhere
            except ImportError:
                not_installed_anywhere = None
            def arrays():
                import numpy
            def fit():
                import keras
            """
        ),
    )
    spec = trainer_dist.contents(package)
    assert set(spec.files) == {
        "kfp_spot/__init__.py",
        "kfp_spot/helper.py",
        "kfp_spot/trainer/__init__.py",
    }  # a lazy import counts; a TYPE_CHECKING one does not
    # The declared list, whatever the modules import: numpy and keras are the user's own.
    assert spec.requirements == trainer_dist.contents().requirements


def test_an_undeclared_import_is_a_kfp_spot_bug(tmp_path):
    package = _fake_kfp_spot(tmp_path, "import yaml\n")
    with pytest.raises(
        PackagingError, match=r"include_kfp_spot: .*\(kfp_spot.helper\) import yaml"
    ):
        trainer_dist.contents(package)


def test_a_trainer_module_needing_the_pipeline_stack_is_an_error(tmp_path):
    package = _fake_kfp_spot(tmp_path, "def f():\n    import kfp.dsl\n")
    with pytest.raises(PackagingError, match=r"include_kfp_spot: .*import kfp\.dsl \(kfp; in"):
        trainer_dist.contents(package)


@pytest.fixture(scope="module")
def uses_kfp_spot(tmp_path_factory):
    """The tiny project whose job imports kfp_spot: one source for the two tests below (a module
    fixture keeps them on one worker), so the run's build cache builds it once.
    """
    root = tmp_path_factory.mktemp("uses-kfp-spot")
    return write_project(root / "src", task="from kfp_spot.trainer import CheckpointManager\n")


def test_prepare_package_stages_it_next_to_a_package_that_imports_kfp_spot(tmp_path, uses_kfp_spot):
    project = uses_kfp_spot
    staging = tmp_path / "stage"
    info = prepare_package(str(project), str(staging))
    light = Path(info.kfp_spot_uri)
    assert info.package_uris == (info.uri, str(light))
    assert light.parent.parent == staging / "kfp-spot-trainer"
    assert light.parent.name == hashlib.sha256(light.read_bytes()).hexdigest()
    assert info.metadata()["kfp_spot_uri"] == str(light)
    again = prepare_package(str(project), str(staging))
    assert again.cache_hit and again.package_uris == info.package_uris


def test_opt_out_and_packages_that_do_not_need_it(tmp_path, uses_kfp_spot):
    opted_out = prepare_package(str(uses_kfp_spot), str(tmp_path / "s1"), include_kfp_spot=False)
    assert opted_out.package_uris == (opted_out.uri,) and opted_out.kfp_spot_uri == ""
    plain = prepare_package(str(write_project(tmp_path / "b")), str(tmp_path / "s2"))
    assert plain.package_uris == (plain.uri,)  # no kfp_spot import: nothing added
    declares = write_project(tmp_path / "c", task="import kfp_spot.trainer\n")
    pyproject = declares / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"numpy>=1.20"', '"numpy", "kfp-spot"'))
    own = prepare_package(str(declares), str(tmp_path / "s3"))
    assert own.package_uris == (own.uri,)  # it installs the full kfp-spot itself: never both
    assert not (tmp_path / "s3" / "kfp-spot-trainer").exists()


def test_is_light_distribution_file():
    assert trainer_dist.is_light_distribution_file(
        "gs://b/x/kfp_spot_trainer-0.1.0-py3-none-any.whl"
    )
    assert trainer_dist.is_light_distribution_file("kfp-spot-trainer-0.1.0.tar.gz")
    assert not trainer_dist.is_light_distribution_file("kfp_spot-0.1.0-py3-none-any.whl")
    assert not trainer_dist.is_light_distribution_file("kfp_spot_example_trainer-0.1.0.tar.gz")
