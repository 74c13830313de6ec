"""The import check of prepare_package: the job's module (and the evaluation's) is imported where
it will run, before anything is staged; each failure names the module and what it lacks.
"""

import importlib.util

import pytest

from kfp_spot.packaging import ImportCheckError
from tests.packaging.tiny import write_project
from tests.prepare import prepare_package


@pytest.fixture
def staging(tmp_path):
    path = tmp_path / "stage"
    yield path
    assert not path.exists() or not any(path.rglob("*.tar.gz")), "a bad package was staged"


def _job(train: str) -> str:
    """A job that parses its arguments before it loads its training module ``train`` (so a usage
    error is quick): on the VM that module is imported all the same, and so is what it imports.
    """
    return (
        "def main():\n"
        "    try:\n"
        "        from tinytrainer import accel\n"
        "    except ImportError:\n"
        "        accel = None\n"
        f"    from tinytrainer import {train}\n"
        f"    {train}.run(accel)\n"
        "\n"
        "if __name__ == '__main__':\n"
        "    main()\n"
    )


# One package holds a module per import-check case (each test checks its own module): its
# content is the same in every test, so the run's build cache builds it once for them all.
_IMPORT_CASES = {
    "broken.py": "import tinytrainer.missing_helper\n",
    "needs_sklearn.py": "import sklearn\n",
    "needs_tomllib.py": "import tomllib\n",
    "job.py": _job("train"),
    "accel.py": "import a_module_no_image_holds\n",
    "train.py": "import sklearn\n\ndef run(accel):\n    pass\n",
    # the same job, its training module's imports declared or held by the image
    "job_ok.py": _job("train_ok"),
    "train_ok.py": "import json\n\ndef run(accel):\n    pass\n",
}
PYTORCH_IMAGE = "us-docker.pkg.dev/vertex-ai/training/pytorch-xla.2-3.py310:latest"


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """The tiny project with the modules of :data:`_IMPORT_CASES`. One source for the tests that
    use it (a module fixture keeps them on one worker): the run's build cache builds it once.
    """
    project = write_project(tmp_path_factory.mktemp("import-cases") / "tiny")
    for name, text in _IMPORT_CASES.items():
        (project / "tinytrainer" / name).write_text(text)
    return project


def _check_case(cases, staging, module, **kwargs):
    """prepare_package with the import check of ``tinytrainer.<module>`` in the shared package."""
    return prepare_package(
        str(cases),
        str(staging),
        python_module=f"tinytrainer.{module}",
        check_import=True,
        **kwargs,
    )


def test_import_check_catches_a_broken_import(cases, staging):
    with pytest.raises(ImportCheckError, match=r"(?s)tinytrainer.broken does not import.*missing"):
        _check_case(cases, staging, "broken")


def test_import_check_catches_an_undeclared_dependency(cases, staging):
    # scikit-learn is installed on this machine, but the package does not declare it and the
    # PyTorch image does not hold it (the scikit-learn image would).
    with pytest.raises(
        ImportCheckError,
        match=r"(?s)environment of pytorch-xla.2-3.py310.*No module named 'sklearn'"
        r".*must be declared .* or be one of pytorch-xla.2-3.py310's libraries",
    ):
        _check_case(cases, staging, "needs_sklearn", executor_image_uri=PYTORCH_IMAGE)


def test_import_check_follows_a_module_the_job_imports_inside_a_function(cases, staging, tmp_path):
    with pytest.raises(
        ImportCheckError,
        match=r"(?s)No module named 'sklearn'.*importing tinytrainer.train, which tinytrainer.job "
        r"imports",
    ):
        _check_case(cases, staging, "job", executor_image_uri=PYTORCH_IMAGE)
    # Declared-or-held imports pass; the one under try/except ImportError is left to the job.
    good = tmp_path / "good"  # not the fixture's staging, which must stay free of packages
    info = _check_case(cases, good, "job_ok", executor_image_uri=PYTORCH_IMAGE)
    assert info.import_checked


def _declare_evaluation(project):
    with (project / "pyproject.toml").open("a") as pyproject:
        pyproject.write(
            '\n[tool.kfp-spot]\nevaluation-entry-point = "tinytrainer.evaluate:evaluate"\n'
        )


def test_import_check_imports_the_evaluation_where_evaluate_checkpoint_runs_it(project, staging):
    # The training's image (sklearn-cpu.1-6) holds scikit-learn, kfp-spot's runtime image, where
    # evaluate_checkpoint imports the evaluation after the whole training, does not: undeclared,
    # it would fail only then, on Vertex AI as locally.
    if importlib.util.find_spec("sklearn") is None:  # found, not imported: that takes a second
        pytest.skip("scikit-learn is not installed here")
    _declare_evaluation(project)
    evaluate = project / "tinytrainer" / "evaluate.py"
    evaluate.write_text("import sklearn\n" + evaluate.read_text())
    with pytest.raises(ImportCheckError) as info:
        prepare_package(str(project), str(staging), check_import=True)
    assert info.value.field == "evaluation_entry_point"
    message = str(info.value)
    assert message.startswith(
        "evaluation_entry_point: tinytrainer.evaluate does not import in kfp-spot's runtime image"
    )
    assert "No module named 'sklearn'" in message
    assert "Declare what it imports in the package's dependencies." in message


def test_import_check_follows_what_the_evaluation_imports_inside_its_function(project, staging):
    # evaluate() loads its scoring module only when called, after the whole training: that
    # module's undeclared import would fail only then.
    _declare_evaluation(project)
    (project / "tinytrainer" / "evaluate.py").write_text(
        "def evaluate(checkpoint_dir, params):\n"
        "    from tinytrainer import scoring\n"
        "    return scoring.score(checkpoint_dir)\n"
    )
    (project / "tinytrainer" / "scoring.py").write_text(
        "import a_module_no_image_holds\n\ndef score(path):\n    return {}\n"
    )
    with pytest.raises(ImportCheckError) as info:
        prepare_package(str(project), str(staging), check_import=True)
    assert info.value.field == "evaluation_entry_point"
    message = str(info.value)
    assert message.startswith(
        "evaluation_entry_point: tinytrainer.evaluate does not import in kfp-spot's runtime image"
    )
    assert "No module named 'a_module_no_image_holds'" in message
    assert "(importing tinytrainer.scoring, which tinytrainer.evaluate imports)" in message


def test_import_check_passes_an_evaluation_whose_imports_are_declared(project, tmp_path):
    _declare_evaluation(project)  # it imports numpy, which the tiny project declares
    info = prepare_package(str(project), str(tmp_path / "stage"), check_import=True)
    assert info.import_checked
    assert info.evaluation_entry_point == "tinytrainer.evaluate:evaluate"


def test_import_check_does_not_see_what_only_this_machine_has(project, staging):
    # kfp is installed here (kfp-spot needs it) but no training image holds it: on Vertex AI the
    # job would fail with this error, so the check fails too.
    (project / "tinytrainer" / "task.py").write_text("import kfp_spot.trainer\nimport kfp\n")
    with pytest.raises(ImportCheckError, match=r"(?s)sklearn-cpu.1-6.*No module named 'kfp'"):
        prepare_package(str(project), str(staging), check_import=True)


def test_import_check_reads_the_module_with_the_images_python(cases, staging):
    # It imports on this machine's Python (3.11+); the image's 3.10 has no tomllib.
    with pytest.raises(
        ImportCheckError,
        match=r"(?s)python_module: tinytrainer.needs_tomllib needs a newer Python than 3.10, the "
        r"Python of .*sklearn-cpu.1-6.*tinytrainer/needs_tomllib.py, line 1: imports tomllib",
    ):
        _check_case(cases, staging, "needs_tomllib")
