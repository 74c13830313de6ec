"""The train → evaluate → gate → promote (→ deploy) chain that several pipelines share.

Called inside a ``@dsl.pipeline`` function; it adds tasks to the pipeline being defined.
"""

from __future__ import annotations

from kfp import dsl

from kfp_spot.components.deploy_spot_endpoint import DeploySpotEndpointOp
from kfp_spot.components.evaluate_checkpoint import EvaluateCheckpointOp
from kfp_spot.components.launch_spot_job import LaunchSpotJobOp
from kfp_spot.components.prepare_package import PreparePackageOp
from kfp_spot.components.promote_model import PromoteModelOp


def prepare_package(**inputs: object) -> dsl.PipelineTask:
    """Add the prepare-package task (``inputs``: prepare_package's), never cached.

    On Vertex AI Pipelines a cached task is keyed by its parameter values: a source re-uploaded
    to the same ``gs://`` URI (or changed under the same ``/gcs/`` directory) would replay the
    earlier package, and the run would train the old code. Staging is content-addressed, so a
    rerun of an unchanged source stays cheap without the cache. The component's tasks start with
    caching off (``components/factory.py``, ``NeverCachedComponent``), so nothing is set here.
    """
    return PreparePackageOp(**inputs).set_display_name("prepare-package")


def train_evaluate_promote(
    *,
    package: dsl.PipelineChannel,
    resume_from: dsl.PipelineChannel | None = None,
    evaluation_entry_point: dsl.PipelineChannel | str,
    evaluation_params: dsl.PipelineChannel | dict,
    thresholds: dsl.PipelineChannel | dict,
    allow_foreign_layout: dsl.PipelineChannel | bool = False,
    fallback_to_previous: dsl.PipelineChannel | bool = False,
    deploy_inputs: dict[str, object] | None = None,
    **launch_inputs: object,
) -> tuple[dsl.PipelineTask, dsl.PipelineTask]:
    """Add launch → evaluate → quality gate → promote; return (launch, evaluation) tasks.

    With ``deploy_inputs`` the promoted model is also deployed on Spot VMs behind the same gate
    (``deploy_spot_endpoint`` with those inputs).
    """
    if resume_from is not None:
        launch_inputs["resume_from"] = resume_from
    # Not cached (the component's tasks start with caching off): on Vertex AI Pipelines a rerun
    # with the same inputs would replay the last launch's outputs without training (README,
    # "Caching on Vertex AI").
    launch = LaunchSpotJobOp(package=package, **launch_inputs).set_display_name("launch-spot-job")
    evaluation = EvaluateCheckpointOp(
        checkpoint=launch.outputs["checkpoint"],
        package=package,
        entry_point=evaluation_entry_point,
        params=evaluation_params,
        thresholds=thresholds,
        allow_foreign_layout=allow_foreign_layout,
        fallback_to_previous=fallback_to_previous,
    ).set_display_name("evaluate-checkpoint")
    # The gate reads the evaluation's single return value ("Output"): kfp.local resolves
    # conditions only on outputs named "Output" (named NamedTuple outputs are never resolved
    # there, and the branch would silently be skipped).
    with dsl.If(evaluation.outputs["Output"] == True, name="quality-gate"):  # noqa: E712
        promote = PromoteModelOp(
            model=launch.outputs["model"], metrics=evaluation.outputs["metrics"]
        ).set_display_name("promote-model")
        if deploy_inputs is not None:
            # Not cached either (the component's default): a cached deploy would report an
            # endpoint that may be gone.
            DeploySpotEndpointOp(
                model=promote.outputs["promoted_model"], **deploy_inputs
            ).set_display_name("deploy-spot-endpoint")
    return launch, evaluation
