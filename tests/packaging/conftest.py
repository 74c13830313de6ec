from pathlib import Path

import pytest

from tests.packaging.tiny import write_project


@pytest.fixture
def project(tmp_path) -> Path:
    return write_project(tmp_path / "src" / "tiny")


@pytest.fixture(scope="session")
def env_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("envcache")
