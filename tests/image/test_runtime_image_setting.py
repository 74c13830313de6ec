"""KFP_SPOT_RUNTIME_IMAGE points every kfp-spot component at the user's own pushed image: in the
user's own pipelines and in the templates `kfp-spot compile --output-dir` writes.

Each case runs in a fresh interpreter: the setting is read when the components are built, which
is when `kfp_spot.components` is first imported.
"""

import os
import subprocess
import sys
from pathlib import Path

import yaml

from kfp_spot import RUNTIME_IMAGE
from kfp_spot.image import template_images

MINE = "europe-west4-docker.pkg.dev/my-project/images/kfp-spot:0.1.0"
USER_PIPELINE = """
import sys
from kfp import compiler, dsl
from kfp_spot.components import LaunchSpotJobOp, PreparePackageOp

@dsl.pipeline(name="mine")
def mine(source: str = "gs://b/src", staging: str = "gs://b/stage", base: str = "gs://b/out"):
    package = PreparePackageOp(source=source, staging_uri=staging, python_module="trainer.task")
    LaunchSpotJobOp(
        project="my-project", location="europe-west4", display_name="mine",
        package=package.outputs["package"], base_output_directory=base,
    )

compiler.Compiler().compile(mine, sys.argv[1])
"""


def _run(args: list[str], image: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KFP_SPOT_RUNTIME_IMAGE"}
    if image is not None:
        env["KFP_SPOT_RUNTIME_IMAGE"] = image
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)


def _images(path: Path) -> list[str]:
    return list(template_images(yaml.safe_load(path.read_text())))


def test_the_users_own_pipeline_runs_in_the_image_the_setting_names(tmp_path):
    out = tmp_path / "mine.yaml"
    result = _run([sys.executable, "-c", USER_PIPELINE, str(out)], MINE)
    assert result.returncode == 0, result.stderr
    assert _images(out) == [MINE]
    result = _run([sys.executable, "-c", USER_PIPELINE, str(out)], None)
    assert result.returncode == 0, result.stderr
    assert _images(out) == [RUNTIME_IMAGE]


def test_compile_writes_templates_in_that_image_and_never_over_the_committed_ones(tmp_path):
    cli = str(Path(sys.executable).with_name("kfp-spot"))
    result = _run([cli, "compile", "--output-dir", str(tmp_path)], MINE)
    assert result.returncode == 0, result.stderr
    written = sorted(tmp_path.glob("*/*.yaml"))
    assert len(written) == 9
    assert all(_images(path) == [MINE] for path in written)

    result = _run([cli, "compile"], MINE)
    assert result.returncode == 2
    assert "KFP_SPOT_RUNTIME_IMAGE is set: compile with --output-dir" in result.stderr


def test_a_value_that_is_not_an_image_reference_is_named_in_one_line(tmp_path):
    cli = str(Path(sys.executable).with_name("kfp-spot"))
    result = _run([cli, "compile", "--output-dir", str(tmp_path)], "kfp-spot latest")
    assert result.returncode == 2
    (line,) = [ln for ln in result.stderr.splitlines() if "KFP_SPOT_RUNTIME_IMAGE" in ln]
    assert "'kfp-spot latest' is not an image reference HOST/PATH:TAG" in line
    assert "Traceback" not in result.stderr
