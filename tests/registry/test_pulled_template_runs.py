"""A template pulled from the registry runs locally with kfp.local."""

from pathlib import Path

import pytest
from kfp import components, local

import kfp_spot.registry as registry
from kfp_spot.registry import RegistryServer


@pytest.mark.slow
def test_pulled_template_runs_with_kfp_local(tmp_path: Path, template: Path):
    with RegistryServer(tmp_path / "registry") as server:
        host = server.repository_url()
        registry.push(template, host, "0.1.0")
        pulled = registry.pull(host, "tiny-add", tag="0.1.0", output=tmp_path / "pulled.yaml")
    assert pulled.read_bytes() == template.read_bytes()

    local.init(local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    pipeline = components.load_component_from_file(str(pulled))
    task = pipeline(a=40, b=2)
    assert task.output == 42
