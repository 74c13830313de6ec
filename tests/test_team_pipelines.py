"""A platform team's own pipelines: single kfp-spot components, Python or vendored YAML."""

from pathlib import Path

import pytest
from kfp import components, dsl

from kfp_spot.pipelines import local_arguments

ROOT = Path(__file__).resolve().parents[1]
VENDORED = {  # the committed YAMLs, as a team vendoring them loads them
    name: components.load_component_from_file(str(ROOT / "components" / name / "component.yaml"))
    for name in ("prepare_package", "launch_spot_job", "evaluate_checkpoint")
}


@pytest.fixture(name="sweep")
def _sweep():
    @dsl.pipeline
    def sweep(code: str, api_endpoint: str = "", base_output_directory: str = ""):
        package = VENDORED["prepare_package"](source=code)
        with dsl.ParallelFor([1, 2]) as seed:
            VENDORED["launch_spot_job"](
                package=package.outputs["package"],
                args=["--seed", seed],
                base_output_directory=base_output_directory,
                api_endpoint=api_endpoint,
            )

    return sweep


def test_a_local_run_leaves_a_sweeps_output_directory_to_each_iteration(sweep, tmp_path):
    """The run filled its one base_output_directory in, then refused the sweep for sharing it
    between iterations: the team had left it empty. It is now left to the pipeline's default."""
    arguments = local_arguments.run_arguments(sweep, {"code": "x"}, tmp_path, "http://e")
    assert "base_output_directory" not in arguments
    local_arguments.check_tasks(sweep, arguments)  # not refused


def test_a_sweeps_output_directory_given_by_hand_is_still_refused(sweep, tmp_path):
    given = {"code": "x", "base_output_directory": str(tmp_path / "all")}
    arguments = local_arguments.run_arguments(sweep, given, tmp_path, "http://e")
    with pytest.raises(local_arguments.LocalRunError, match="the same in every iteration"):
        local_arguments.check_tasks(sweep, arguments)
