from pathlib import Path

import pytest

from kfp_spot.packaging import PackageInfo
from tests.packaging.tiny import write_project
from tests.prepare import prepare_package


@pytest.fixture
def project(tmp_path) -> Path:
    return write_project(tmp_path / "src" / "tiny")


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> PackageInfo:
    """The tiny project built once (with its wheel) into a session staging directory."""
    root = tmp_path_factory.mktemp("built")
    project = write_project(root / "src" / "tiny")
    return prepare_package(str(project), str(root / "stage"), build_wheel=True)
