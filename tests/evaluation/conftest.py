import json
from pathlib import Path

import pytest

from kfp_spot import checkpoints
from tests.packaging.tiny import write_project
from tests.prepare import prepare_package

TINY_ENTRY_POINT = "tinytrainer.evaluate:evaluate"


@pytest.fixture(scope="session")
def package(tmp_path_factory):
    """The tiny trainer, built and staged once for every evaluation test."""
    root = tmp_path_factory.mktemp("pkg")
    project = write_project(root / "src")
    return prepare_package(str(project), str(root / "stage"))


@pytest.fixture(scope="session")
def declared_package(tmp_path_factory):
    """The tiny trainer declaring its evaluation function in ``[tool.kfp-spot]``, staged once."""
    root = tmp_path_factory.mktemp("declared")
    project = write_project(root / "src")
    with (project / "pyproject.toml").open("a") as pyproject:
        pyproject.write(f'\n[tool.kfp-spot]\nevaluation-entry-point = "{TINY_ENTRY_POINT}"\n')
    return prepare_package(str(project), str(root / "stage"))


def write_checkpoint(root, step, accuracy, **metadata):
    data = json.dumps({"accuracy": accuracy, "step": step}).encode()
    return checkpoints.write_step(
        str(root), step, {"model.json": data}, metadata={"accuracy": accuracy, **metadata}
    )


@pytest.fixture
def ckpt(tmp_path) -> Path:
    """Checkpoints at steps 10, 20, 30 with accuracy 0.6, 0.95, 0.9 (step 20 is best)."""
    root = tmp_path / "run" / "checkpoints"
    for step, accuracy in ((10, 0.6), (20, 0.95), (30, 0.9)):
        write_checkpoint(root, step, accuracy, loss=1 - accuracy)
    return root
