"""A requirement its executor image's version does not satisfy is a warning before the job.

``torch>=2.5`` in ``pytorch-xla.2-4.py310`` (torch 2.4) runs on Vertex AI, but pip replaces the
image's torch with a build from PyPI at every job start; a local run links this machine's build.
prepare_package (the task's console), ``kfp-spot run`` (before it starts) and ``kfp-spot submit``
(for a ``requirements`` parameter) say so, naming the requirement, the image, its version and the
fix; a requirement the image satisfies says nothing.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import pytest

from kfp_spot import executors
from kfp_spot.packaging import prepare_package
from kfp_spot.packaging.imagepins import unmet_pins
from tests.local_prechecks import warnings_before_the_run

TRAINING = "us-docker.pkg.dev/vertex-ai/training/"
TORCH_2_4 = TRAINING + "pytorch-xla.2-4.py310:latest"


def image(name: str) -> executors.ExecutorProfile:
    return executors.profile(TRAINING + name + ":latest")


def write_package(root: Path, dependencies: list[str]) -> Path:
    """A small project that declares ``dependencies`` (nothing imports them: no install)."""
    (root / "torchjob").mkdir(parents=True)
    (root / "torchjob" / "__init__.py").write_text("")
    (root / "torchjob" / "task.py").write_text("print('training')\n")
    (root / "torchjob" / "metrics.py").write_text(
        "def evaluate(checkpoint_dir, params):\n    return {}\n"
    )
    (root / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "torch-job"
            version = "0.1.0"
            dependencies = {json.dumps(dependencies)}

            [tool.setuptools]
            packages = ["torchjob"]

            [tool.kfp-spot]
            evaluation-entry-point = "torchjob.metrics:evaluate"
            """
        )
    )
    return root


# --- the rule --------------------------------------------------------------------------------


def test_a_newer_framework_than_the_images_is_one_finding_naming_the_fix():
    (found,) = unmet_pins(["numpy>=1.20", "torch>=2.5"], image("pytorch-xla.2-4.py310"))
    assert (found.requirement, found.image, found.version) == (
        "torch>=2.5",
        "pytorch-xla.2-4.py310",
        "2.4.x",
    )
    message = found.message
    assert "requirement 'torch>=2.5' is not satisfied by executor image pytorch-xla.2-4.py310" in (
        message
    )
    assert "whose torch is 2.4.x" in message
    assert "pip replaces it" in message
    assert "none of kfp-spot's table does" in message  # the table's newest torch is 2.4
    assert "relax the requirement to allow torch 2.4.x" in message


@pytest.mark.parametrize(
    "requirement",
    [
        "torch>=2.4",
        "torch>=2.4.1,<2.5",  # a 2.4 image may hold 2.4.1: not judged
        "torch~=2.4.0",
        "torch==2.4.0+cpu",
        "torch",
        "torch>=2.5; python_version >= '3.12'",  # not installed in the image's Python 3.10
        "torch>=2.5; extra == 'cuda'",  # an extra: the job installs the package without it
        "pandas>=2",
    ],
)
def test_a_requirement_the_image_satisfies_says_nothing(requirement):
    assert unmet_pins([requirement], image("pytorch-xla.2-4.py310")) == []


def test_names_are_compared_canonicalized_and_the_images_that_satisfy_are_listed():
    (found,) = unmet_pins(["Scikit_Learn>=1.7"], image("sklearn-cpu.1-6"))
    assert found.held == "Scikit_Learn==1.6.1" and found.version == "1.6.1"
    (older,) = unmet_pins(["torch>=2.3"], image("pytorch-gpu.1-13.py310"))
    assert older.satisfying[:2] == ("pytorch-xla.2-4.py310", "pytorch-gpu.2-4.py310")
    assert "pytorch-gpu.1-13.py310" not in older.satisfying
    assert "whose torch does: pytorch-xla.2-4.py310, pytorch-gpu.2-4.py310" in older.message


def test_a_local_version_in_the_images_record_is_compared_as_pip_does():
    cpu = dataclasses.replace(
        image("pytorch-xla.2-4.py310"), version="2.4.0+cpu", packages=("torch==2.4.0+cpu",)
    )
    assert unmet_pins(["torch>=2.4", "torch==2.4.0", "torch<2.4.1"], cpu) == []
    (found,) = unmet_pins(["torch>=2.5"], cpu)
    assert found.version == "2.4.0+cpu" and "whose torch is 2.4.0+cpu" in found.message
    (cuda,) = unmet_pins(["torch==2.4.0+cu121"], cpu)
    assert cuda.requirement == "torch==2.4.0+cu121"


def test_an_image_the_table_lacks_is_judged_on_its_framework_only():
    assert unmet_pins(["torch>=2.5", "numpy>=3"], image("pytorch-xla.2-5.py310")) == []
    (found,) = unmet_pins(["torch>=2.6"], image("pytorch-xla.2-5.py310"))
    assert "whose torch is 2.5.x (inferred from its name)" in found.message


# --- where the user sees it ------------------------------------------------------------------


def test_prepare_package_warns_on_its_console(tmp_path, capsys):
    source = write_package(tmp_path / "pkg", ["torch>=2.5"])
    info = prepare_package(str(source), str(tmp_path / "stage"), executor_image_uri=TORCH_2_4)
    assert info.requirements == ("torch>=2.5",)  # still staged: the job would run
    err = capsys.readouterr().err
    assert (
        "kfp-spot: warning: requirement 'torch>=2.5' is not satisfied by executor image "
        "pytorch-xla.2-4.py310, whose torch is 2.4.x"
    ) in err


def test_prepare_package_is_quiet_when_the_image_satisfies_it(tmp_path, capsys):
    source = write_package(tmp_path / "pkg", ["torch>=2.4,<2.5"])
    prepare_package(str(source), str(tmp_path / "stage"), executor_image_uri=TORCH_2_4)
    assert "not satisfied by executor image" not in capsys.readouterr().err


@pytest.mark.parametrize(("dependency", "warned"), [("torch>=2.5", True), ("torch>=2.4", False)])
def test_a_local_run_says_it_before_it_starts(tmp_path, dependency, warned):
    source = write_package(tmp_path / "pkg", [dependency])
    shown = warnings_before_the_run(tmp_path, source, {"executor_image_uri": TORCH_2_4})
    if warned:
        assert len(shown) == 1, shown
        assert "'torch>=2.5' is not satisfied by executor image pytorch-xla.2-4.py310" in shown[0]
    else:
        assert shown == []


def test_submit_warns_of_a_scripts_requirements(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from kfp_spot.cli import main
    from kfp_spot.pipelines import catalog

    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "nowhere.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("KFP_SPOT_CONFIG_DIR", str(tmp_path / "config"))
    args = [
        "submit",
        str(catalog.pipeline_path("spot_training")),
        "--dry-run",
        "--skip-image-check",
        "--project",
        "my-proj",
        "--param",
        "source=gs://b/train.py",
        "--param",
        "thresholds={}",
        "--param",
        f"executor_image_uri={TORCH_2_4}",
    ]
    for requirements, warned in (('["torch>=2.5"]', True), ('["torch>=2.4"]', False)):
        result = CliRunner().invoke(main, [*args, "--param", f"requirements={requirements}"])
        assert result.exit_code == 0, result.output
        said = "'torch>=2.5' is not satisfied by executor image pytorch-xla.2-4.py310"
        assert (said in result.stderr) is warned, result.stderr
        if warned:
            assert "kfp-spot: warning: task 'prepare-package' (prepare_package): " in (
                result.stderr
            )
