"""A package whose module to run is ambiguous is refused before it is built, from its source tree.

The job runs the package's one ``*.task`` module or package with ``__main__``; with several, the
module must be named. Read from the source tree as the wheel would hold it, never wider, so a
folder the build leaves out does not make a package ambiguous.
"""

from pathlib import Path

import pytest

from kfp_spot.packaging import PackagingError
from kfp_spot.packaging.taskmodule import ambiguity, source_ambiguity
from kfp_spot.pipelines import local, local_run
from tests.prepare import prepare_package

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "two-tasks"
version = "1.0"
"""


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _package(*modules: str) -> dict[str, str]:
    """Files of the packages holding ``modules`` (``a/task.py``), each folder with __init__.py."""
    files = {}
    for module in modules:
        parts = Path(module).parts
        for depth in range(len(parts) - 1):
            if parts[depth] != "src":
                files[str(Path(*parts[: depth + 1], "__init__.py"))] = ""
        files[module] = "print('training')\n"
    return files


def test_a_task_module_beside_a_main_is_named_as_the_wheel_would_name_it(tmp_path):
    project = _write(
        tmp_path,
        {
            "pyproject.toml": PYPROJECT + '[project.scripts]\ntrain = "trainer.task:main"\n',
            **_package("trainer/task.py", "trainer/__main__.py"),
        },
    )
    assert source_ambiguity(project, project.name) == ambiguity(
        "two-tasks", ["trainer", "trainer.__main__", "trainer.task"], {"train": "trainer.task:main"}
    )
    assert source_ambiguity(project, project.name) == (
        "cannot tell which module of two-tasks the job runs (modules: trainer, trainer.__main__, "
        "trainer.task); pass python_module or set [tool.kfp-spot] python-module in "
        "pyproject.toml; its console script train calls trainer.task:main: python-module = "
        '"trainer.task" runs that module'
    )


def test_a_src_layout_with_two_task_modules_is_ambiguous(tmp_path):
    project = _write(
        tmp_path,
        {
            "pyproject.toml": '[build-system]\nrequires = ["setuptools>=61"]\n',
            "setup.cfg": "[metadata]\nname = two\n",
            **_package("src/a/task.py", "src/a/b/task.py"),
        },
    )
    assert source_ambiguity(project, project.name) == ambiguity(
        "two", ["a", "a.b", "a.b.task", "a.task"], {}
    )


@pytest.mark.parametrize(
    "files",
    [
        # one task module: the job runs it
        {"pyproject.toml": PYPROJECT, "trainer/__init__.py": "", "trainer/task.py": ""},
        # a folder setuptools' discovery leaves out, and one that is no package
        {
            "pyproject.toml": PYPROJECT,
            "trainer/__init__.py": "",
            "trainer/task.py": "",
            "tests/__init__.py": "",
            "tests/task.py": "",
            "notebooks/task.py": "",
        },
        # a package the explicit list leaves out
        {
            "pyproject.toml": PYPROJECT + '[tool.setuptools]\npackages = ["a"]\n',
            "a/__init__.py": "",
            "a/task.py": "",
            "b/__init__.py": "",
            "b/task.py": "",
        },
        {
            "setup.cfg": "[metadata]\nname = two\n[options]\npackages = a\n",
            "a/__init__.py": "",
            "a/task.py": "",
            "a/sub/__init__.py": "",
            "a/sub/task.py": "",
        },
    ],
    ids=["one", "left-out-folders", "listed-packages", "setup-cfg-packages"],
)
def test_a_candidate_the_build_leaves_out_does_not_make_it_ambiguous(tmp_path, files):
    assert source_ambiguity(_write(tmp_path, files), "shown") is None


def test_prepare_package_refuses_an_ambiguous_module_before_the_build(tmp_path):
    # setup.py fails as soon as the build runs it: the refusal comes first.
    project = _write(
        tmp_path / "legacy",
        {
            "setup.py": "raise SystemExit('the build ran')\n",
            **_package("trainer/task.py", "trainer/__main__.py"),
        },
    )
    with pytest.raises(PackagingError) as info:
        prepare_package(str(project), str(tmp_path / "stage"))
    assert info.value.field == "python_module"
    assert "cannot tell which module of legacy the job runs" in str(info.value)
    assert not (tmp_path / "stage").exists()


@pytest.mark.parametrize(
    ("setup_py", "named"),
    [
        (
            'import setuptools\nsetuptools.setup(name="digits-trainer", packages=["trainer"])\n',
            True,
        ),
        ('from setuptools import setup\nNAME = "digits-trainer"\nsetup(name=NAME)\n', True),
        ("from setuptools import setup\nsetup(name=open('NAME').read())\n", False),
    ],
    ids=["literal", "module-constant", "computed"],
)
def test_a_setup_py_projects_ambiguity_names_its_setup_name(tmp_path, setup_py, named):
    # The refusal named the project's folder ("checkout") where setup.py names the package; it is
    # read statically (a computed name falls back to the folder), never run.
    files = {"setup.py": setup_py, **_package("trainer/task.py", "trainer/__main__.py")}
    refusal = source_ambiguity(_write(tmp_path / "checkout", files), "checkout")
    shown = "digits-trainer" if named else "checkout"
    assert refusal is not None and f"cannot tell which module of {shown} the job" in refusal


def test_kfp_spot_run_refuses_an_ambiguous_module_before_the_run(tmp_path):
    project = _write(
        tmp_path, {"pyproject.toml": PYPROJECT, **_package("a/task.py", "a/b/task.py")}
    )
    with pytest.raises(local.LocalRunError) as info:
        local_run.spot_training_arguments(project)
    assert str(info.value) == (
        "python_module: cannot tell which module of two-tasks the job runs (modules: a, a.b, "
        "a.b.task, a.task); pass python_module or set [tool.kfp-spot] python-module in "
        "pyproject.toml (set the pipeline parameter python_module)"
    )
    given = {"python_module": "a.task"}
    assert local_run.spot_training_arguments(project, parameters=given)["python_module"] == "a.task"


@pytest.mark.parametrize(
    "chooser",
    [
        {"setup.py": 'from setuptools import setup\nsetup(packages=["trainer"])\n'},
        {"pyproject.toml": PYPROJECT + '[tool.setuptools.packages.find]\ninclude = ["trainer*"]\n'},
        {"pyproject.toml": PYPROJECT + '[tool.setuptools]\npackage-dir = {"" = "lib"}\n'},
        {"setup.cfg": "[options]\npackages = find:\n[options.packages.find]\nexclude = legacy*\n"},
    ],
    ids=["setup.py", "packages.find", "package-dir", "setup.cfg find"],
)
def test_where_the_build_chooses_its_packages_the_wheel_decides(tmp_path, chooser):
    """A setup.py or a find table may leave a candidate out of the wheel (here ``legacy``): a
    package that builds with one candidate is not refused from what its source tree holds."""
    files = {"pyproject.toml": PYPROJECT, **_package("trainer/task.py", "legacy/task.py")}
    project = _write(tmp_path, {**files, **chooser})
    assert source_ambiguity(project, project.name) is None
