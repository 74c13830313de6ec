from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from artifacts import FakeArtifact
from launchers import Zygote


@pytest.fixture(scope="module")
def launchers() -> Iterator[Zygote]:
    """Starts the module's launcher processes (tests/jobs/launchers.py): one import of the
    launcher for all of them. Module-scoped, so its tests run on one xdist worker and its end
    (the zygote waited for, with its children) is counted with them."""
    with Zygote() as zygote:
        yield zygote


@pytest.fixture
def task_dir(tmp_path):
    d = tmp_path / "task"
    d.mkdir()
    return d


@pytest.fixture
def outputs(task_dir):
    return {
        "checkpoint": FakeArtifact(uri=str(task_dir / "checkpoint")),
        "model": FakeArtifact(uri=str(task_dir / "model")),
        "job_report": FakeArtifact(
            uri=str(task_dir / "job_report"), path=str(task_dir / "job_report")
        ),
        "gcp_resources": str(task_dir / "gcp_resources"),
    }


@pytest.fixture
def package():
    return FakeArtifact(
        uri="gs://bucket/pkg/trainer-0.1.tar.gz",
        metadata={
            "python_module": "trainer.task",
            "package_uris": ["gs://bucket/pkg/trainer-0.1.tar.gz"],
            "sha256": "0" * 64,
            "name": "trainer",
            "version": "0.1",
        },
    )
