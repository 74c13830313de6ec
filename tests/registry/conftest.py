from pathlib import Path

import pytest
from kfp import compiler, dsl


@dsl.component(base_image="python:3.11-slim", install_kfp_package=False)
def add(a: int, b: int) -> int:
    return a + b


@dsl.pipeline(name="tiny-add", description="Adds two numbers; a template for registry tests.")
def tiny_add(a: int = 1, b: int = 2) -> int:
    return add(a=a, b=b).output


@dsl.pipeline(name="tiny-add")
def tiny_add_v2(a: int = 1, b: int = 2) -> int:
    first = add(a=a, b=b)
    return add(a=first.output, b=b).output


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny compiled pipeline (pipelineInfo.name = tiny-add)."""
    path = tmp_path_factory.mktemp("templates") / "tiny_add.yaml"
    compiler.Compiler().compile(tiny_add, package_path=str(path))
    return path


@pytest.fixture(scope="session")
def template_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second, different version of the same pipeline name."""
    path = tmp_path_factory.mktemp("templates") / "tiny_add_v2.yaml"
    compiler.Compiler().compile(tiny_add_v2, package_path=str(path))
    return path
