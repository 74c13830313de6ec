"""Every source kind: project dir, bare package dir, script, local and gs:// archives."""

import io
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from kfp_spot import envcache
from kfp_spot.packaging import PackagingError
from kfp_spot.pipelines import local, local_run
from tests.prepare import prepare_package


@pytest.fixture(scope="module")
def installed(tmp_path_factory, env_cache):
    """A script, a script placed at a dotted module and a bare package directory, each prepared
    as its own package, and the python of one environment they are all installed into (one
    environment, not one per package: each test runs its own package's module in it).
    """
    root = tmp_path_factory.mktemp("sources")
    script = root / "script" / "train_model.py"
    script.parent.mkdir()
    script.write_text("print('script ran')\n")
    dotted = root / "dotted" / "whatever.py"
    dotted.parent.mkdir()
    dotted.write_text("print(__name__, __package__)\n")
    package = root / "bare" / "mytrainer"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "config.yaml").write_text("lr: 0.1\n")
    (package / "task.py").write_text(
        "import importlib.resources as r\n"
        "print(r.files('mytrainer').joinpath('config.yaml').read_text().strip())\n"
    )
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "junk.pyc").write_bytes(b"junk")
    infos = {
        "script": prepare_package(str(script), str(root / "stage"), requirements=["numpy>=1"]),
        "dotted": prepare_package(str(dotted), str(root / "stage"), python_module="trainer.task"),
        "bare": prepare_package(str(package), str(root / "stage"), python_module="mytrainer.task"),
    }
    python = envcache.package_env([info.uri for info in infos.values()], env_cache)
    return infos, python


def run_module(installed, kind, tmp_path):
    """The output of ``python -m`` of the ``kind`` package's module, in the shared environment."""
    infos, python = installed
    return subprocess.run(
        [str(python), "-m", infos[kind].python_module],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_single_script_becomes_a_module_named_after_it(tmp_path, installed):
    info = installed[0]["script"]
    assert info.source_kind == "script"
    assert info.python_module == "train_model" and info.name == "train-model"
    assert info.version.startswith("0.0.0+src")
    assert info.requirements == ("numpy>=1",)
    assert run_module(installed, "script", tmp_path) == "script ran\n"
    # Without a project file the version names the content: a changed script, a new version.
    script = tmp_path / "train_model.py"
    script.write_text("print('changed')\n")
    changed = prepare_package(str(script), str(tmp_path / "stage"))
    assert changed.version != info.version and changed.sha256 != info.sha256


def test_script_placed_at_a_dotted_module(tmp_path, installed):
    info = installed[0]["dotted"]
    assert info.python_module == "trainer.task" and info.name == "trainer"
    assert run_module(installed, "dotted", tmp_path) == "__main__ trainer\n"


def test_bare_package_directory_keeps_data_files(tmp_path, installed):
    info = installed[0]["bare"]
    assert info.source_kind == "module" and info.name == "mytrainer"
    assert run_module(installed, "bare", tmp_path) == "lr: 0.1\n"
    with tarfile.open(info.uri) as tf:
        names = tf.getnames()
    assert not any("__pycache__" in n for n in names)
    assert any(n.endswith("mytrainer/sub/__init__.py") for n in names)


def test_bare_package_needs_python_module(tmp_path):
    package = tmp_path / "mytrainer"
    package.mkdir()
    (package / "__init__.py").write_text("")
    with pytest.raises(PackagingError, match=r"python_module: required .* e\.g\. mytrainer\.task"):
        prepare_package(str(package), str(tmp_path / "stage"))


@pytest.mark.parametrize(("name", "fixed"), [("my-trainer", "my_trainer"), ("2stage", "_2stage")])
def test_a_bare_package_directory_named_no_package_name_is_refused_saying_what_to_rename(
    tmp_path, name, fixed
):
    # The package is installed under its directory's name: the refusal named the name, not the
    # fix, and the python_module it suggested (my-trainer.task) was no module name either.
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text("print('training')\n")
    with pytest.raises(PackagingError) as info:
        prepare_package(str(package), str(tmp_path / "stage"), python_module=f"{fixed}.task")
    assert info.value.field == "source"
    assert str(info.value) == (
        f"source: {package} is a bare package directory (an __init__.py, no project file), which "
        f"is installed as the package its directory names, but {name!r} is not a Python package "
        "name (letters, digits and '_', not starting with a digit; no keyword): rename the "
        f"directory, e.g. to {fixed}"
    )


def test_an_archived_bare_package_is_named_by_its_archive_not_its_extraction_folder(tmp_path):
    # The refusal named a folder under /tmp that the user never saw (and that is gone).
    folder = tmp_path / "src" / "mytrainer"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    archive = shutil.make_archive(str(tmp_path / "mytrainer"), "zip", tmp_path / "src")
    with pytest.raises(PackagingError) as info:
        prepare_package(archive, str(tmp_path / "stage"))
    assert str(info.value) == (
        f"python_module: required for the bare package directory {archive}'s mytrainer/: the "
        "module the job runs, e.g. mytrainer.task"
    )
    with pytest.raises(PackagingError) as info:
        prepare_package(archive, str(tmp_path / "stage"), python_module="trainer.task")
    assert str(info.value) == (
        "python_module: 'trainer.task' is not inside the package 'mytrainer' that "
        f"{archive}'s mytrainer/ holds"
    )


def test_a_bare_package_given_as_dot_is_the_package_its_folder_names(tmp_path, monkeypatch):
    # `cd mytrainer && kfp-spot run --source .`: the name of "." is "", refused as no package
    # name ("rename the directory, e.g. to _"), though the folder is mytrainer.
    from kfp_spot.packaging.sources import bare_package_module_problem, bare_package_name_problem

    package = tmp_path / "mytrainer"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text("print('training')\n")
    monkeypatch.chdir(package)
    assert bare_package_name_problem(Path("."), ".") is None
    assert bare_package_module_problem(Path("."), "").endswith("e.g. mytrainer.task")
    info = prepare_package(".", str(tmp_path / "stage"), python_module="mytrainer.task")
    assert info.name == "mytrainer" and info.python_module == "mytrainer.task"


def test_a_bare_package_directory_named_like_a_standard_module_is_refused_saying_to_rename_it(
    tmp_path,
):
    # `python -m tokenize.task` on the VM finds Python's own tokenize: refused after the build,
    # and the local run had suggested `python_module=tokenize.task`.
    package = tmp_path / "tokenize"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text("print('training')\n")
    with pytest.raises(PackagingError) as info:
        prepare_package(str(package), str(tmp_path / "stage"), python_module="tokenize.task")
    assert info.value.field == "source"
    assert str(info.value).endswith(
        "but 'tokenize' is the name of a module of Python's standard library, which comes first "
        "on sys.path: on Vertex AI `python -m tokenize.MODULE` finds Python's own tokenize, never "
        "this package; rename the directory, e.g. to tokenize_trainer"
    )


def test_a_bare_package_without_a_task_module_is_told_the_modules_it_holds(tmp_path):
    # "e.g. digits.task" named a module the package does not have.
    from kfp_spot.packaging.sources import bare_package_module_problem

    package = tmp_path / "digits"
    (package / "models").mkdir(parents=True)
    for name in ("__init__.py", "fit.py", "score.py", "models/__init__.py", "models/mlp.py"):
        (package / name).write_text("")
    assert bare_package_module_problem(package, "") == (
        f"required for the bare package directory {package}: the module the job runs, one of "
        "its modules (digits.fit, digits.models.mlp, digits.score)"
    )


def test_tar_gz_archive_builds_the_same_package_as_its_directory(built, project, tmp_path):
    archive = tmp_path / "src.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(project, arcname="tiny-src")
    from_archive = prepare_package(str(archive), str(tmp_path / "stage"))
    assert from_archive.source_kind == "project+archive"
    assert from_archive.sha256 == built.sha256


_APPLE_DOUBLE = b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        "


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_an_archive_made_on_a_mac_builds_the_same_package(built, project, tmp_path, kind):
    # Finder's Compress puts __MACOSX/ beside the folder; macOS's tar stores ._NAME AppleDouble
    # files (extended attributes) beside each file. Neither is the source: the top folder is
    # entered and the package holds the same files, not "no project file".
    archive = tmp_path / f"src.{kind}"
    meta = [("__MACOSX/tiny-src/._pyproject.toml", _APPLE_DOUBLE), ("._tiny-src", _APPLE_DOUBLE)]
    meta += [
        (f"tiny-src/{p.parent.relative_to(project).as_posix()}/._{p.name}", _APPLE_DOUBLE)
        for p in sorted(project.rglob("*.py"))
    ]
    files = [
        (f"tiny-src/{p.relative_to(project).as_posix()}", p.read_bytes())
        for p in sorted(project.rglob("*"))
        if p.is_file()
    ]
    if kind == "zip":
        with zipfile.ZipFile(archive, "w") as zf:
            for name, data in [*files, *meta]:
                zf.writestr(name.replace("/./", "/"), data)
    else:
        with tarfile.open(archive, "w:gz") as tf:
            for name, data in [*files, *meta]:
                member = tarfile.TarInfo(name.replace("/./", "/"))
                member.size = len(data)
                tf.addfile(member, io.BytesIO(data))
    from_archive = prepare_package(str(archive), str(tmp_path / "stage"))
    assert from_archive.source_kind == "project+archive"
    assert from_archive.sha256 == built.sha256


def test_zip_archive_without_a_top_folder(project, tmp_path):
    archive = tmp_path / "src.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(project.rglob("*")):
            zf.write(path, path.relative_to(project).as_posix())
    info = prepare_package(str(archive), str(tmp_path / "stage"))
    assert info.name == "tiny-trainer" and info.python_module == "tinytrainer.task"


def test_an_sdist_is_a_source_too(built, tmp_path):
    rebuilt = prepare_package(built.uri, str(tmp_path / "stage"))
    assert (rebuilt.name, rebuilt.version) == (built.name, built.version)
    assert rebuilt.source_kind == "project+archive"


def test_python_module_from_tool_table(project, tmp_path):
    (project / "tinytrainer" / "other.py").write_text("print('other')\n")
    (project / "tinytrainer" / "task.py").unlink()
    with open(project / "pyproject.toml", "a") as handle:
        handle.write('\n[tool.kfp-spot]\npython-module = "tinytrainer.other"\n')
    info = prepare_package(str(project), str(tmp_path / "stage"))
    assert info.python_module == "tinytrainer.other"


def test_ambiguous_module_must_be_named(project, tmp_path):
    shutil.copy(project / "tinytrainer" / "task.py", project / "tinytrainer" / "__main__.py")
    with pytest.raises(PackagingError, match=r"python_module: cannot tell which module"):
        prepare_package(str(project), str(tmp_path / "stage"))


def test_setup_py_project(tmp_path):
    src = tmp_path / "legacy"
    (src / "legacytrainer").mkdir(parents=True)
    (src / "legacytrainer" / "__init__.py").write_text("")
    (src / "legacytrainer" / "task.py").write_text("print('legacy')\n")
    (src / "setup.py").write_text(
        "from setuptools import setup\n"
        "setup(name='legacy-trainer', version='2.0', packages=['legacytrainer'],"
        " install_requires=['numpy'])\n"
    )
    info = prepare_package(str(src), str(tmp_path / "stage"))
    assert (info.name, info.version, info.python_module) == (
        "legacy-trainer",
        "2.0",
        "legacytrainer.task",
    )
    assert info.requirements == ("numpy",)


def test_src_layout_project(project, tmp_path):
    (project / "src").mkdir()
    shutil.move(str(project / "tinytrainer"), str(project / "src" / "tinytrainer"))
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            'packages = ["tinytrainer"]', 'package-dir = {"" = "src"}\npackages = ["tinytrainer"]'
        )
    )
    info = prepare_package(str(project), str(tmp_path / "stage"))
    assert info.python_module == "tinytrainer.task"


def test_a_setup_cfg_without_pyproject_or_setup_py_is_refused_naming_what_to_add(tmp_path):
    # pip and PyPA build take neither as a project: the build crashed with a traceback.
    src = tmp_path / "cfgonly"
    (src / "cfgtrainer").mkdir(parents=True)
    (src / "cfgtrainer" / "__init__.py").write_text("")
    (src / "cfgtrainer" / "task.py").write_text("print('cfg')\n")
    (src / "setup.cfg").write_text(
        "[metadata]\nname = cfg-trainer\nversion = 0.1\n[options]\npackages = find:\n"
    )
    message = (
        f"source: {src} has a setup.cfg but neither a pyproject.toml nor a setup.py, which pip "
        "and the build need to take it as a project (\"neither 'setup.py' nor 'pyproject.toml' "
        'found"): add a pyproject.toml holding [build-system] requires = '
        '["setuptools>=61"] and build-backend = "setuptools.build_meta"; the setup.cfg is read '
        "as before"
    )
    with pytest.raises(PackagingError) as info:
        prepare_package(str(src), str(tmp_path / "stage"))
    assert str(info.value) == message
    with pytest.raises(local.LocalRunError) as refused:
        local_run.spot_training_arguments(src)
    assert str(refused.value) == message
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    info_ok = prepare_package(str(src), str(tmp_path / "stage"))
    assert (info_ok.name, info_ok.python_module) == ("cfg-trainer", "cfgtrainer.task")


def test_a_source_written_with_a_tilde_is_told_how_to_expand_it(tmp_path):
    # local.run(..., {"code": "~/code/trainer"}): no shell expanded it, and "does not exist"
    # alone left the user looking at a folder that does exist.
    with pytest.raises(PackagingError) as info:
        prepare_package("~/no-such-trainer", str(tmp_path / "stage"))
    assert str(info.value) == (
        "source: ~/no-such-trainer does not exist: '~' is expanded only by a shell; pass "
        "os.path.expanduser(...) of it, or the full path"
    )
    with pytest.raises(local.LocalRunError, match=r"'~' is expanded only by a shell"):
        local_run.spot_training_arguments("~/no-such-trainer")
