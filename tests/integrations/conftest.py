"""Fixtures for the framework integration tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integrations.examples_lib import KERAS_ARGS, XGBOOST_ARGS, uninterrupted_run
from tests.shared import once_per_run

# Keras 3 picks its backend when first imported; these tests (and the example trainers they run
# as subprocesses) use JAX on CPU.
os.environ.setdefault("KERAS_BACKEND", "jax")


def _uninterrupted(tmp_path_factory: pytest.TempPathFactory, name: str, args: list[str]) -> Path:
    def run(base: Path) -> str:
        return str(uninterrupted_run(name, base, args))

    return Path(once_per_run(tmp_path_factory, f"{name}-clean", run))


@pytest.fixture(scope="session")
def keras_uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Keras example never preempted, as on a VM (read only): one per run, every worker's.
    test_keras compares with it; test_example_output_dirs checks its run through the mount."""
    return _uninterrupted(tmp_path_factory, "keras", KERAS_ARGS)


@pytest.fixture(scope="session")
def xgboost_uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The XGBoost example never preempted, as on a VM (read only), shared as the Keras one."""
    return _uninterrupted(tmp_path_factory, "xgboost", XGBOOST_ARGS)
