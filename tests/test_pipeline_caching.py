"""The committed pipelines never cache a package, a Spot launch or a deployment.

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
