"""A pipeline that takes an executor image gives it to prepare_package too, not only the launch.

prepare_package checks (and warns on) the image the job will run in and, with check_import,
imports the module in that image's libraries: left at its default, it judged another image.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["spot_training", "spot_training_and_serving"])
def test_prepare_package_gets_the_pipelines_executor_image(name):
    spec = yaml.safe_load((ROOT / "pipelines" / name / "pipeline.yaml").read_text())
    assert "executor_image_uri" in spec["root"]["inputDefinitions"]["parameters"]
    tasks = spec["root"]["dag"]["tasks"]
    given = tasks["prepare-package"]["inputs"]["parameters"]["executor_image_uri"]
    assert given == {"componentInputParameter": "executor_image_uri"}
