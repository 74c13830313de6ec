"""Your own trainer through the front door: `kfp-spot run --source`, `--param` and the Python API.

The package is not the example (tests/own_package.py): its own module names, declared in its
pyproject.toml, and an evaluate() that returns ``mse``, no ``accuracy``.
"""

# No "from __future__ import annotations": KFP reads the pipeline's annotations as types.

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
from click.testing import CliRunner
from kfp import dsl

from kfp_spot.cli import main as cli_main
from kfp_spot.packaging import trainer_dist
from kfp_spot.pipelines import catalog, local, local_run
from kfp_spot.pipelines.spot_training import spot_training
from tests.own_package import write_regressor
from tests.shared import COMMITTED_COMPONENTS

KFP_SPOT = Path(sys.executable).with_name("kfp-spot")
ROOT = Path(__file__).resolve().parents[1]
COMPONENTS = COMMITTED_COMPONENTS  # the committed YAMLs, as a user loads them
MSE_GATE = {"mse": "<=0.01"}


@pytest.fixture(scope="module")
def regressor(tmp_path_factory):
    return write_regressor(tmp_path_factory.mktemp("own"))


# --- what the front door reads, before anything runs ----------------------------------------


def test_the_package_names_its_own_module_and_evaluation_entry_point(regressor):
    assert local_run.package_arguments(regressor) == {
        "python_module": "regressor.train",
        "evaluation_entry_point": "regressor.metrics:evaluate",
    }  # and none of the example's training arguments or accuracy gate
    example = local_run.package_arguments(local_run.EXAMPLE_SOURCE)
    assert example["thresholds"] == {"accuracy": ">=0.85"}


def test_your_package_is_gated_only_on_the_thresholds_you_give(regressor):
    # the pipeline's default gate is the example's `accuracy`, which this package never returns
    assert local_run.spot_training_arguments(regressor)["thresholds"] == {}
    given = local_run.spot_training_arguments(regressor, parameters={"thresholds": MSE_GATE})
    assert given["thresholds"] == MSE_GATE
    example = local_run.spot_training_arguments(local_run.EXAMPLE_SOURCE)
    assert example["thresholds"] == {"accuracy": ">=0.85"}


def test_a_malformed_entry_point_in_the_pyproject_is_refused_naming_it(regressor, tmp_path):
    source = _regressor_with(regressor, tmp_path / "typo", "metrics:evaluate", "metrics.evaluate")
    pyproject = source / "pyproject.toml"
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=source, progress=None)
    assert str(info.value) == (
        f"{pyproject}: [tool.kfp-spot] evaluation-entry-point: 'regressor.metrics.evaluate' "
        "is not module:function (e.g. trainer.evaluate:evaluate)"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            '[tool.kfp-spot]\nevaluation_entry_point = "regressor.metrics:evaluate"\n',
            "[tool.kfp-spot] has no key 'evaluation_entry_point' (its keys: python-module, "
            "evaluation-entry-point); did you mean 'evaluation-entry-point'?",
        ),
        (
            '[tool.kfp_spot]\npython-module = "regressor.train"\n',
            "[tool.kfp_spot] is not read; the table is [tool.kfp-spot] (keys: python-module, "
            "evaluation-entry-point)",
        ),
    ],
)
def test_a_misspelt_tool_table_or_key_is_refused_not_ignored(tmp_path, table, message):
    # ignored, the run would fall back to the example's evaluate() and fail after training
    source = tmp_path / "pkg"
    source.mkdir()
    pyproject = source / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\nversion = "1"\n\n' + table)
    with pytest.raises(local.LocalRunError) as info:
        local_run.package_arguments(source)
    assert str(info.value) == f"{pyproject}: {message}"


@pytest.mark.parametrize("kind", ["zip", "gztar"])
def test_an_archived_package_names_its_own_module_and_evaluation_entry_point(
    regressor, tmp_path, kind
):
    # as prepare_package reads it: the archive's one top folder holds the pyproject.toml
    archive = shutil.make_archive(
        str(tmp_path / "regressor-0.3.0"), kind, regressor.parent, regressor.name
    )
    assert local_run.package_arguments(archive) == {
        "python_module": "regressor.train",
        "evaluation_entry_point": "regressor.metrics:evaluate",
    }


def test_a_package_left_on_the_examples_evaluation_entry_point_is_refused_before_it_runs(
    tmp_path,
):
    # no [tool.kfp-spot], no --param: trainer.evaluate:evaluate, which this package lacks
    source = tmp_path / "mine"
    (source / "mine").mkdir(parents=True)
    (source / "mine" / "__init__.py").write_text("")
    (source / "mine" / "task.py").write_text("print('training')\n")
    (source / "pyproject.toml").write_text('[project]\nname = "mine"\nversion = "1"\n')
    result = CliRunner().invoke(
        cli_main, ["run", "--source", str(source), "--run-dir", str(tmp_path / "run")]
    )
    assert result.exit_code == 2
    assert (
        "evaluation_entry_point: not set, and the pipeline's default trainer.evaluate:evaluate "
        f"(the bundled example's) is not in {source}: set evaluation-entry-point"
    ) in " ".join(result.output.split())
    assert not (tmp_path / "run").exists()
    # the same package holding that module (src/ layout), or naming its own: nothing to refuse
    (source / "src" / "trainer").mkdir(parents=True)
    (source / "src" / "trainer" / "evaluate.py").write_text("def evaluate(d, p): return {}\n")
    assert local_run.check_evaluation_module(source, {}, spot_training) is None
    named = {"evaluation_entry_point": "mine.metrics:score"}
    assert local_run.check_evaluation_module(tmp_path / "x.py", named, spot_training) is None


def test_a_bare_package_is_its_own_package_for_the_evaluation_entry_point(tmp_path):
    # A bare package directory is built as the package named after it: trainer/evaluate.py is
    # trainer.evaluate, the default entry point (refused as missing before), and a typo of one
    # of its modules is refused before the run, as for a project (it failed after training).
    source = tmp_path / "trainer"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "task.py").write_text("print('training')\n")
    (source / "evaluate.py").write_text("def evaluate(d, p):\n    return {}\n")
    assert local_run.check_evaluation_module(source, {}, spot_training) is None
    typo = {"evaluation_entry_point": "trainer.evalaute:evaluate"}
    with pytest.raises(local.LocalRunError) as info:
        local_run.check_evaluation_module(source, typo, spot_training)
    assert str(info.value) == (
        f"evaluation_entry_point: trainer.evalaute:evaluate: module 'trainer.evalaute' is not in "
        f"{source}, which holds its package 'trainer'; name a module of the package "
        "(MODULE:FUNCTION)"
    )
    (source / "evaluate.py").unlink()  # the default's module is gone: refused, as before
    with pytest.raises(local.LocalRunError, match="is not in"):
        local_run.check_evaluation_module(source, {}, spot_training)


def test_a_source_without_a_pyproject_is_not_told_to_name_its_entry_point_there(tmp_path):
    # A script or a bare package has no pyproject.toml: the message named a file the user does
    # not have; it names the pipeline parameter to set, with the module the source becomes.
    script = tmp_path / "boost.py"
    script.write_text("def evaluate(d, p):\n    return {}\n")
    with pytest.raises(local.LocalRunError) as info:
        local_run.check_evaluation_module(script, {}, spot_training)
    assert str(info.value).endswith(
        f"is not in {script}: set the pipeline parameter evaluation_entry_point to boost:FUNCTION"
    )
    package = tmp_path / "digitsclf"
    package.mkdir()
    (package / "__init__.py").write_text("")
    with pytest.raises(local.LocalRunError) as info:
        local_run.check_evaluation_module(package, {}, spot_training)
    assert str(info.value).endswith(
        f"is not in {package}: set the pipeline parameter evaluation_entry_point to "
        "digitsclf.MODULE:FUNCTION"
    )


def test_a_requirements_txt_beside_a_script_or_bare_package_is_named_as_unread(tmp_path):
    # A script or a bare package gets its dependencies from `requirements` only: a
    # requirements.txt beside it went unread without a word, and the evaluation failed after
    # the whole training for want of what it lists. The run's note gives the value to pass.
    from kfp_spot.packaging.sources import requirements_file_note

    package = tmp_path / "digitsclf"
    package.mkdir()
    (package / "__init__.py").write_text("")
    assert requirements_file_note(package, []) is None
    listed = tmp_path / "requirements.txt"
    listed.write_text("# mine\nscikit-learn>=1.3  # the model\n\n-r more.txt\nnumpy\n")
    assert requirements_file_note(package, []) == (
        f"{listed} is not read: a script or a bare package declares its dependencies with the "
        """requirements parameter: set the pipeline parameter requirements to """
        """["scikit-learn>=1.3", "numpy"]"""
    )
    (tmp_path / "task.py").write_text("")
    assert requirements_file_note(tmp_path / "task.py", []) is not None
    assert requirements_file_note(package, ["numpy"]) is None  # given: nothing to say
    (package / "pyproject.toml").write_text("")  # a project declares its own
    assert requirements_file_note(package, []) is None


def test_a_bare_package_without_its_module_is_refused_before_the_run(tmp_path):
    # prepare_package needs python_module for a bare package without __main__.py; the run found
    # that out only once its prepare-package task ran, after the entry point's own check passed.
    source = tmp_path / "digitsclf"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "task.py").write_text("print('training')\n")
    with pytest.raises(local.LocalRunError) as info:
        local_run.spot_training_arguments(source)
    assert str(info.value) == (
        f"python_module: required for the bare package directory {source}: the module the job "
        "runs, e.g. digitsclf.task (set the pipeline parameter python_module)"
    )
    given = {"python_module": "digitsclf.task"}
    assert local_run.spot_training_arguments(source, parameters=given)["python_module"] == (
        "digitsclf.task"
    )
    (source / "__main__.py").write_text("")  # python -m digitsclf: nothing more to name
    assert "python_module" not in local_run.spot_training_arguments(source)


def test_every_problem_of_a_bare_package_found_before_the_run_is_one_refusal(tmp_path, capfd):
    # A bare package without python_module and without the default evaluation module was
    # refused for its module, then, once that was given, for its entry point: one try each.
    from tests.cli_in_process import run_cli

    source = tmp_path / "digitsclf"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "task.py").write_text("print('training')\n")
    (source / "metrics.py").write_text("def evaluate(d, p):\n    return {}\n")
    module = (
        f"python_module: required for the bare package directory {source}: the module the job "
        "runs, e.g. digitsclf.task (set the pipeline parameter python_module)"
    )
    entry_point = (
        "evaluation_entry_point: not set, and the pipeline's default trainer.evaluate:evaluate "
        f"(the bundled example's) is not in {source}: set the pipeline "
        "parameter evaluation_entry_point to digitsclf.MODULE:FUNCTION"
    )
    inside = (
        f"run_dir: {source / 'runs'} is inside the training source {source}: the run's files "
        "would be packaged with it; give a directory outside the source or under its "
        "kfp-spot-runs/, which is never packaged (--run-dir)"
    )
    with pytest.raises(local.LocalRunError) as info:  # the Python API
        local_run.run_local(tmp_path / "run", source=source, progress=None)
    assert str(info.value).splitlines() == [
        "2 problems, found before the run started:",
        f"  {module}",
        f"  {entry_point}",
    ]
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(source / "runs", source=source, progress=None)
    assert str(info.value).splitlines() == [
        "3 problems, found before the run started:",
        f"  {module}",
        f"  {entry_point}",
        f"  {inside}",
    ]
    result = run_cli(["run", "--source", str(source), "--run-dir", str(tmp_path / "run")], capfd)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "kfp-spot: error: 2 problems, found before the run started:",
        f"  {module}",
        f"  {entry_point} (see `kfp-spot run --help`)",
    ]
    assert not (tmp_path / "run").exists() and not (source / "runs").exists()
    # one problem left is refused as before, alone
    given = {"python_module": "digitsclf.task"}
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=source, parameters=given, progress=None)
    assert str(info.value) == entry_point


def test_an_evaluation_importing_a_library_the_package_does_not_declare_is_refused_before_it_runs(
    tmp_path,
):
    # The evaluation runs in kfp-spot's runtime image, not the executor image that trained: a
    # script's evaluate() importing scikit-learn trained, then failed after the whole training.
    script = tmp_path / "digits.py"
    script.write_text(
        "import numpy as np\nfrom sklearn.linear_model import SGDClassifier\n"
        "def evaluate(d, p):\n    return {}\n"
        "if __name__ == '__main__':\n    print(SGDClassifier())\n"
    )
    entry = {"evaluation_entry_point": "digits:evaluate"}
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=script, parameters=entry, progress=None)
    assert str(info.value) == (
        "evaluation_entry_point: digits:evaluate imports sklearn (digits.py, line 2; installed "
        "here by scikit-learn), which kfp-spot's runtime image does not hold: "
        "evaluate-checkpoint runs it there after the training, with kfp-spot and its "
        "dependencies, the package and what the package declares, not the training's executor "
        """image's libraries; declare scikit-learn: set the pipeline parameter requirements to """
        """["scikit-learn"]"""
    )
    assert not (tmp_path / "run").exists()
    declared = {**entry, "requirements": ["scikit-learn"]}
    assert (
        local_run.check_evaluation_imports(script, {"source": "", **declared}, spot_training)
        is None
    )
    # what importing the module for the evaluation does not run is not judged: the training's
    # own function and the `python -m` block
    script.write_text(
        "def train():\n    import sklearn\n"
        "def evaluate(d, p):\n    return {}\n"
        "if __name__ == '__main__':\n    from sklearn import svm\n    train()\n"
    )
    assert (
        local_run.check_evaluation_imports(script, {"source": "", **entry}, spot_training) is None
    )
    script.write_text("def evaluate(d, p):\n    import sklearn\n    return {}\n")
    with pytest.raises(local.LocalRunError, match=r"imports sklearn \(digits.py, line 2"):
        local_run.check_evaluation_imports(script, {"source": "", **entry}, spot_training)
    # a project: named in its pyproject.toml; what the code is ready to miss is not judged, nor
    # its own modules, nor anything once it declares what this machine lacks (pip fetches it)
    project = tmp_path / "proj"
    (project / "src" / "proj").mkdir(parents=True)
    (project / "src" / "proj" / "__init__.py").write_text("")
    (project / "src" / "proj" / "helpers.py").write_text("import sklearn.metrics\n")
    (project / "src" / "proj" / "score.py").write_text(
        "try:\n    import matplotlib\nexcept ImportError:\n    matplotlib = None\n"
        "def evaluate(d, p):\n    from proj import helpers\n    return {}\n"
    )
    (project / "pyproject.toml").write_text(
        '[project]\nname = "proj"\nversion = "1"\ndependencies = ["numpy"]\n'
        '[tool.kfp-spot]\nevaluation-entry-point = "proj.score:evaluate"\n'
    )
    arguments = {"source": str(project), **local_run.package_arguments(project)}
    with pytest.raises(local.LocalRunError) as info:
        local_run.check_evaluation_imports(project, arguments, spot_training)
    assert str(info.value).startswith(
        "evaluation_entry_point: proj.score:evaluate imports sklearn (proj/helpers.py, line 1; "
    )
    assert str(info.value).endswith(
        f"declare scikit-learn: add it to [project] dependencies in {project / 'pyproject.toml'}"
    )
    (project / "pyproject.toml").write_text(
        (project / "pyproject.toml").read_text().replace('"numpy"', '"numpy", "not-here-lib>=1"')
    )
    assert local_run.check_evaluation_imports(project, arguments, spot_training) is None


@pytest.mark.parametrize("kind", ["zip", "gztar"])
def test_an_archived_bare_package_is_checked_before_the_run_as_its_folder_is(tmp_path, kind):
    # A zip of a bare package was looked into only by prepare-package once the run had started
    # (naming its extraction folder under /tmp), and a missing evaluation module only by the
    # evaluation, after the whole training.
    folder = tmp_path / "src" / "digitsclf"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "task.py").write_text("print('training')\n")
    archive = Path(shutil.make_archive(str(tmp_path / "digitsclf"), kind, tmp_path / "src"))
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=archive, progress=None)
    assert str(info.value).splitlines() == [
        "2 problems, found before the run started:",
        f"  python_module: required for the bare package directory {archive}'s digitsclf/: the "
        "module the job runs, e.g. digitsclf.task (set the pipeline parameter python_module)",
        "  evaluation_entry_point: not set, and the pipeline's default trainer.evaluate:evaluate "
        f"(the bundled example's) is not in {archive}'s digitsclf/: set the pipeline "
        "parameter evaluation_entry_point to digitsclf.MODULE:FUNCTION",
    ]
    assert not (tmp_path / "run").exists()


def test_a_job_module_the_source_does_not_hold_is_refused_before_the_run(tmp_path, regressor):
    # prepare-package refused a misspelt module only once the run had started, after the build.
    bare = tmp_path / "digitsclf"
    bare.mkdir()
    (bare / "__init__.py").write_text("")
    (bare / "task.py").write_text("print('training')\n")
    (bare / "metrics.py").write_text("def evaluate(d, p):\n    return {}\n")
    entry = {"evaluation_entry_point": "digitsclf.metrics:evaluate"}
    for module, message in [
        (
            "digitsclf.taks",
            f"python_module: 'digitsclf.taks' is not in {bare}, which holds its package "
            "'digitsclf' (its modules: digitsclf, digitsclf.metrics, digitsclf.task); name the "
            "module the job runs",
        ),
        (
            "trainer.task",
            f"python_module: 'trainer.task' is not inside the package 'digitsclf' that {bare} "
            "holds (a bare package is the package its directory names): e.g. digitsclf.task",
        ),
    ]:
        with pytest.raises(local.LocalRunError) as info:
            local_run.run_local(
                tmp_path / "run",
                source=bare,
                parameters={**entry, "python_module": module},
                progress=None,
            )
        assert str(info.value) == message
    assert not (tmp_path / "run").exists()
    # a project's own package too; a module of a package it does not hold is not judged
    arguments = {"source": str(regressor), "python_module": "regressor.trian"}
    assert "'regressor.trian' is not in" in local_run.job_module_problem(regressor, arguments)
    for fine in ("regressor.train", "othertool.cli"):
        arguments["python_module"] = fine
        assert local_run.job_module_problem(regressor, arguments) is None


def test_the_runs_own_refusals_come_with_the_sources_problems(tmp_path):
    # A bad drill or gate was refused only once the source's problems were fixed: one more try.
    source = tmp_path / "digitsclf"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "task.py").write_text("print('training')\n")
    (source / "metrics.py").write_text("def evaluate(d, p):\n    return {}\n")
    given = {"evaluation_entry_point": "digitsclf.metrics:evaluate"}
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(
            tmp_path / "run",
            source=source,
            parameters=given,
            thresholds={"mse": "<=0.1x"},
            preemptions=7,
            progress=None,
        )
    lines = str(info.value).splitlines()
    assert lines[0] == "3 problems, found before the run started:"
    assert lines[1].startswith("  python_module: required for the bare package directory")
    assert lines[2] == "  preemptions: must be a whole number from 0 to 6, got 7"
    assert lines[3].startswith("  thresholds['mse']: '<=0.1x' is not a bound"), lines
    assert not (tmp_path / "run").exists()


def test_a_job_module_the_executor_images_python_cannot_run_is_refused_before_the_run(tmp_path):
    # It was refused once submitted (the emulator), after the package was built; on Vertex AI it
    # fails at its import on the VM. Now with the source's other problems, before anything starts.
    source = tmp_path / "digitsclf"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "task.py").write_text("import tomllib\nprint('training')\n")
    given = {"python_module": "digitsclf.task"}
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=source, parameters=given, progress=None)
    lines = str(info.value).splitlines()
    assert lines[:4] == [
        "2 problems, found before the run started:",
        "  python_module: digitsclf.task needs a newer Python than 3.10, the Python of "
        "sklearn-cpu.1-6: on Vertex AI it would fail to import (this machine runs it with Python "
        f"{sys.version_info.major}.{sys.version_info.minor}):",
        "      digitsclf/task.py, line 1: imports tomllib, which Python 3.10 does not have (new "
        "in 3.11)",
        "    Write it for Python 3.10, or run it on an image with a newer Python.",
    ]
    assert lines[4].startswith("  evaluation_entry_point: not set") and len(lines) == 5
    assert not (tmp_path / "run").exists()
    # a script is its own module; an image with a newer Python runs it
    script = tmp_path / "fit.py"
    script.write_text("from datetime import UTC\ndef evaluate(d, p):\n    return {}\n")
    entry = {"evaluation_entry_point": "fit:evaluate"}
    with pytest.raises(local.LocalRunError, match=r"^python_module: fit needs a newer Python"):
        local_run.run_local(tmp_path / "run", source=script, parameters=entry, progress=None)
    newer = {"executor_image_uri": "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-7.py311"}
    assert local_run.job_python_problem(script, {"source": "", **newer}, spot_training) is None


def test_a_gate_on_a_metric_the_evaluation_never_returns_is_refused_before_the_run(tmp_path):
    # `thresholds={"accuracy": ...}` on a regressor's evaluate(), which returns mse and r2: the
    # evaluation failed after the whole training ("not among what ... returned").
    source = tmp_path / "reg"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "task.py").write_text("print('training')\n")
    (source / "metrics.py").write_text(
        "def evaluate(d, p):\n"
        "    if not d:\n"
        "        return {'mse': 0.0, 'r2': 1.0, 'confusion_matrix': None}\n"
        "    def helper():\n"
        "        return 'not a dict'\n"  # an inner function's return is not evaluate()'s
        "    return {'mse': 1.0, 'r2': 0.0}\n"
    )
    given = {"python_module": "reg.task", "evaluation_entry_point": "reg.metrics:evaluate"}
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(
            tmp_path / "run",
            source=source,
            parameters=given,
            thresholds={"accuracy": ">=0.9", "mse": "<=0.5"},
            progress=None,
        )
    assert str(info.value) == (
        "thresholds: 'accuracy' is not among the metrics reg.metrics:evaluate returns (mse, r2, "
        "read from its return statements): the evaluation would fail after the training; gate "
        "on one of them"
    )
    assert not (tmp_path / "run").exists()
    arguments = {"source": str(source), **given, "thresholds": {"r2": ">=0.5"}}
    assert local_run.check_threshold_metrics(source, arguments, spot_training) is None
    arguments["thresholds"] = {"accuracy": ">=0.9"}
    # a decorated or rebound function may return more than its own returns show
    own = "def evaluate(d, p):\n    return {'mse': 1.0}\n"
    for wrapped in (f"@wrap\n{own}", f"{own}evaluate = wrap(evaluate)\n"):
        (source / "metrics.py").write_text(f"def wrap(f):\n    return f\n{wrapped}")
        assert local_run.check_threshold_metrics(source, arguments, spot_training) is None
    # a return the code computes: its metrics are known only when it runs
    (source / "metrics.py").write_text(
        "def evaluate(d, p):\n    out = {'mse': 1.0}\n    return out\n"
    )
    assert local_run.check_threshold_metrics(source, arguments, spot_training) is None


def test_a_bare_package_named_no_package_name_is_refused_before_the_run(tmp_path):
    # It was refused by prepare-package once the run had started, after the module check had
    # suggested `--param python_module=my-trainer.task`, itself refused as no module name.
    source = tmp_path / "my-trainer"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "task.py").write_text("print('training')\n")
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=source, progress=None)
    assert str(info.value) == (
        f"source: {source} is a bare package directory (an __init__.py, no project file), which "
        "is installed as the package its directory names, but 'my-trainer' is not a Python "
        "package name (letters, digits and '_', not starting with a digit; no keyword): rename "
        "the directory, e.g. to my_trainer"
    )
    assert not (tmp_path / "run").exists()


def test_an_entry_point_named_by_its_src_path_is_refused_before_the_run(regressor, tmp_path):
    # src.regressor.metrics passed the check (src/regressor/metrics.py is there) and failed the
    # evaluation after the whole training: "No module named 'src'".
    source = tmp_path / "src-layout"
    shutil.copytree(regressor, source)
    (source / "src").mkdir()
    (source / "regressor").rename(source / "src" / "regressor")
    given = {"evaluation_entry_point": "src.regressor.metrics:evaluate"}
    with pytest.raises(local.LocalRunError) as info:
        local_run.check_evaluation_module(source, given, spot_training)
    assert str(info.value) == (
        "evaluation_entry_point: src.regressor.metrics:evaluate: src/ is the source layout's "
        "folder, not a package (the build installs what is inside it): name the module "
        "regressor.metrics:evaluate"
    )
    ours = {"evaluation_entry_point": "regressor.metrics:evaluate"}
    assert local_run.check_evaluation_module(source, ours, spot_training) is None


def test_params_are_parsed_per_the_declared_type_of_the_compiled_spec():
    parsed = local.parse_arguments(
        spot_training,
        {
            "thresholds": '{"mse": "<=0.5"}',
            "training_args": '["--steps", "3"]',
            "max_resubmissions": "4",
            "check_import": "true",
            "fallback_to_previous": "false",
            "machine_type": "e2-standard-4",
            "staging_uri": "123",  # a String stays text, even when it reads as JSON
        },
    )
    assert parsed == {
        "thresholds": {"mse": "<=0.5"},
        "training_args": ["--steps", "3"],
        "max_resubmissions": 4,
        "check_import": True,
        "fallback_to_previous": False,
        "machine_type": "e2-standard-4",
        "staging_uri": "123",
    }


def test_a_python_module_in_the_pyproject_that_is_no_module_name_is_refused(regressor, tmp_path):
    source = _regressor_with(
        regressor, tmp_path / "path", '"regressor.train"', '"regressor/train.py"'
    )
    pyproject = source / "pyproject.toml"
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=source, progress=None)
    assert str(info.value) == (
        f"{pyproject}: [tool.kfp-spot] python-module: 'regressor/train.py' is not a dotted "
        "module name like trainer.task"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ({"max_resubmissions": "two"}, "parameter max_resubmissions is of type Integer; 'two'"),
        ({"thresholds": '["mse"]'}, "parameter thresholds is of type Dict; "),
        (  # as the shell leaves thresholds={"mse": "<=0.1"} written without single quotes
            {"thresholds": "{mse: <=0.1}"},
            "parameter thresholds is of type Dict; '{mse: <=0.1}' is not one (Expecting property "
            "name enclosed in double quotes: line 1 column 2 (char 1); write a JSON object such "
            """as '{"mse": "<=0.01"}', quoted as a whole for the shell)""",
        ),
        (
            {"training_args": "--steps 40"},
            "parameter training_args is of type List; '--steps 40' is not one (Expecting value: "
            """line 1 column 1 (char 0); write a JSON list such as '["--steps", "40"]', quoted""",
        ),
        ({"check_import": "yes"}, "parameter check_import is of type Boolean; 'yes'"),
        (  # json.loads keeps the last: the gate would hold ">=0.1" alone, silently
            {"thresholds": '{"rmse": "<=0.5", "rmse": ">=0.1"}'},
            """parameter thresholds is of type Dict; '{"rmse": "<=0.5", "rmse": ">=0.1"}' """
            """is not one (key 'rmse' is given twice ("<=0.5" and ">=0.1"); a JSON object holds """
            "each key once: give it once)",
        ),
        (
            {"evaluation_params": '{"split": {"a": 1, "a": 2}}'},
            """parameter evaluation_params is of type Dict; '{"split": {"a": 1, "a": 2}}' is not """
            "one (key 'a' is given twice (1 and 2)",
        ),
        ({"treshold": "{}"}, "the pipeline has no parameter 'treshold'; valid: "),
        # the gate is read after training: a bound that is no bound must not cost the run
        ({"thresholds": '{"mse": "<="}'}, "thresholds['mse']: '<=' is not a bound; use "),
        ({"thresholds": '{"mse": ">= 0.9x"}'}, "thresholds['mse']: '>= 0.9x' is not a bound"),
        ({"thresholds": '{"mse": -1e400}'}, "parameter thresholds: -inf is not a finite number"),
        ({"evaluation_params": '{"alpha": NaN}'}, "parameter evaluation_params: nan is not a"),
        (  # a protobuf Value's number is a double: Vertex AI would run with ...992
            {"max_resubmissions": "9007199254740993"},
            "parameter max_resubmissions: 9007199254740993 is an integer a double cannot hold: ",
        ),
        (
            {"evaluation_params": '{"seed": 12345678901234567891}'},
            "parameter evaluation_params: item ['seed'] (12345678901234567891) is an integer a "
            "double cannot hold: a run on Vertex AI Pipelines is given its parameters as protobuf "
            "Values, whose numbers are doubles, and would get 12345678901234567168",
        ),
        (  # KFP cannot send a null: it would stop the run with a traceback once it started
            {"training_args": '["--steps", null]'},
            "parameter training_args: item [1] is null, which a pipeline parameter cannot hold; "
            "a parameter holds text, numbers, true/false, lists and objects (JSON without null)",
        ),
        (
            {"evaluation_params": '{"split": {"test": null}}'},
            "parameter evaluation_params: item ['split']['test'] is null, which a pipeline ",
        ),
        (
            {"evaluation_entry_point": "regressor.metrics.evaluate"},
            "parameter evaluation_entry_point: 'regressor.metrics.evaluate' is not module:function",
        ),
        (  # prepare_package refused it only once the emulator ran and the run dir was used
            {"python_module": "regressor/train.py"},
            "parameter python_module: 'regressor/train.py' is not a dotted module name like "
            "trainer.task",
        ),
    ],
)
def test_a_bad_param_is_one_error_naming_it(texts, message):
    with pytest.raises(local.LocalRunError) as info:
        local.parse_arguments(spot_training, texts)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_an_integer_a_double_holds_exactly_is_a_valid_param_however_large():
    # Only an integer the double would change is refused; 2**60 reaches the task as is.
    assert local.parse_arguments(spot_training, {"max_resubmissions": str(2**60)}) == {
        "max_resubmissions": 2**60
    }


def test_bad_params_are_one_refusal_naming_each_and_the_module_a_path_meant():
    # A python_module and an entry point written as paths were refused one after the other,
    # with no word of the module meant.
    texts = {
        "python_module": "regressor/train.py",
        "evaluation_entry_point": "regressor/metrics.py:evaluate",
    }
    with pytest.raises(local.LocalRunError) as info:
        local.parse_arguments(spot_training, texts)
    assert str(info.value).splitlines() == [
        "2 problems, found before the run started:",
        "  parameter python_module: 'regressor/train.py' is not a dotted module name like "
        "trainer.task; did you mean 'regressor.train'?",
        "  parameter evaluation_entry_point: 'regressor/metrics.py:evaluate' is not "
        "module:function (e.g. trainer.evaluate:evaluate); did you mean "
        "'regressor.metrics:evaluate'?",
    ]


def test_unknown_names_and_bad_types_are_one_refusal_with_the_values_problems():
    # An unknown --param name was refused alone, before the types and values of the others
    # were looked at: a user fixed one, ran again and met the next.
    texts = {"epochz": "3", "replica_count": "ten", "python_module": "regressor/train.py"}
    with pytest.raises(local.LocalRunError) as info:
        local.parse_arguments(spot_training, texts)
    lines = str(info.value).splitlines()
    assert lines[0] == "3 problems, found before the run started:"
    assert lines[1].startswith("  the pipeline has no parameter 'epochz'; valid: ")
    assert lines[2].startswith("  parameter replica_count is of type Integer; 'ten' is not one")
    assert lines[3].startswith("  parameter python_module: 'regressor/train.py' is not a dotted")


@pytest.mark.parametrize(
    ("text", "written"),
    [  # a list written as the shell would take it: shown as the JSON it means
        (
            "us-central1,europe-west4",
            """write it as a JSON list: '["us-central1", "europe-west4"]'""",
        ),
        ("us-central1", """write it as a JSON list: '["us-central1"]'"""),
        # two arguments in one item, an empty item: the general example, not a wrong guess
        ("--steps 40", """write a JSON list such as '["--steps", "40"]'"""),
        ("a,,b", """write a JSON list such as '["--steps", "40"]'"""),
    ],
)
def test_a_list_written_with_commas_is_shown_as_the_json_it_means(text, written):
    # --param regions=us-central1,europe-west4 was answered with an unrelated example.
    with pytest.raises(local.LocalRunError) as info:
        local.parse_arguments(spot_training, {"regions": text})
    assert written + ", quoted as a whole for the shell" in str(info.value)


def test_every_bad_bound_of_the_gate_is_a_problem_of_its_own():
    texts = {"thresholds": '{"accuracy": "=>0.9", "mse": 0.1}'}
    with pytest.raises(local.LocalRunError) as info:
        local.parse_arguments(spot_training, texts)
    assert str(info.value).splitlines() == [
        "2 problems, found before the run started:",
        "  thresholds['accuracy']: '=>0.9' is not a bound; use a number (meaning >=) or a string "
        'like ">=0.9", "<=0.5", ">0", "==1"',
        "  thresholds['mse']: 0.1 has no operator, and a bound without one means >=, but a "
        'smaller mse is better: write "<=0.1" (or ">=0.1" if at least that is meant)',
    ]


def test_a_bad_param_comes_with_the_sources_problems_on_the_command_line(
    tmp_path, regressor, capfd
):
    # The command line refused a bad --param value before it looked at the source at all.
    from tests.cli_in_process import run_cli

    args = ["run", "--source", str(regressor), "--run-dir", str(tmp_path / "run")]
    args += ["--param", 'requirements=["pyyaml"]', "--param", 'thresholds={"mse": "<=1x"}']
    result = run_cli(args, capfd)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0] == "kfp-spot: error: 2 problems, found before the run started:", lines
    assert lines[1] == (
        f"  requirements: {regressor} is a project with its own dependencies; declare them in "
        "its pyproject.toml/setup.py instead"
    )
    assert lines[2].startswith("  thresholds['mse']: '<=1x' is not a bound") and len(lines) == 3
    assert not (tmp_path / "run").exists()


def test_a_bad_gate_stops_the_run_before_anything_starts(tmp_path, regressor):
    result = CliRunner().invoke(
        cli_main,
        [
            *("run", "--source", str(regressor), "--run-dir", str(tmp_path / "run")),
            *("--param", 'thresholds={"mse": "<=0.0.1"}'),
        ],
    )
    assert result.exit_code == 2
    assert "thresholds['mse']: '<=0.0.1' is not a bound; use a number" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists()  # no emulator, no package, no training


@pytest.mark.parametrize(
    ("param", "message"),
    [
        (
            "replica_count=0",
            "task 'launch-spot-job': launch_spot_job input 'replica_count': must be >= 1",
        ),
        (  # the emulator runs only the machine types it knows: it would refuse the job's create
            "machine_type=n1-standrd-4",
            "task 'launch-spot-job': launch_spot_job input 'machine_type': 'n1-standrd-4' is not "
            "a known machine type; valid types include n1-standard-4",
        ),
        (
            "fallback_after=-1",
            "task 'launch-spot-job': launch_spot_job input 'fallback_after'",
        ),
        (
            'region_buckets={"us-central1": "not a bucket"}',
            "task 'launch-spot-job': launch_spot_job input 'region_buckets'",
        ),
    ],
)
def test_a_launch_input_the_launcher_would_refuse_stops_the_run_before_anything_starts(
    tmp_path, regressor, param, message
):
    # found before packaging and training, not once the run reached the launch task
    result = CliRunner().invoke(
        cli_main,
        [
            *("run", "--source", str(regressor), "--run-dir", str(tmp_path / "run")),
            *("--param", param),
        ],
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output and "warning" not in result.output
    assert not (tmp_path / "run").exists()  # no emulator, no package, no training


def _regressor_with(regressor: Path, source: Path, old: str, new: str) -> Path:
    """The regressor copied to ``source``, ``old`` replaced by ``new`` in its pyproject.toml."""
    shutil.copytree(regressor, source)
    pyproject = source / "pyproject.toml"
    text = pyproject.read_text()
    assert old in text, f"{old!r} is not in the regressor's pyproject.toml"
    pyproject.write_text(text.replace(old, new))
    return source


def _refused_before_the_run(pipeline, tmp_path, **arguments) -> str:
    """The one-line refusal of a local run of ``pipeline``, which created nothing."""
    arguments = {"source": str(tmp_path), **arguments}
    with pytest.raises(local.LocalRunError) as info:
        local.run(pipeline, arguments, run_dir=tmp_path / "run", progress=None)
    assert not (tmp_path / "run").exists()  # no emulator, no package, no training
    return str(info.value)


def test_a_launch_input_baked_into_your_own_pipeline_is_checked_before_the_run(tmp_path):
    @dsl.pipeline
    def mine(source: str, api_endpoint: str = "", base_output_directory: str = ""):
        package = COMPONENTS["prepare_package"](source=source)
        COMPONENTS["launch_spot_job"](
            project="local-project",
            location="us-central1",
            package=package.outputs["package"],
            replica_count=1,
            timeout="-5s",
            base_output_directory=base_output_directory,
            api_endpoint=api_endpoint,
        )

    refusal = _refused_before_the_run(mine, tmp_path)
    assert refusal.startswith("task 'launch-spot-job': launch_spot_job input 'timeout'")


@pytest.mark.parametrize(
    ("deploy", "message"),
    [
        (  # the emulator serves only the machine types it knows
            {"machine_type": "n1-standrd-4"},
            "input 'machine_type': 'n1-standrd-4' is not a known machine type",
        ),
        (  # each replica is a process on this machine: the emulator starts at most 16
            {"min_replica_count": 17},
            "input 'min_replica_count': is 17; it must be 1..16 on the local emulator",
        ),
        ({"traffic_split": {"0": 50}}, "input 'traffic_split': {'0': 50} adds up to 50, not 100"),
    ],
)
def test_a_deploy_input_baked_into_your_own_pipeline_is_checked_before_the_run(
    tmp_path, deploy, message
):
    @dsl.pipeline
    def mine(source: str, api_endpoint: str = "", base_output_directory: str = ""):
        package = COMPONENTS["prepare_package"](source=source)
        launch = COMPONENTS["launch_spot_job"](
            project="local-project",
            location="us-central1",
            package=package.outputs["package"],
            base_output_directory=base_output_directory,
            api_endpoint=api_endpoint,
        )
        COMPONENTS["deploy_spot_endpoint"](
            model=launch.outputs["model"], api_endpoint=api_endpoint, **deploy
        )

    refusal = _refused_before_the_run(mine, tmp_path)
    assert refusal.startswith(f"task 'deploy-spot-endpoint': deploy_spot_endpoint {message}"), (
        refusal
    )


def test_a_launch_not_given_the_runs_endpoint_is_refused_before_the_run(tmp_path):
    # the pipeline declares api_endpoint (the run sets it) but never passes it to the launch,
    # whose job would go to Vertex AI: it used to fail there, after packaging, on the project
    @dsl.pipeline
    def unwired(source: str, api_endpoint: str = "", base_output_directory: str = ""):
        package = COMPONENTS["prepare_package"](source=source)
        COMPONENTS["launch_spot_job"](
            package=package.outputs["package"], base_output_directory=base_output_directory
        )

    assert _refused_before_the_run(unwired, tmp_path) == (
        "task 'launch-spot-job': launch_spot_job input 'api_endpoint': is empty, so the task "
        "would call Vertex AI, where a local run sends nothing: pass it the pipeline's "
        "api_endpoint parameter (api_endpoint=api_endpoint), which the run sets to the local "
        "emulator's"
    )


def test_the_python_api_refuses_a_bad_gate_before_anything_starts(tmp_path, regressor):
    with pytest.raises(local.LocalRunError, match=r"thresholds\['mse'\]: 'mse<=1'"):
        local_run.run_local(tmp_path / "run", source=regressor, thresholds={"mse": "mse<=1"})
    assert not (tmp_path / "run").exists()


def test_the_python_api_refuses_a_value_kfp_cannot_send_before_anything_starts(tmp_path, regressor):
    # KFP would fail on the tuple with a traceback once the emulator ran and the run dir was used
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(
            tmp_path / "run",
            source=regressor,
            training_args=None,
            parameters={"training_args": ("--steps", "4")},
            progress=None,
        )
    assert str(info.value) == (
        "parameter training_args: the value is a tuple (('--steps', '4')), which a pipeline "
        "parameter cannot hold; a parameter holds text, numbers, true/false, lists and objects "
        "(JSON without null)"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (  # list() of it would have passed one argument per character: "-", "-", "s", ...
            {"training_args": "--steps 4"},
            "training_args: '--steps 4' is one text; give a list of arguments such as "
            "['--steps', '40']",
        ),
        (  # KFP's own type check, which it applies only once the emulator runs
            {"thresholds": ["mse"]},
            "parameter thresholds is of type Dict; ['mse'] (list) is not one",
        ),
        (
            {"parameters": {"max_resubmissions": 2.0}},
            "parameter max_resubmissions is of type Integer; 2.0 (float) is not one",
        ),
        (
            {"parameters": {"python_module": 5}},
            "parameter python_module is of type String; 5 (int) is not one",
        ),
    ],
)
def test_the_python_api_refuses_a_value_of_the_wrong_type_before_anything_starts(
    tmp_path, regressor, kwargs, message
):
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=regressor, progress=None, **kwargs)
    assert str(info.value) == message
    assert not (tmp_path / "run").exists()


def test_the_python_api_names_a_template_that_is_a_directory_or_a_source_that_is_no_path(
    tmp_path, regressor
):
    with pytest.raises(local.LocalRunError) as info:
        local.run(tmp_path, {}, run_dir=tmp_path / "run", progress=None)
    assert str(info.value) == (
        f"pipeline template {tmp_path} is a directory; give a compiled YAML file"
    )
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=5, progress=None)
    assert str(info.value) == "source: expected a path (str or pathlib.Path), got int"
    assert not (tmp_path / "run").exists()


def test_a_run_directory_holding_files_a_run_writes_is_refused_and_left_as_it_was(
    tmp_path, regressor
):
    # the run's report.md and logs/ would have replaced (or appended to) the user's own
    run_dir = tmp_path / "notes"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "report.md").write_text("my notes")
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(run_dir, source=regressor, progress=None)
    assert str(info.value) == (
        f"run_dir: {run_dir} holds logs, report.md, which a run writes (yours would be "
        "overwritten); a run starts in a new or empty directory: give another (--run-dir)"
    )
    assert sorted(p.name for p in run_dir.iterdir()) == ["logs", "report.md"]
    assert (run_dir / "report.md").read_text() == "my notes"


@pytest.mark.parametrize("inside", [".", "runs/1", "kfp-spot-runs"])
def test_a_run_directory_inside_the_source_is_refused(tmp_path, regressor, inside):
    source = tmp_path / "src"
    shutil.copytree(regressor, source)
    before = sorted(p.relative_to(source) for p in source.rglob("*"))
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(source / inside, source=source, progress=None)
    assert str(info.value) == (
        f"run_dir: {source / inside} is inside the training source {source}: the run's files "
        "would be packaged with it; give a directory outside the source or under its "
        "kfp-spot-runs/, which is never packaged (--run-dir)"
    )
    assert sorted(p.relative_to(source) for p in source.rglob("*")) == before


def test_an_entry_point_module_missing_from_the_packages_own_package_is_refused_before_it_runs(
    regressor, tmp_path
):
    # found only by the evaluation, after the whole training
    source = _regressor_with(
        regressor, tmp_path / "typo", "regressor.metrics:", "regressor.metricz:"
    )
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=source, progress=None)
    assert str(info.value) == (
        f"evaluation_entry_point: regressor.metricz:evaluate: module 'regressor.metricz' is not "
        f"in {source}, which holds its package 'regressor'; name a module of the package "
        "(MODULE:FUNCTION)"
    )
    with pytest.raises(local.LocalRunError, match=r"module 'regressor\.scores' is not in"):
        local_run.run_local(
            tmp_path / "run",
            source=regressor,
            parameters={"evaluation_entry_point": "regressor.scores:evaluate"},
            progress=None,
        )
    assert not (tmp_path / "run").exists()
    # a module of another distribution (a dependency) is the evaluation's to import
    pipeline = local.load(spot_training)
    for named in ("regressor.metrics:evaluate", "sklearn.metrics:evaluate"):
        local_run.check_evaluation_module(regressor, {"evaluation_entry_point": named}, pipeline)


def test_an_entry_point_function_its_module_does_not_define_is_refused_before_it_runs(
    regressor, tmp_path
):
    # found only by the evaluation, after the whole training
    source = _regressor_with(regressor, tmp_path / "typo", ":evaluate", ":evaluat")
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=source, progress=None)
    assert str(info.value) == (
        "evaluation_entry_point: regressor.metrics:evaluat: module 'regressor.metrics' "
        f"({source / 'regressor' / 'metrics.py'}) defines no 'evaluat' (its functions: "
        "evaluate); name one of them (MODULE:FUNCTION)"
    )
    assert not (tmp_path / "run").exists()
    pipeline = local.load(spot_training)
    with pytest.raises(
        local.LocalRunError, match=r"module 'regressor' \(.*\) defines no 'evaluate'"
    ):
        check = {"evaluation_entry_point": "regressor:evaluate"}  # an empty __init__.py
        local_run.check_evaluation_module(regressor, check, pipeline)
    # a module that may bind names at run time is the evaluation's to import
    (source / "regressor" / "dynamic.py").write_text("def __getattr__(name):\n    return len\n")
    dynamic = {"evaluation_entry_point": "regressor.dynamic:evaluate"}
    local_run.check_evaluation_module(source, dynamic, pipeline)


def test_an_evaluation_module_the_runtime_images_python_cannot_run_is_refused_before_training(
    tmp_path, monkeypatch
):
    # The evaluation runs in kfp-spot's runtime image. Its Python is this machine's here (3.11),
    # so stand in an older one to see what a newer machine (a Mac's 3.13, say) would pass.
    from kfp_spot.image import lock

    monkeypatch.setattr(lock, "IMAGE_PYTHON", "3.10")
    source = tmp_path / "mine"
    (source / "src" / "mine").mkdir(parents=True)
    (source / "src" / "mine" / "__init__.py").write_text("")
    (source / "src" / "mine" / "metrics.py").write_text(
        "import tomllib\n\n\ndef evaluate(checkpoint_dir, params):\n    return {}\n"
    )
    pipeline = local.load(spot_training)
    named = {"evaluation_entry_point": "mine.metrics:evaluate"}
    with pytest.raises(local.LocalRunError) as info:
        local_run.check_evaluation_module(source, named, pipeline)
    assert str(info.value).startswith(
        "evaluation_entry_point: mine.metrics needs a newer Python than 3.10, the Python of "
        "kfp-spot's runtime image, where evaluate-checkpoint runs: on Vertex AI it would fail"
    )
    assert "mine/metrics.py, line 1: imports tomllib" in str(info.value)
    monkeypatch.setattr(lock, "IMAGE_PYTHON", "3.11")
    assert local_run.check_evaluation_module(source, named, pipeline) is None


def test_a_pyproject_that_is_not_toml_is_named_once(regressor, tmp_path):
    source = _regressor_with(regressor, tmp_path / "broken", "[tool.kfp-spot]", "[tool.kfp-spot")
    pyproject = source / "pyproject.toml"
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=source, progress=None)
    assert str(info.value).startswith(
        f"{pyproject}: not valid TOML: Expected ']' at the end of a table declaration"
    )  # not "...pyproject.toml: source: pyproject.toml is not valid TOML"
    assert not (tmp_path / "run").exists()


def test_a_source_directory_that_is_no_package_is_named_as_such_before_anything_starts(tmp_path):
    # it was refused for its evaluation entry point, then by prepare_package once the run started
    source = tmp_path / "notes"
    source.mkdir()
    (source / "train.py").write_text("print(1)\n")
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=source, progress=None)
    assert str(info.value) == (
        f"source: {source} has no project file (pyproject.toml, setup.py, setup.cfg) and is not "
        "a Python package (no __init__.py): add a pyproject.toml, or pass the package directory "
        "or a single .py script"
    )
    assert not (tmp_path / "run").exists()


def test_a_run_directory_an_earlier_run_wrote_into_is_refused_and_left_as_it_was(
    tmp_path, regressor
):
    # its emulator would list the earlier jobs, its checkpoints make the training resume there
    run_dir = tmp_path / "run"
    (run_dir / "job" / "checkpoints").mkdir(parents=True)
    (run_dir / "run.json").write_text("{}")
    result = CliRunner().invoke(
        cli_main, ["run", "--source", str(regressor), "--run-dir", str(run_dir)]
    )
    assert result.exit_code == 2
    assert f"run_dir: {run_dir} already holds a run (its run.json, job/checkpoints)" in (
        result.output
    )
    assert "Traceback" not in result.output
    assert sorted(p.name for p in run_dir.iterdir()) == ["job", "run.json"]
    assert (run_dir / "run.json").read_text() == "{}"


def test_a_run_directory_that_cannot_be_made_is_one_line_naming_it(tmp_path, regressor):
    (tmp_path / "a-file").write_text("")
    run_dir = tmp_path / "a-file" / "run"
    result = CliRunner().invoke(
        cli_main, ["run", "--source", str(regressor), "--run-dir", str(run_dir)]
    )
    assert result.exit_code == 2
    assert f"run_dir: cannot create {run_dir} (Not a directory); give a writable" in result.output
    assert "Traceback" not in result.output


def test_a_local_run_takes_its_package_from_source_not_a_param(tmp_path, regressor):
    # --param source= would train the package with the example's arguments and gate
    result = CliRunner().invoke(
        cli_main, ["run", "--run-dir", str(tmp_path / "run"), "--param", f"source={regressor}"]
    )
    assert result.exit_code == 2
    assert "--param source=... is for --vertex; a local run takes the package with --source" in (
        " ".join(result.output.split())
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"preemptions": -1}, "preemptions: must be a whole number from 0 to 6, got -1"),
        ({"preemptions": 1.5}, "preemptions: must be a whole number from 0 to 6, got 1.5"),
        # as kfp-spot run --preemptions: the Python API is no more lenient than the CLI
        ({"preemptions": 9}, "preemptions: must be a whole number from 0 to 6, got 9"),
        ({"grace_period": float("nan")}, "grace_period: must be a number of seconds from 0.5 to"),
        ({"grace_period": -2}, "grace_period: must be a number of seconds from 0.5 to 120"),
        ({"grace_period": 600}, "grace_period: must be a number of seconds from 0.5 to 120"),
    ],
)
def test_a_drill_that_cannot_be_run_is_refused_before_anything_starts(
    tmp_path, regressor, options, message
):
    with pytest.raises(local.LocalRunError, match=re.escape(message)):
        local_run.run_local(tmp_path / "run", source=regressor, progress=None, **options)
    assert not (tmp_path / "run").exists()  # no emulator was started there


def test_the_default_run_directory_is_a_new_one_each_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = local.default_run_dir()
    first.mkdir(parents=True)
    second = local.default_run_dir()
    assert second != first and not second.exists()
    assert second.parent == first.parent == Path("kfp-spot-runs")


def test_runs_started_in_one_second_claim_distinct_default_directories(tmp_path, monkeypatch):
    # Both found kfp-spot-runs/<time> free: the second was refused for the first one's logs/
    # (a directory it was never given), or shared it. Each claims its own, made at once.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(local.time, "strftime", lambda form: "20260101-120000")
    first, second = local.claim_default_run_dir(), local.claim_default_run_dir()
    assert (first.name, second.name) == ("20260101-120000", "20260101-120000-2")
    assert first.is_dir() and second.is_dir() and not any(second.iterdir())
    # a run refused before it starts leaves no directory behind
    result = CliRunner().invoke(cli_main, ["run", "--param", "treshold={}"])
    assert result.exit_code == 2 and "no parameter 'treshold'" in result.output
    assert sorted(p.name for p in (tmp_path / "kfp-spot-runs").iterdir()) == [
        "20260101-120000",
        "20260101-120000-2",
    ]


def test_an_unknown_param_is_a_usage_error_listing_the_valid_names(tmp_path):
    result = CliRunner().invoke(
        cli_main, ["run", "--run-dir", str(tmp_path), "--param", "treshold={}"]
    )
    assert result.exit_code == 2
    assert "the pipeline has no parameter 'treshold'; valid: " in result.output
    assert "check_import" in result.output and "fallback_to_previous" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "run.json").exists()


def test_params_bound_for_vertex_are_checked_against_the_template_the_same_way():

    template = str(catalog.pipeline_path("spot_training"))
    args = ["submit", template, "--project", "local-project", "--param", "max_resubmissions=lots"]
    result = CliRunner().invoke(cli_main, args)
    assert result.exit_code == 2
    assert "parameter max_resubmissions is of type Integer; 'lots' is not one" in result.output


def test_vertex_options_on_a_local_run_are_refused_not_ignored(tmp_path):
    args = [
        "run",
        "--run-dir",
        str(tmp_path),
        "--project",
        "local-project",
        "--location",
        "europe-west4",
    ]
    result = CliRunner().invoke(cli_main, args)
    assert result.exit_code == 2
    assert "--project, --location only apply with --vertex" in result.output
    assert not (tmp_path / "run.json").exists()
    alone = CliRunner().invoke(cli_main, args[:5])
    assert alone.exit_code == 2
    assert "--project only applies with --vertex" in alone.output


def test_a_pipeline_that_launches_without_an_api_endpoint_parameter_is_refused(tmp_path):
    # its launch, in a sub-DAG, would send the job to Vertex AI: named, before anything starts
    @dsl.pipeline
    def no_endpoint(source: str, train: bool = True):
        package = COMPONENTS["prepare_package"](source=source)
        with dsl.If(train == True):  # noqa: E712 (a KFP condition, not a Python comparison)
            COMPONENTS["launch_spot_job"](package=package.outputs["package"])

    assert _refused_before_the_run(no_endpoint, tmp_path) == (
        "the pipeline has no 'api_endpoint' parameter, so its tasks that call Vertex AI "
        "(condition-1/launch-spot-job (launch_spot_job)) cannot be pointed at the local "
        'emulator: declare `api_endpoint: str = ""` and pass it to them '
        "(api_endpoint=api_endpoint)"
    )


def test_a_required_parameter_of_your_own_pipeline_left_unset_is_named_before_the_run(tmp_path):
    """A team's pipeline names its project its own way and gives it no default: without it the
    run stopped with a TypeError traceback from inside KFP, after the emulator had started."""
    from kfp import compiler

    @dsl.pipeline(name="team-training")
    def team(
        code_uri: str, gcp_project: str, gcp_region: str = "us-central1", api_endpoint: str = ""
    ):
        package = COMPONENTS["prepare_package"](source=code_uri)
        COMPONENTS["launch_spot_job"](
            project=gcp_project,
            location=gcp_region,
            package=package.outputs["package"],
            api_endpoint=api_endpoint,
        )

    template = tmp_path / "team.yaml"
    compiler.Compiler().compile(team, str(template))
    run_dir = tmp_path / "run"
    args = ["run", "--template", str(template), "--run-dir", str(run_dir)]
    result = CliRunner().invoke(cli_main, [*args, "--param", f"code_uri={tmp_path}"])
    assert result.exit_code == 2, result.output
    assert (
        "the pipeline needs 'gcp_project', which has no default: set the pipeline parameter "
        "gcp_project to VALUE"
    ) in result.output
    assert "Traceback" not in result.output
    assert not run_dir.exists()  # no emulator, no package, no training
    with pytest.raises(local.LocalRunError) as info:  # from Python, both named, no flag
        local.run(team, {}, run_dir=run_dir, progress=None)
    assert str(info.value) == (
        "the pipeline needs 'code_uri', 'gcp_project', which have no default: set the pipeline "
        "parameter code_uri to VALUE, and the others alike"
    )
    assert not run_dir.exists()


def test_a_sweep_given_one_output_directory_is_refused_before_the_run(tmp_path):
    """One base_output_directory given for the whole pipeline: passed to every launch of a
    dsl.ParallelFor, all but the first iteration failed after packaging and training started.
    Now the run refuses it before anything starts, naming the task and the input."""

    @dsl.pipeline
    def sweep(source: str, api_endpoint: str = "", base_output_directory: str = ""):
        package = COMPONENTS["prepare_package"](source=source)
        with dsl.ParallelFor([1, 2]) as seed:
            COMPONENTS["launch_spot_job"](
                package=package.outputs["package"],
                args=["--seed", seed],
                base_output_directory=base_output_directory,
                api_endpoint=api_endpoint,
            )

    refusal = _refused_before_the_run(sweep, tmp_path, base_output_directory="/tmp/one-for-all")
    assert refusal.startswith(
        "task 'for-loop-2/launch-spot-job': launch_spot_job input 'base_output_directory': "
    )
    assert "is the same in every iteration of the dsl.ParallelFor 'for-loop-2'" in refusal


def test_a_pipeline_that_calls_no_vertex_api_runs_without_an_api_endpoint_parameter(tmp_path):
    # nothing in it needs the emulator's endpoint (as the evaluate_checkpoint template)
    @dsl.pipeline
    def no_endpoint(source: str) -> list:
        return COMPONENTS["prepare_package"](source=source).outputs["package_uris"]

    result = local.run(
        no_endpoint,
        {"source": str(ROOT / "examples" / "trainer")},
        run_dir=tmp_path / "run",
        preemptions=0,
        progress=None,
    )
    assert result.succeeded and result.job_names == []


@dsl.component(base_image="python:3.11")
def _echo_code(code: str, api_endpoint: str) -> str:
    return code


@dsl.pipeline(name="team-template")
def _team_template(code: str, api_endpoint: str = "") -> str:
    """A team's own template: its training source is `code`, not spot_training's `source`."""
    return _echo_code(code=code, api_endpoint=api_endpoint).output


def test_kfp_spot_run_runs_a_template_of_your_own_with_its_own_parameter_names(tmp_path):
    from kfp import compiler

    template = tmp_path / "team.yaml"
    compiler.Compiler().compile(_team_template, str(template))
    run_dir = tmp_path / "run"
    args = ["run", "--template", str(template), "--param", "code=gs://b/src.tar.gz"]
    result = CliRunner().invoke(cli_main, [*args, "--run-dir", str(run_dir), "--preemptions", "0"])
    # Was refused: "the pipeline has no parameter 'source'" (the bundled example's, never given).
    assert "has no parameter" not in result.output
    assert "echo-code succeeded" in result.output and "pipeline succeeded" in result.output
    # It launches no job and ran through: it succeeded (the summary said PIPELINE_FAILED, exit 1).
    assert json.loads((run_dir / "run.json").read_text())["outcome"] == "SUCCEEDED"
    assert "PIPELINE_FAILED" not in result.output and result.exit_code == 0, result.output


@dsl.component(base_image="python:3.11")
def _gate_of(thresholds: dict) -> str:
    import json

    return json.dumps(thresholds)


@dsl.pipeline(name="team-gate")
def _team_gate(code: str = "gs://b/src.tar.gz", thresholds: dict = {"rmse": "<=0.2"}) -> str:  # noqa: B006
    """A team's own template with a gate of its own, and no `source`: it trains no source."""
    return _gate_of(thresholds=thresholds).output


def test_a_template_without_source_keeps_its_own_gate_not_the_bundled_examples(tmp_path):
    """Without --source the run is the bundled example's: its accuracy gate replaced the
    template's own `thresholds` default, though the template trains no source at all."""
    from kfp import compiler

    template = tmp_path / "team.yaml"
    compiler.Compiler().compile(_team_gate, str(template))
    run_dir = tmp_path / "run"
    args = ["run", "--template", str(template), "--run-dir", str(run_dir), "--preemptions", "0"]
    result = CliRunner().invoke(cli_main, args)
    assert result.exit_code == 0, result.output
    assert json.loads((run_dir / "run.json").read_text())["thresholds"] == {"rmse": "<=0.2"}
    assert "no quality gate" not in result.output


def test_a_source_the_template_cannot_take_is_named_with_the_valid_parameters(tmp_path):
    from kfp import compiler

    template = tmp_path / "team.yaml"
    compiler.Compiler().compile(_team_template, str(template))
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=tmp_path, template=template, progress=None)
    assert "has no 'source' parameter to take the training source" in str(info.value)
    assert "valid: api_endpoint, code" in str(info.value)
    assert not (tmp_path / "run" / "run.json").exists()


def test_a_pipeline_with_a_container_component_is_refused_in_one_line_before_it_runs(tmp_path):
    """GCPC's ops are container components, which kfp.local's SubprocessRunner cannot start: it
    raised a bare RuntimeError traceback when it reached one, after the tasks before it ran."""
    from google_cloud_pipeline_components.v1.custom_job import CustomTrainingJobOp

    @dsl.pipeline
    def with_gcpc(code: str, api_endpoint: str = "", project: str = "", location: str = ""):
        _echo_code(code=code, api_endpoint=api_endpoint)
        CustomTrainingJobOp(
            project=project,
            location=location,
            display_name="gcpc-job",
            worker_pool_specs=[{"machine_spec": {"machine_type": "n1-standard-4"}}],
        )

    with pytest.raises(local.LocalRunError) as info:
        local.run(with_gcpc, {"code": "x"}, run_dir=tmp_path / "run", progress=None)
    message = str(info.value)
    assert "\n" not in message
    assert "run in their own container: custom-training-job (gcr.io/" in message
    assert "`kfp-spot submit`" in message
    assert not (tmp_path / "run").exists()  # nothing started


# --- whole runs (slow) ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_preemptions(regressor, tmp_path_factory):
    """One `kfp-spot run` of the package through two preemptions, for the tests below.

    With a data file packaged beside the code: prepare-package warns on its stderr, which a
    local run keeps in the task's log among kfp.local's hundreds of lines: the console ends
    with it. Each whole run costs the suite ~20 s, so the summary's training_logs are checked
    on this one too, not a run of their own.
    """
    tmp_path = tmp_path_factory.mktemp("two-preemptions")
    source = tmp_path / "with-data"
    shutil.copytree(regressor, source)
    with (source / "pyproject.toml").open("a") as handle:
        handle.write('\n[tool.setuptools.package-data]\nregressor = ["*.bin"]\n')
    with (source / "regressor" / "table.bin").open("wb") as handle:
        handle.truncate(65 * 2**20)  # over the 64 MiB a package is warned of
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [
            str(KFP_SPOT),
            "run",
            "--source",
            str(source),
            "--param",
            f"thresholds={json.dumps(MSE_GATE)}",
            "--preemptions",
            "2",
            "--grace-period",
            "5",
            "--run-dir",
            str(run_dir),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    return run_dir, proc


@pytest.mark.slow
def test_kfp_spot_run_trains_your_package_with_your_gate_through_two_preemptions(
    two_preemptions,
):
    run_dir, proc = two_preemptions
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.startswith("outcome:            SUCCEEDED\n")
    assert re.search(r"^preemptions:        2\b", out, re.M), out
    resumed = re.search(r"^resumed from steps: (\d+), (\d+)$", out, re.M)
    assert resumed and all(int(step) > 0 for step in resumed.groups()), out
    assert re.search(r"^evaluation:         .*\bmse=[\d.e-]+", out, re.M), out
    assert "accuracy" not in out
    assert "quality gate:       passed (mse <=0.01)" in out
    record = json.loads((run_dir / "run.json").read_text())
    assert record["metrics"]["mse"] <= 0.01 and record["passed"] is True
    assert [r["endReason"] for r in record["ledger"]] == ["PREEMPTED", "PREEMPTED", "SUCCEEDED"]
    launch_log = (run_dir / "logs" / "launch-spot-job.log").read_text()
    assert "regressor.train" in launch_log
    large = "regressor 0.3.0 installs 65 MiB, the largest file regressor/table.bin (65 MiB)"
    warning = f"kfp-spot: warning: prepare-package: {large}"
    last = proc.stderr.splitlines()[-3:]  # after the pipeline's end, printed with the summary
    assert any(line.startswith(warning) for line in last), proc.stderr
    # and as prepare-package ends, before the training it is there to stop: once each
    lines = proc.stderr.splitlines()
    told = [i for i, line in enumerate(lines) if f"] prepare-package: warning: {large}" in line]
    launched = next(i for i, line in enumerate(lines) if "] launch-spot-job started" in line)
    assert len(told) == 1 and told[0] < launched, proc.stderr
    assert len([line for line in lines if large in line]) == 2, proc.stderr
    assert large in (run_dir / "logs" / "prepare-package.log").read_text()  # still in its log
    assert [w["tasks"] for w in record["warnings"] if w["text"].startswith(large)] == [
        ["prepare-package"]
    ]


@pytest.mark.slow
def test_a_run_that_fails_after_the_evaluation_still_shows_what_it_measured(regressor, tmp_path):
    # a trainer that saves no model (as the shortest trainer would): the promotion fails, but
    # the evaluation ran, ungated since no thresholds were given, and its figures are kept
    source = tmp_path / "no-model"
    shutil.copytree(regressor, source)
    train = source / "regressor" / "train.py"
    train.write_text(train.read_text().replace("if args.model_dir:", "if False:"))
    events: list[str] = []
    result = local_run.run_local(
        tmp_path / "run",
        source=source,
        training_args=["--steps", "4", "--step-seconds", "0"],
        preemptions=0,
        progress=events.append,
    )
    text = local.summarize(result)
    assert not result.succeeded
    assert any("promote-model FAILED" in e for e in events), events
    assert any("AIP_MODEL_DIR" in e for e in events), events
    assert result.metrics["mse"] >= 0 and result.metrics["checkpoint_step"] == 4, text
    assert re.search(r"^evaluation:         .*\bmse=[\d.e-]+", text, re.M), text
    assert result.passed is True and result.thresholds == {}
    assert "quality gate:       passed (no thresholds: every evaluation passes)\n" in text
    assert f"note: {local_run.NO_GATE}" in events, events
    assert json.loads((tmp_path / "run" / "run.json").read_text())["metrics"]["r2"] > 0


@pytest.mark.slow
def test_the_summary_names_where_the_training_printed(two_preemptions):
    # What the trainer prints goes to its replica's log in the emulator's state dir, not to
    # the tasks' logs under logs/: the summary named neither that folder nor the file.
    run_dir, proc = two_preemptions
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((run_dir / "run.json").read_text())
    folder = Path(record["artifacts"]["training_logs"])
    assert folder.parent.parent == run_dir / "emulator"
    assert folder.name == record["job_names"][-1].rsplit("/", 1)[-1]
    resumed = (folder / "attempt-2" / "workerpool0-0.log").read_text()
    assert "regressor resuming from step" in resumed  # the trainer's own print
    assert f"  training_logs   {folder}\n" in proc.stdout
    logs = (run_dir / "logs").glob("*.log")
    assert not any("regressor resuming from step" in log.read_text() for log in logs)
    # said before the training starts too, for a `tail -f` of a long one
    said = f"; the training's output: {folder.parent}/<job id>/attempt-<n>/"
    events = [line.removeprefix("kfp-spot: ") for line in proc.stderr.splitlines()]
    assert any(e.startswith("emulator listening on ") and e.endswith(said) for e in events)


FOREIGN_TRAINER = """\
import argparse, os
from kfp_spot.trainer import add_output_dir_arguments, resolve_output_dirs
parser = argparse.ArgumentParser()
add_output_dir_arguments(parser)
args = parser.parse_args()
resolve_output_dirs(parser, args)
os.makedirs(args.checkpoint_dir, exist_ok=True)
with open(os.path.join(args.checkpoint_dir, "weights.pkl"), "wb") as handle:
    handle.write(b"its own format")
os.makedirs(args.model_dir, exist_ok=True)
"""


@pytest.mark.slow
def test_a_drill_that_could_not_preempt_says_why(regressor, tmp_path):
    # the trainer keeps its own checkpoint files: the drill waits for a kfp-spot commit in vain
    source = tmp_path / "foreign"
    shutil.copytree(regressor, source)
    (source / "regressor" / "train.py").write_text(FOREIGN_TRAINER)
    events: list[str] = []
    result = local_run.run_local(
        tmp_path / "run",
        source=source,
        preemptions=2,
        parameters={"allow_foreign_layout": True},
        progress=events.append,
    )
    assert result.preemptions == 0 and len(result.ledger) == 1
    notes = [e for e in events if e.startswith("note: the job was preempted")]
    assert notes == [
        "note: the job was preempted 0 of the 2 time(s) asked: the drill preempts an attempt "
        "only after it commits a new kfp_spot.trainer checkpoint (step-<n>/manifest.json), and "
        "the training ended or failed before that; save more often or train longer to see a "
        "preemption"
    ], events


@pytest.fixture(scope="module")
def crashed_at_start(regressor, tmp_path_factory):
    """One run of a trainer that fails at its start, its exit handler chatting after the error
    (as a DataLoader's workers or an experiment tracker print), with a drill asked: the run's
    events, for the two tests below (each whole run costs the suite seconds)."""
    tmp_path = tmp_path_factory.mktemp("crashes")
    source = tmp_path / "crashes"
    shutil.copytree(regressor, source)
    train = source / "regressor" / "train.py"
    train.write_text(
        train.read_text().replace(
            "    x, y = dataset()\n",
            "    import atexit\n"
            "    chatter = '\\n'.join(f'tracker: syncing {i}' for i in range(40))\n"
            "    atexit.register(lambda: print(chatter))\n"
            "    raise FileNotFoundError('/data/train.csv')\n",
            1,
        )
    )
    events: list[str] = []
    result = local_run.run_local(
        tmp_path / "run", source=source, preemptions=1, progress=events.append
    )
    return result, events


@pytest.mark.slow
def test_a_drill_cut_short_by_a_failed_training_does_not_advise_training_longer(
    crashed_at_start,
):
    # Before: after the trainer's traceback, "save more often or train longer to see a
    # preemption", advice about the drill for a training that crashed at its start.
    result, events = crashed_at_start
    assert not result.succeeded
    assert "  | FileNotFoundError: /data/train.csv" in events, events
    notes = [e for e in events if e.startswith("note: the job was preempted")]
    assert notes == [
        "note: the job was preempted 0 of the 1 time(s) asked: the training failed (above) "
        "before a new checkpoint to preempt after"
    ], events


@pytest.mark.slow
def test_a_trainers_traceback_followed_by_many_lines_is_still_shown(crashed_at_start):
    # Before: the run showed the replica's last 20 lines, here an exit handler's chatter: the
    # cause was lost.
    result, events = crashed_at_start
    assert not result.succeeded
    assert "  | tracker: syncing 39" in events, events
    error = "  | FileNotFoundError: /data/train.csv"
    assert events.index("  | tracker: syncing 39") < events.index(error)
    assert "  |     raise FileNotFoundError('/data/train.csv')" in events, events


def _processes_naming(text: str) -> list[int]:
    """Processes whose command line holds ``text`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # ended while looked at
                continue
    return found


def _interrupt_run(
    args: list[str], run_dir: Path, stop: signal.Signals, ready: Callable[[list[str]], bool]
) -> list[str]:
    """Start `kfp-spot run ARGS` in a session of its own, send it ``stop`` once ``ready`` says
    so of its stderr's lines so far, and check it ends at once with exit status 1 and no process
    of the run left behind. Returns its stderr's lines."""
    proc = subprocess.Popen(
        [str(KFP_SPOT), "run", *args, "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # not this test's group: the signal below reaches only the run
        # As from a terminal: a suite started in the background (`cmd &` in a script) ignores
        # SIGINT, and an ignored disposition is inherited, so the run would never see it.
        preexec_fn=lambda: signal.signal(stop, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    seen: list[str] = []
    while not ready(seen):
        assert time.monotonic() < deadline and proc.poll() is None, seen
        with contextlib.suppress(queue.Empty):
            seen.append(lines.get(timeout=1))
    proc.send_signal(stop)
    try:
        assert proc.wait(timeout=120) == 1
    except subprocess.TimeoutExpired:  # say where it stood: the logs go with the tmp dir
        logs = run_dir / "logs"
        tails = {p.name: p.read_text()[-3000:] for p in sorted(logs.glob("*.log"))}
        while not lines.empty():
            seen.append(lines.get_nowait())
        pytest.fail(f"still running 120 s after {stop.name}; stderr: {seen[-20:]}; logs: {tails}")
    finally:  # its own session: the tasks too, also when the run itself has ended
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert _processes_naming(str(run_dir)) == []  # no task, no replica left behind
    reader.join(timeout=60)  # the rest of its output, up to its end
    while not lines.empty():
        seen.append(lines.get_nowait())
    assert any("interrupted; run.json records what ran" in x for x in seen), seen
    return seen


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
def test_an_interrupt_sent_to_kfp_spot_run_alone_stops_the_launch_and_cancels_its_job(
    regressor, tmp_path
):
    # kill PID, timeout, a supervisor, a CI runner (SIGTERM): the tasks are not in the
    # signal's process group. SIGINT and SIGHUP take the same way (the test below).
    run_dir = tmp_path / "run"
    args = ["--source", str(regressor), "--param", 'training_args=["--steps", "2000"]']

    def running(seen: list[str]) -> bool:
        return any("attempt 1 running" in x for x in seen)

    _interrupt_run([*args, "--preemptions", "0"], run_dir, signal.SIGTERM, running)
    launch_log = (run_dir / "logs" / "launch-spot-job.log").read_text()
    assert "launch interrupted by signal 15; the CustomJob was cancelled" in launch_log
    # What ran is recorded, and the report can be drawn from it afterwards.
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outcome"] == "CANCELLED" and len(record["job_names"]) == 1
    assert [row["endReason"] for row in record["ledger"]] == ["CANCELLED"]
    report = CliRunner().invoke(cli_main, ["report", str(run_dir)])
    assert report.exit_code == 0, report.output
    assert "CANCELLED" in (run_dir / "report.md").read_text()


# A user's own lightweight component, as KFP's `@dsl.component` builds it: the task is a shell that
# starts the component's Python as its child. A stop sent to the shell alone left that Python
# running and the run hung on its output; the stop reaches the task's whole process group.
@dsl.component(base_image="python:3.11-slim")
def _wait_to_be_stopped(seconds: int) -> str:
    import time

    print("waiting to be stopped", flush=True)
    time.sleep(seconds)
    return "never stopped"


@dsl.pipeline(name="waits")
def _waits(seconds: int = 600) -> str:
    """One task that runs until it is stopped: what a run interrupted in any task shows."""
    return _wait_to_be_stopped(seconds=seconds).output


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_sigint_and_sighup_sent_to_kfp_spot_run_alone_stop_it_as_sigterm_does(tmp_path, stop):
    # kill -INT PID, an IDE (SIGINT); a closed terminal (SIGHUP). Each reaches the same
    # interrupt as SIGTERM (the test above), which sends the running task SIGTERM whatever the
    # signal (the launch's log says "signal 15"): a run of one task that waits to be stopped
    # shows that, without a training's every task and replica (a whole run per signal).
    from kfp import compiler

    template = tmp_path / "waits.yaml"
    compiler.Compiler().compile(_waits, str(template))
    run_dir = tmp_path / "run"
    args = ["--template", str(template), "--preemptions", "0"]
    log = run_dir / "logs" / "wait-to-be-stopped.log"

    def waiting(seen: list[str]) -> bool:
        # the component's own code runs, not yet the shell that starts it: a stop sent then
        # would show the shell's end, not the task's
        return log.exists() and "waiting to be stopped" in log.read_text()

    _interrupt_run(args, run_dir, stop, waiting)
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outcome"] == "CANCELLED" and record["job_names"] == [], record
    assert "never stopped" not in log.read_text()


class RegressionOutputs(NamedTuple):
    passed: bool
    metrics: dsl.Metrics


@dsl.pipeline
def my_regression(
    code: str,
    gate: dict,
    api_endpoint: str = "",
    base_output_directory: str = "",
    steps: list = ["--steps", "30"],  # noqa: B006 (KFP reads the default)
) -> RegressionOutputs:
    """A user's own pipeline of kfp-spot's compiled components: its own names, no spot_training."""
    package = COMPONENTS["prepare_package"](source=code, check_import=True)
    launch = COMPONENTS["launch_spot_job"](
        package=package.outputs["package"],
        args=steps,
        base_output_directory=base_output_directory,
        api_endpoint=api_endpoint,
    )
    # No entry_point: the package's [tool.kfp-spot] one, through the package artifact (as on
    # Vertex AI, where nothing reads the pyproject before the pipeline runs).
    evaluation = COMPONENTS["evaluate_checkpoint"](
        checkpoint=launch.outputs["checkpoint"],
        package=package.outputs["package"],
        thresholds=gate,
        fallback_to_previous=True,
    )
    with dsl.If(evaluation.outputs["Output"] == True):  # noqa: E712
        COMPONENTS["promote_model"](
            model=launch.outputs["model"], metrics=evaluation.outputs["metrics"]
        )
    return RegressionOutputs(
        passed=evaluation.outputs["Output"], metrics=evaluation.outputs["metrics"]
    )


@pytest.mark.slow
def test_your_own_pipeline_runs_through_the_python_api_with_a_drill_and_a_report(
    regressor, tmp_path
):
    run_dir = tmp_path / "api-run"
    printed: list[str] = []
    result = local.run(
        my_regression,
        {"code": str(regressor), "gate": MSE_GATE},
        preemptions=1,
        grace_period=5.0,
        run_dir=run_dir,
        progress=printed.append,
    )
    assert result.succeeded, "\n".join(printed)
    assert result.preemptions == 1
    assert result.resumed_from_steps and min(result.resumed_from_steps) > 0
    assert result.checkpoint_uri == str(run_dir / "job" / "checkpoints")
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outcome"] == "SUCCEEDED" and record["job_names"] == result.job_names
    assert (run_dir / "report.md").is_file() and (run_dir / "report.png").is_file()
    assert result.passed is True and result.metrics["mse"] <= 0.01
    summary = local.summarize(result)
    assert "preemptions:        1" in summary
    assert "quality gate:       passed" in summary
    # `kfp-spot report` on it afterwards: the command's own main, in this process (its exit
    # status and the file it rewrites are what is checked)
    (run_dir / "report.md").unlink()
    report = CliRunner().invoke(cli_main, ["report", str(run_dir)])
    assert report.exit_code == 0, report.output
    assert result.job_names[0] in (run_dir / "report.md").read_text()


PLAIN_KFP_LOCAL = """
import json, sys
from kfp import components, dsl, local

root, source, endpoint, work = sys.argv[1:5]
C = {
    name: components.load_component_from_file(f"{root}/components/{name}/component.yaml")
    for name in (
        "prepare_package", "launch_spot_job", "evaluate_checkpoint", "promote_model",
        "deploy_spot_endpoint",
    )
}
local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=f"{work}/root")
prepared = C["prepare_package"](source=source, staging_uri=f"{work}/staging")
uris = prepared.outputs["package_uris"]


@dsl.pipeline
def imported(package_uri: str, package_uris: list, python_module: str, endpoint: str) -> str:
    package = dsl.importer(
        artifact_uri=package_uri,
        artifact_class=dsl.Artifact,
        metadata={"package_uris": package_uris, "python_module": python_module},
    )
    launch = C["launch_spot_job"](
        project="local-project",
        location="us-central1",
        persistent_resource_id="",
        package=package.output,
        args=["--steps", "4", "--step-seconds", "0"],
        base_output_directory=f"{work}/job",
        api_endpoint=endpoint,
    )
    evaluation = C["evaluate_checkpoint"](
        checkpoint=launch.outputs["checkpoint"],
        package=package.output,
        entry_point="regressor.metrics:evaluate",
        thresholds={"mse": "<=1000"},
    )
    with dsl.If(evaluation.outputs["Output"] == True):
        C["promote_model"](model=launch.outputs["model"], metrics=evaluation.outputs["metrics"])
    return launch.outputs["Output"]


task = imported(
    package_uri=uris[0],
    package_uris=uris,
    python_module=prepared.outputs["package"].metadata["python_module"],
    endpoint=endpoint,
)
try:  # the command resolves and the executor runs: it refuses a deployment of nothing
    C["deploy_spot_endpoint"](
        project="local-project", location="us-central1", api_endpoint=endpoint
    )
    deploy = "ran"
except RuntimeError as exc:
    deploy = f"task failed: {exc}"
print(json.dumps({
    "outcome": task.output,
    "uris": uris,
    "deploy": deploy,
    "kfp_spot_imported": any(m.startswith("kfp_spot") for m in sys.modules),
}))
"""


@pytest.mark.slow
def test_compiled_components_run_under_plain_kfp_local_without_kfp_spot(regressor, tmp_path):
    """No shim, no kfp-spot import: the user's process loads the YAMLs and runs them."""
    from kfp_spot.emulator import Emulator

    script = tmp_path / "plain.py"
    script.write_text(PLAIN_KFP_LOCAL)
    with Emulator(tmp_path / "emulator", grace_period=2.0) as emu:
        proc = subprocess.run(
            [sys.executable, str(script), str(ROOT), str(regressor), emu.endpoint, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp_path,
        )
        jobs = emu.list_jobs()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    done = json.loads(proc.stdout.strip().splitlines()[-1])
    assert done["kfp_spot_imported"] is False
    assert done["outcome"] == "SUCCEEDED"  # the list in the importer's metadata arrived intact
    assert [j["state"] for j in jobs] == ["JOB_STATE_SUCCEEDED"]
    package_uris = jobs[0]["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["packageUris"]
    assert package_uris == done["uris"]
    assert done["deploy"].startswith("task failed")
    output = proc.stdout + proc.stderr  # kfp.local logs the tasks' output on stdout
    assert "IndexError" not in output
    assert "deploy_spot_endpoint input 'model': give exactly one of `model`" in output


# --- lists arriving as JSON text (importer metadata under kfp.local) -------------------------


class _Package:
    def __init__(self, metadata):
        self.uri = "gs://my-bucket/pkg/regressor-0.3.0.tar.gz"
        self.metadata = metadata


def _launch(package, tmp_path):
    from kfp_spot.jobs.entry import build_request

    class Checkpoint:
        uri = "gs://my-bucket/run/checkpoint"
        metadata: dict = {}

    return build_request(
        project="local-project",
        location="us-central1",
        package=package,
        checkpoint=Checkpoint(),
        gcp_resources=str(tmp_path / "gcp_resources"),
    )


def test_a_package_uri_list_given_as_json_text_reaches_the_job_intact(tmp_path):
    uris = [
        "gs://my-bucket/pkg/regressor-0.3.0.tar.gz",
        "gs://my-bucket/pkg/kfp_spot_trainer-0.1.0.whl",
    ]
    metadata = {"package_uris": json.dumps(uris), "python_module": "regressor.train"}
    request = _launch(_Package(metadata), tmp_path)
    assert request.inputs.package_uris == uris
    assert request.inputs.python_module == "regressor.train"


def test_package_uris_text_that_is_not_a_json_list_is_an_input_error_before_submission(tmp_path):
    from kfp_spot.jobs.spec import LaunchInputError

    metadata = {
        "package_uris": "gs://my-bucket/a.tar.gz,gs://my-bucket/b.whl",
        "python_module": "m.task",
    }
    with pytest.raises(LaunchInputError) as info:
        _launch(_Package(metadata), tmp_path)
    assert info.value.field == "package"
    assert "\n" not in str(info.value)


def test_preemptions_asked_of_a_pipeline_that_launches_nothing_are_said_to_do_nothing(
    tmp_path, regressor
):
    # The evaluate_checkpoint template trains nothing: 2 preemptions were ignored in silence,
    # and the no-gate note spoke of promoting the model, which that pipeline does not do.
    events: list[str] = []
    with pytest.raises(local.LocalRunError, match="checkpoint_uri"):  # refused after the notes
        local_run.run_local(
            tmp_path / "run",
            source=regressor,
            template=ROOT / "pipelines" / "evaluate_checkpoint" / "pipeline.yaml",
            parameters={"checkpoint_uri": ""},
            preemptions=2,
            progress=events.append,
        )
    assert (
        "note: the 2 preemptions of the drill do nothing here: the pipeline launches no "
        "CustomJob (its evaluation scores a checkpoint that exists)"
    ) in events, events
    assert not any("the model is promoted" in event for event in events), events


def test_the_note_on_preemptions_speaks_of_an_evaluation_only_where_there_is_one(tmp_path):
    # A team's template that neither launches nor evaluates was told "its evaluation scores a
    # checkpoint that exists".
    from kfp import compiler

    template = tmp_path / "team.yaml"
    compiler.Compiler().compile(_team_gate, str(template))
    events: list[str] = []
    local_run.run_local(tmp_path / "run", template=template, preemptions=2, progress=events.append)
    note = "note: the 2 preemptions of the drill do nothing here: the pipeline launches no "
    assert note + "CustomJob" in events, events


TOP_LEVEL_SCRIPT = """\
import argparse

def evaluate(checkpoint_dir, params):
    return {"ok": 1.0}

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
print("training", args.steps)
"""


def test_an_entry_point_in_a_script_that_trains_at_import_is_refused_before_it_runs(tmp_path):
    # The evaluation imports the script for evaluate(): its top-level argparse read the
    # evaluator's arguments and the run failed after the whole training ("unrecognized
    # arguments: toptrain:evaluate ...").
    script = tmp_path / "toptrain.py"
    script.write_text(TOP_LEVEL_SCRIPT)
    entry = {"evaluation_entry_point": "toptrain:evaluate", "requirements": []}
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=script, parameters=entry, progress=None)
    assert str(info.value) == (
        f"evaluation_entry_point: toptrain:evaluate: 'toptrain' is the job's module ({script}), "
        'whose top level runs the job (line 7) with no `if __name__ == "__main__":`: the '
        "evaluation imports it and would run the training again; put the training under "
        '`if __name__ == "__main__":` (or the entry point in a module of its own)'
    )
    assert not (tmp_path / "run").exists()
    guarded = TOP_LEVEL_SCRIPT.replace("parser = ", 'if __name__ == "__main__":\n    parser = ')
    guarded = guarded.replace("\nparser.", "\n    parser.").replace("\nargs", "\n    args")
    script.write_text(guarded.replace('\nprint("', '\n    print("'))
    pipeline = local.load(spot_training)
    local_run.check_evaluation_module(script, entry, pipeline)  # no error


def test_the_trainer_wheel_declared_by_name_is_refused_before_the_run(tmp_path, regressor):
    # PyPI holds no kfp-spot-trainer, and declaring it stopped prepare_package from adding the
    # wheel it builds: the job then failed at its install, after the build and the launch.
    source = tmp_path / "declares-trainer"
    shutil.copytree(regressor, source)
    pyproject = source / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace("dependencies = [", 'dependencies = ["kfp-spot-trainer", ', 1)
    )
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=source, progress=None)
    assert str(info.value) == (
        "source: the package declares 'kfp-spot-trainer', which is not on PyPI: pip on the "
        "training VM would fail to install it. prepare_package builds that wheel itself and "
        "adds it to the package URIs when the code imports kfp_spot; remove it from the "
        f"dependencies of {source}'s pyproject.toml"
    )
    script = tmp_path / "train_it.py"
    script.write_text("import kfp_spot.trainer\n\n\ndef evaluate(d, p):\n    return {}\n")
    given = {
        "requirements": ["numpy", "kfp_spot_trainer>=0.1"],
        "evaluation_entry_point": "train_it:evaluate",
    }
    with pytest.raises(local.LocalRunError, match=r"^requirements: the package declares "):
        local_run.run_local(tmp_path / "run", source=script, parameters=given, progress=None)
    assert not (tmp_path / "run").exists()
    url = ["kfp-spot-trainer @ https://example.com/kfp_spot_trainer-1.0-py3-none-any.whl"]
    assert trainer_dist.source_problem(script, script, {"requirements": url}) is None


def test_a_script_named_no_module_name_is_refused_before_the_run(tmp_path):
    # prepare-package refused 'train-house v2.py' only once the run started, and the run's
    # own advice named the entry point 'train-house v2:FUNCTION', which its form check refuses.
    script = tmp_path / "train-house v2.py"
    script.write_text("def evaluate(d, p):\n    return {}\n")
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(tmp_path / "run", source=script, progress=None)
    assert str(info.value) == (
        "2 problems, found before the run started:\n"
        "  python_module: the script name 'train-house v2.py' is not a module name; pass "
        "python_module (e.g. trainer.task) to name the module the script becomes (set the "
        "pipeline parameter python_module)\n"
        "  evaluation_entry_point: not set, and the pipeline's default trainer.evaluate:evaluate "
        f"(the bundled example's) is not in {script}: set the pipeline parameter "
        "evaluation_entry_point to MODULE:FUNCTION"
    )
    given = {"python_module": "train_house", "evaluation_entry_point": "train_house:evaluate"}
    assert local_run._script_module(script, {"source": str(script), **given}) is None
