"""A job module that `python -m` on the training VM would not run, or that would run nothing.

Vertex AI runs `python -m <python_module>` after pip installs the package into site-packages:
a module named like a standard one is Python's own there, and a module that only defines its
console script's `main()` defines it and exits 0. Both jobs "succeed" without training.
"""

import textwrap

import pytest

from kfp_spot.evaluation import EvaluationInputError
from kfp_spot.evaluation.entry_point import check_entry_point
from kfp_spot.packaging import PackagingError
from tests.prepare import prepare_package

TRAIN = """\
import argparse
import logging

log = logging.getLogger(__name__)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    log.info("training %d steps", parser.parse_args().steps)
"""


@pytest.mark.parametrize("name", ["random", "test"])
def test_a_script_named_like_a_standard_module_is_refused(tmp_path, name):
    script = tmp_path / f"{name}.py"
    script.write_text(TRAIN + '\n\nif __name__ == "__main__":\n    main()\n')
    with pytest.raises(PackagingError) as info:
        prepare_package(str(script), str(tmp_path / "stage"))
    assert info.value.field == "python_module"
    message = str(info.value)
    assert f"Vertex AI `import {name}` finds Python's own {name}" in message
    assert f"'trainer.{name}' places it at trainer/{name}.py" in message
    assert not (tmp_path / "stage").exists()


def test_the_same_script_placed_in_a_package_is_accepted(tmp_path):
    script = tmp_path / "random.py"
    script.write_text(TRAIN + '\n\nif __name__ == "__main__":\n    main()\n')
    info = prepare_package(str(script), str(tmp_path / "stage"), python_module="trainer.random")
    assert info.python_module == "trainer.random"


def _console_script_project(root, cli: str):
    package = root / "src" / "digitfit"
    package.mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        textwrap.dedent(
            """\
            [build-system]
            requires = ["setuptools>=77"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "digitfit"
            version = "0.3.0"

            [project.scripts]
            digitfit-train = "digitfit.cli:main"

            [tool.kfp-spot]
            python-module = "digitfit.cli"
            """
        )
    )
    (package / "__init__.py").write_text("")
    (package / "cli.py").write_text(cli)
    return root


# Modules that end by calling their function (or by working through another's): each test of
# test_a_module_that_calls_its_function_is_accepted names one as the job's module.
ENDINGS = [
    '\n\nif __name__ == "__main__":\n    main()\n',
    "\n\nmain()\n",
    "\n\nresult = main()\n",
    # work through another module's function or an attribute: no own name is called
    "\n\nsteps = argparse.ArgumentParser().parse_known_args()\n",
    "\n\nresult = main.__call__()\n",
]


@pytest.fixture(scope="module")
def calls_project(tmp_path_factory):
    """The console-script project whose digitfit.cli never calls main(), and beside it a module
    ``digitfit.calls_<i>`` (its own console script) per ending of :data:`ENDINGS`. One source for
    the tests that use it (a module fixture keeps them on one worker): the run's build cache
    builds it once, and each test checks its own module.
    """
    project = _console_script_project(tmp_path_factory.mktemp("calls") / "proj", TRAIN)
    scripts = "".join(f'digitfit-train-{i} = "digitfit.calls_{i}:main"\n' for i in range(5))
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace("\n\n[tool.kfp-spot]", f"\n{scripts}\n[tool.kfp-spot]")
    )
    for i, ending in enumerate(ENDINGS):
        (project / "src" / "digitfit" / f"calls_{i}.py").write_text(TRAIN + ending)
    return project


def test_a_console_script_module_that_never_calls_main_is_refused(tmp_path, calls_project):
    with pytest.raises(PackagingError) as info:
        prepare_package(str(calls_project), str(tmp_path / "stage"))
    assert info.value.field == "python_module"
    message = str(info.value)
    assert "only defines main() and never calls it" in message
    assert "would train nothing and succeed" in message
    assert "the console script digitfit-train calls digitfit.cli:main" in message
    assert 'end it with `if __name__ == "__main__": main()`' in message
    assert not (tmp_path / "stage").exists()


@pytest.mark.parametrize("ending", ENDINGS)
def test_a_module_that_calls_its_function_is_accepted(tmp_path, calls_project, ending):
    module = f"digitfit.calls_{ENDINGS.index(ending)}"
    info = prepare_package(str(calls_project), str(tmp_path / "stage"), python_module=module)
    assert info.python_module == module


def test_an_evaluation_entry_point_in_a_standard_module_is_refused(tmp_path):
    with pytest.raises(EvaluationInputError, match=r"Python's own random") as info:
        check_entry_point("random:evaluate")
    assert info.value.field == "entry_point"
    project = _console_script_project(tmp_path / "proj", TRAIN + "\n\nmain()\n")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text() + 'evaluation-entry-point = "test.scoring:evaluate"\n'
    )
    with pytest.raises(PackagingError, match=r"Python's own test") as refused:
        prepare_package(str(project), str(tmp_path / "stage"))
    assert refused.value.field == "source"
    assert "the evaluation would fail after the training" in str(refused.value)


def test_a_helper_module_named_like_a_standard_module_is_refused(tmp_path):
    # train.py's `import tokenize` gets Python's own tokenize on the VM, not the project's.
    project = _console_script_project(tmp_path / "proj", TRAIN + "\n\nmain()\n")
    (project / "src" / "tokenize.py").write_text("def words(text):\n    return text.split()\n")
    pyproject = project / "pyproject.toml"
    setuptools = (
        '[tool.setuptools]\npackage-dir = {"" = "src"}\npackages = ["digitfit"]\n'
        'py-modules = ["tokenize"]\n\n'
    )
    pyproject.write_text(
        pyproject.read_text().replace("[tool.kfp-spot]", setuptools + "[tool.kfp-spot]")
    )
    with pytest.raises(PackagingError) as info:
        prepare_package(str(project), str(tmp_path / "stage"))
    assert info.value.field == "source"
    message = str(info.value)
    assert "digitfit 0.3.0 installs tokenize.py at its top level" in message
    assert "`import tokenize` finds Python's own tokenize" in message


def test_a_package_with_no_job_module_named_points_at_its_console_script(tmp_path):
    # No *.task module and no [tool.kfp-spot] python-module: the console script says which.
    project = _console_script_project(tmp_path / "proj", TRAIN + "\n\nmain()\n")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('python-module = "digitfit.cli"\n', ""))
    with pytest.raises(PackagingError) as info:
        prepare_package(str(project), str(tmp_path / "stage"))
    assert info.value.field == "python_module"
    assert (
        'its console script digitfit-train calls digitfit.cli:main: python-module = "digitfit.cli"'
        in str(info.value)
    )


def test_a_declared_entry_point_in_a_job_module_that_trains_at_import_is_refused(tmp_path):
    project = _console_script_project(tmp_path / "proj", TRAIN + "\n\nmain()\n\n")
    cli = project / "src" / "digitfit" / "cli.py"
    cli.write_text(cli.read_text() + "def evaluate(checkpoint_dir, params):\n    return {}\n")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text() + 'evaluation-entry-point = "digitfit.cli:evaluate"\n'
    )
    with pytest.raises(PackagingError) as info:
        prepare_package(str(project), str(tmp_path / "stage"))
    assert info.value.field == "source"
    assert "'digitfit.cli' is the job's module (digitfit/cli.py), whose top level runs the job" in (
        str(info.value)
    )
    assert "the evaluation imports it and would run the training again" in str(info.value)


def test_a_package_that_carries_a_data_set_is_warned_of(tmp_path, capsys, monkeypatch):
    # A 150 MB data file beside the code was packaged without a word: each VM of the job
    # downloads and installs it at every start, after each preemption too.
    from kfp_spot.packaging import core

    assert core.LARGE_PACKAGE_BYTES == 64 * 2**20
    # The rule at a smaller size: building and zipping 65 MiB twice cost the suite 20 s.
    monkeypatch.setattr(core, "LARGE_PACKAGE_BYTES", 4 * 2**20)
    package = tmp_path / "mlp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(TRAIN + '\n\nif __name__ == "__main__":\n    main()\n')
    with (package / "train.bin").open("wb") as handle:
        handle.truncate(5 * 2**20)  # zeros: large installed, small compressed
    prepare_package(str(package), str(tmp_path / "stage"), python_module="mlp.task")
    err = capsys.readouterr().err
    assert "kfp-spot: warning: mlp 0.0.0+src" in err
    assert "installs 5 MiB, the largest file mlp/train.bin (5 MiB): every VM" in err
    assert "(0 MiB)" not in err  # the code beside it is not what makes it large
    with (package / "labels.bin").open("wb") as handle:
        handle.truncate(2 * 2**20)
    prepare_package(str(package), str(tmp_path / "stage2"), python_module="mlp.task")
    err = capsys.readouterr().err
    assert "the largest files mlp/train.bin (5 MiB), mlp/labels.bin (2 MiB): every VM" in err
    assert "keep data sets in Cloud Storage" in err
