"""No pipeline caches a package, a Spot launch or a deployment unless it asks to.

On Vertex AI Pipelines a task with ``cachingOptions.enableCache`` and the same inputs as an earlier
run is skipped and its earlier outputs replayed: a prepare-package would replay the package of a
source that changed under the same URI, a launch would "train" without a CustomJob, a deploy would
report an endpoint that may be gone. kfp.local never caches, so only the compiled YAML shows it.
"""

import pytest
import yaml

from kfp_spot.pipelines import catalog

NEVER_CACHED = {"comp-prepare-package", "comp-launch-spot-job", "comp-deploy-spot-endpoint"}


def _tasks(spec):
    """Every task of the pipeline: the root DAG's and those of its sub-DAGs (conditions)."""
    dags = [spec["root"]["dag"]] + [
        c["dag"] for c in spec.get("components", {}).values() if "dag" in c
    ]
    for dag in dags:
        yield from dag.get("tasks", {}).items()


@pytest.mark.parametrize("entry", catalog.PIPELINES, ids=[e.name for e in catalog.PIPELINES])
def test_launch_and_deploy_tasks_are_not_cached(entry):
    spec = yaml.safe_load(entry.default_path().read_text())
    found = {}
    for name, task in _tasks(spec):
        component = task["componentRef"]["name"]
        if component in NEVER_CACHED:
            found[name] = task.get("cachingOptions", {}).get("enableCache", False)
    assert all(not cached for cached in found.values()), found
    assert "prepare-package" in found
    if entry.name != "evaluate_checkpoint":  # the only pipeline that launches nothing
        assert "launch-spot-job" in found
    if entry.name == "spot_training_and_serving":
        assert "deploy-spot-endpoint" in found


def test_other_tasks_keep_the_compilers_default():
    """Evaluation and promotion after a launch stay cacheable: the launch's outputs are new."""
    spec = yaml.safe_load(catalog.pipeline_path("spot_training").read_text())
    cached = {
        name for name, task in _tasks(spec) if task.get("cachingOptions", {}).get("enableCache")
    }
    assert cached == {"evaluate-checkpoint", "promote-model"}


def test_an_evaluation_of_an_imported_checkpoint_is_not_cached():
    """The imported directory keeps its URI as it gains steps: a cache hit replays old metrics."""
    spec = yaml.safe_load(catalog.pipeline_path("evaluate_checkpoint").read_text())
    tasks = dict(_tasks(spec))
    assert not tasks["evaluate-checkpoint"].get("cachingOptions", {}).get("enableCache")


def _compiled_tasks(pipeline, tmp_path):
    from kfp import compiler

    path = tmp_path / "pipeline.yaml"
    compiler.Compiler().compile(pipeline, str(path))
    spec = yaml.safe_load(path.read_text())
    return {
        name: task.get("cachingOptions", {}).get("enableCache", False)
        for name, task in _tasks(spec)
    }


def test_a_teams_own_pipeline_never_caches_a_package_a_launch_or_a_deployment(tmp_path):
    """The README's own-pipeline example, as written: no caching options set by the team."""
    from kfp import dsl

    from kfp_spot.components import (
        DeploySpotEndpointOp,
        EvaluateCheckpointOp,
        LaunchSpotJobOp,
        PreparePackageOp,
        PromoteModelOp,
    )

    @dsl.pipeline
    def team(code: str = "gs://team-bucket/src/t.tar.gz"):
        package = PreparePackageOp(source=code, staging_uri="gs://team-bucket/staging")
        train = LaunchSpotJobOp(package=package.outputs["package"])
        gate = EvaluateCheckpointOp(
            checkpoint=train.outputs["checkpoint"], package=package.outputs["package"]
        )
        with dsl.If(gate.outputs["Output"] == True):  # noqa: E712
            promoted = PromoteModelOp(model=train.outputs["model"], metrics=gate.outputs["metrics"])
            DeploySpotEndpointOp(model=promoted.outputs["promoted_model"])
        # A team that wants a launch cached says so, and is heard.
        LaunchSpotJobOp(container_image_uri="gcr.io/team/trainer:1").set_caching_options(True)

    cached = _compiled_tasks(team, tmp_path)
    cached.pop("condition-1")  # the gate's group, no component of ours
    assert cached == {
        "prepare-package": False,
        "launch-spot-job": False,
        "evaluate-checkpoint": True,
        "promote-model": True,
        "deploy-spot-endpoint": False,
        "launch-spot-job-2": True,
    }


@pytest.mark.parametrize("name", ["prepare_package", "launch_spot_job", "deploy_spot_endpoint"])
def test_a_component_yaml_submitted_as_it_is_is_not_cached(name):
    """A component YAML is a pipeline of one task (submitted, or pushed to a registry as it is)."""
    from pathlib import Path

    path = Path(__file__).parent.parent / "components" / name / "component.yaml"
    spec = yaml.safe_load(path.read_text())
    [(_, task)] = spec["root"]["dag"]["tasks"].items()
    assert not task.get("cachingOptions", {}).get("enableCache")
