"""A bare package or script gets its dependencies through the pipelines that prepare it.

prepare_package builds a *generated project* for a source without a project file and takes its
dependencies from ``requirements`` (docs/packaging.md). Every pipeline that prepares a package
passes its own ``requirements`` parameter on, so ``kfp-spot run --param requirements=...`` and a
PipelineJob on Vertex AI can give them.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from kfp_spot.pipelines import catalog

KFP_SPOT = Path(sys.executable).with_name("kfp-spot")
PREPARE = next(e for e in catalog.COMPONENTS if e.name == "prepare_package")


def _spec(path: Path) -> dict:
    # the committed YAML (a pipeline's may hold a second document: its platform spec), as KFP's
    # compiler wrote it: libyaml reads that alike and ~10 times faster (every xdist worker
    # collects this module, so the parametrization's reads are paid five times)
    return next(yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader))


PREPARING = [  # the pipelines with a prepare-package task
    e
    for e in catalog.PIPELINES
    if "prepare-package" in _spec(e.default_path())["root"]["dag"]["tasks"]
]


def test_the_pipelines_that_prepare_a_package_are_the_three_known_ones():
    assert {e.name for e in PREPARING} == {
        "spot_training",
        "continue_training",
        "spot_training_and_serving",
        "evaluate_checkpoint",
    }


@pytest.mark.parametrize("entry", PREPARING, ids=[e.name for e in PREPARING])
def test_the_pipeline_passes_its_requirements_to_prepare_package(entry):
    component = _spec(PREPARE.default_path())["root"]["inputDefinitions"]["parameters"]
    pipeline = _spec(entry.default_path())["root"]
    param = pipeline["inputDefinitions"]["parameters"].get("requirements")
    assert param is not None, f"{entry.name} has no 'requirements' parameter"
    want = component["requirements"]
    assert (param["parameterType"], param.get("defaultValue")) == (
        want["parameterType"],
        want.get("defaultValue"),
    )
    task = pipeline["dag"]["tasks"]["prepare-package"]["inputs"]["parameters"]
    assert task.get("requirements") == {"componentInputParameter": "requirements"}


TASK = '''\
"""A bare package's trainer that reads its config with PyYAML, which nothing here declares."""

import argparse
import os
import sys

import yaml

from kfp_spot.trainer import PREEMPTED_EXIT_CODE, CheckpointManager, add_output_dir_arguments
from kfp_spot.trainer import resolve_output_dirs


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m yamltrainer.task")
    add_output_dir_arguments(parser)
    args = parser.parse_args(argv)
    resolve_output_dirs(parser, args)
    config = yaml.safe_load("steps: 4\\nrate: 0.5\\n")
    with CheckpointManager(args.checkpoint_dir, interval=1, grace_period=5.0) as ckpt:
        restored = ckpt.restore()
        w, step = (0.0, 0) if restored is None else (restored.state["w"], restored.step)
        while step < config["steps"]:
            step += 1
            w += config["rate"] * (1.0 - w)
            ckpt.notice.sleep(0.1)
            ckpt.maybe_save(step, {"w": w}, metrics={"rmse": abs(1.0 - w)})
            if ckpt.should_stop:
                sys.exit(PREEMPTED_EXIT_CODE)
    os.makedirs(args.model_dir, exist_ok=True)
    with open(os.path.join(args.model_dir, "model.yaml"), "w") as f:
        yaml.safe_dump({"w": w}, f)


if __name__ == "__main__":
    main()
'''

EVALUATE = """\
import yaml  # the evaluation installs the package with its requirements too

from kfp_spot.trainer import load_checkpoint


def evaluate(checkpoint_dir, params=None):
    return {"rmse": abs(1.0 - float(load_checkpoint(checkpoint_dir).state["w"]))}
"""


PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "yamltrainer"
version = "0.1.0"

[tool.setuptools]
packages = ["yamltrainer"]
"""


def _write_package(root: Path) -> Path:
    package = root / "yamltrainer"  # no pyproject.toml: a generated project
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(textwrap.dedent(TASK))
    (package / "evaluate.py").write_text(EVALUATE)
    return package


def _run(source: Path, run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(KFP_SPOT),
            "run",
            "--source",
            str(source),
            "--preemptions",
            "0",
            "--run-dir",
            str(run_dir),
            "--param",
            "python_module=yamltrainer.task",
            "--param",
            "evaluation_entry_point=yamltrainer.evaluate:evaluate",
            "--param",
            f"requirements={json.dumps(['pyyaml'])}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_kfp_spot_run_installs_the_requirements_of_a_bare_package(tmp_path):
    run_dir = tmp_path / "run"
    proc = _run(_write_package(tmp_path), run_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("outcome:            SUCCEEDED\n"), proc.stdout
    record = json.loads((run_dir / "run.json").read_text())
    assert record["metrics"]["rmse"] == pytest.approx(1 / 16)


def test_requirements_for_a_project_are_refused_before_the_run_starts(tmp_path):
    # A project declares its own dependencies (docs/packaging.md): refused before the emulator
    # or any task starts, as the prepare-package step would refuse it on Vertex AI.
    project = tmp_path / "project"
    _write_package(project)
    (project / "pyproject.toml").write_text(PYPROJECT)
    proc = _run(project, tmp_path / "run")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        f"requirements: {project} is a project with its own dependencies; declare them in its "
        "pyproject.toml/setup.py instead"
    ) in proc.stderr
    assert not (tmp_path / "run").exists()
