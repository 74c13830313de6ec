"""A requirement this machine installs and the training VMs skip, by its marker, is warned of.

On a Mac ``tensorflow-macos; sys_platform == "darwin"`` installs here, in the local emulator and
in the import check; on the Linux VM pip skips it and the job's ``import tensorflow`` fails there.
"""

from pathlib import Path

import pytest

from kfp_spot import executors
from kfp_spot.packaging import PackagingError
from kfp_spot.packaging.platformdeps import (
    imported_modules,
    local_reference,
    skipped_on_vertex,
    unread_requirements,
)
from tests.packaging.tiny import write_project
from tests.prepare import prepare_package

IMAGE = executors.profile(executors.DEFAULT_EXECUTOR_IMAGE)
MAC = {
    "python_version": "3.12",
    "python_full_version": "3.12.4",
    "sys_platform": "darwin",
    "platform_system": "Darwin",
    "os_name": "posix",
    "platform_machine": "arm64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "platform_release": "23.5.0",
    "platform_version": "Darwin Kernel Version 23.5.0",
    "implementation_version": "3.12.4",
}
PROVIDES = {"tensorflow": ["tensorflow-macos", "tensorflow"], "tensorflow-plugins": ["metal"]}


def _trainer(tmp_path: Path, task: str) -> Path:
    (tmp_path / "src" / "trainer").mkdir(parents=True)
    (tmp_path / "src" / "trainer" / "__init__.py").write_text("")
    (tmp_path / "src" / "trainer" / "task.py").write_text(task)
    return tmp_path


def _warnings(tmp_path, requirements, task="import json\nimport tensorflow as tf\n"):
    imported = imported_modules(_trainer(tmp_path, task), "trainer.task")
    return skipped_on_vertex(requirements, IMAGE, imported, here=MAC, provides=PROVIDES)


def test_a_mac_only_framework_the_job_imports_is_named_with_its_import(tmp_path):
    requirement = 'tensorflow-macos>=2.15; sys_platform == "darwin"'
    assert _warnings(tmp_path, [requirement, "numpy"]) == [
        f"requirement {requirement!r} is installed on this machine but not on Vertex AI's "
        "training VMs (Linux x86_64, Python 3.10, sklearn-cpu.1-6): its marker is false there, "
        "so pip skips it, and src/trainer/task.py, line 2 imports tensorflow, which nothing else "
        "the package declares or the image holds provides there: the job fails at that import "
        "on Vertex AI (and in the local emulator and the import check, which install what the VM "
        "installs). Declare what provides "
        "it on Linux too (a requirement whose marker holds there, e.g. 'sys_platform != "
        '"darwin"\')'
    ]


@pytest.mark.parametrize(
    ("requirements", "task"),
    [
        # the Linux counterpart is declared
        (
            ['tensorflow-macos; sys_platform == "darwin"', 'tensorflow; sys_platform != "darwin"'],
            "import tensorflow\n",
        ),
        # a Mac-only plugin the code never imports
        (["tensorflow", 'tensorflow-metal; sys_platform == "darwin"'], "import tensorflow\n"),
        # an import the code is ready to miss
        (
            ['tensorflow-macos; sys_platform == "darwin"'],
            "try:\n    import tensorflow\nexcept ImportError:\n    tensorflow = None\n",
        ),
    ],
    ids=["linux-counterpart", "unimported-plugin", "optional-import"],
)
def test_what_the_vm_gets_another_way_or_never_imports_is_not_warned_of(
    tmp_path, requirements, task
):
    assert _warnings(tmp_path, requirements, task) == []


def test_prepare_package_warns_of_it(tmp_path, capfd):
    # On this machine's Python (3.11) the marker holds; on the image's 3.10 it does not.
    project = write_project(tmp_path / "tiny")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            'dependencies = ["numpy>=1.20"]',
            'dependencies = ["numpy>=1.20", "pyyaml; python_version >= \'3.11\'"]',
        )
    )
    (project / "tinytrainer" / "task.py").write_text("import yaml\n")
    prepare_package(str(project), str(tmp_path / "stage"))
    err = capfd.readouterr().err
    assert (
        "kfp-spot: warning: requirement 'pyyaml; python_version >= \"3.11\"' is installed on "
        "this machine but not on Vertex AI's training VMs (Linux x86_64, Python 3.10, "
        "sklearn-cpu.1-6)"
    ) in err
    assert "tinytrainer/task.py, line 1 imports yaml" in err


def _unread(tmp_path, listed, declared, job="", evaluation=""):
    project = tmp_path / "project"
    project.mkdir(parents=True)
    (project / "requirements.txt").write_text(listed)
    job_imports = {m: f"src/trainer/task.py, line {i}" for i, m in enumerate(job.split(), 1)}
    eval_imports = {
        m: f"src/trainer/metrics.py, line {i}" for i, m in enumerate(evaluation.split(), 1)
    }
    provides = {"yaml": ["PyYAML"], "sklearn": ["scikit-learn"], "lightgbm": ["lightgbm"]}
    return unread_requirements(
        project, declared, IMAGE, job_imports, eval_imports, provides=provides
    )


def test_a_requirements_txt_the_package_does_not_declare_is_named_with_the_imports(tmp_path):
    listed = (
        "# the laptop's environment\n-r base.txt\nlightgbm==4.3  # boosting\nPyYAML>=6\npytest\n"
    )
    assert _unread(tmp_path, listed, ["pyyaml>=6"], job="json lightgbm yaml pytest_x") == [
        "requirements.txt beside the project lists what the package does not declare: "
        "'lightgbm==4.3' (src/trainer/task.py, line 2 imports it). pip on Vertex AI's training "
        "VMs and in the evaluation's image installs the package's declared dependencies, never "
        "that file, so those imports fail there: declare them in pyproject.toml's [project] "
        'dependencies (or set [project] dynamic = ["dependencies"] and read the file with '
        "[tool.setuptools.dynamic] dependencies = {file = "
        '["requirements.txt"]})'
    ]


def test_a_library_the_image_holds_counts_for_the_job_not_for_the_evaluation(tmp_path):
    # sklearn-cpu.1-6 holds scikit-learn; kfp-spot's runtime image, where evaluate() runs, not.
    assert _unread(tmp_path, "scikit-learn\n", [], job="sklearn") == []
    found = _unread(tmp_path / "e", "scikit-learn\n", [], evaluation="sklearn")
    assert "'scikit-learn' (src/trainer/metrics.py, line 1 imports it)" in found[0]


def test_prepare_package_warns_of_an_unread_requirements_txt(tmp_path, capfd):
    project = write_project(tmp_path / "tiny")
    (project / "requirements.txt").write_text("numpy>=1.20\npyyaml\n")
    (project / "tinytrainer" / "task.py").write_text("import yaml\n")
    prepare_package(str(project), str(tmp_path / "stage"))
    assert (
        "kfp-spot: warning: requirements.txt beside the project lists what the package does not "
        "declare: 'pyyaml' (tinytrainer/task.py, line 1 imports it)"
    ) in capfd.readouterr().err


def test_a_requirement_on_a_file_of_this_machine_is_refused_before_staging(tmp_path):
    # pip installs it here; on the VM there is no such file.
    lib = tmp_path / "mylib"
    project = write_project(tmp_path / "tiny")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            'dependencies = ["numpy>=1.20"]',
            f'dependencies = ["numpy>=1.20", "mylib @ {lib.as_uri()}"]',
        )
    )
    with pytest.raises(PackagingError) as info:
        prepare_package(str(project), str(tmp_path / "stage"))
    assert str(info.value) == (
        f"source: the package declares 'mylib @ {lib.as_uri()}', a file of this machine: pip "
        "installs it here and in the local emulator, but on Vertex AI's training VMs and in the "
        "evaluation's image there is no such file. Build it into an archive, pass that in "
        "extra_package_uris (it is staged with the package) and declare 'mylib' by name"
    )
    assert not (tmp_path / "stage").exists()
    assert local_reference(["mylib @ https://example.com/mylib-1.0.tar.gz", "numpy"]) is None


def test_requirements_alike_on_the_vm_never_read_what_this_machine_has_installed(
    tmp_path, monkeypatch
):
    """Which distribution provides a module is read from this machine's installed metadata
    (every distribution's files: ~0.3 s of a prepare-package task), only for a requirement
    whose marker differs on the VM; requirements that install there alike never need it."""
    import importlib.metadata

    def unread(*_):
        raise AssertionError("read this machine's installed distributions")

    monkeypatch.setattr(importlib.metadata, "packages_distributions", unread)
    imported = imported_modules(_trainer(tmp_path, "import numpy\n"), "trainer.task")
    alike = ["numpy>=1.26", 'pandas; python_version >= "3.8"', 'pywin32; sys_platform == "win32"']
    assert skipped_on_vertex(alike, IMAGE, imported, here=MAC) == []
    (tmp_path / "requirements.txt").write_text("numpy\n")
    assert unread_requirements(tmp_path, ["numpy"], IMAGE, imported, {}) == []


def test_the_trainer_wheel_declared_by_name_is_refused_before_staging(tmp_path):
    # PyPI serves no kfp-spot-trainer, and declaring it made prepare_package leave its own
    # wheel out: the job failed at its install on the VM (a setup.py's too, known only now).
    project = write_project(tmp_path / "tiny")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            'dependencies = ["numpy>=1.20"]', 'dependencies = ["numpy>=1.20", "kfp-spot-trainer"]'
        )
    )
    with pytest.raises(PackagingError, match=r"^source: the package declares 'kfp-spot-trainer'"):
        prepare_package(str(project), str(tmp_path / "stage"))
    assert not (tmp_path / "stage").exists()
