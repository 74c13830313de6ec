"""``spot_training_and_serving``: spot_training, then the gated model served on Spot VMs."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Metrics

from kfp_spot.pipelines.steps import prepare_package, train_evaluate_promote
from kfp_spot.vertex.pipeline_context import LOCATION_PLACEHOLDER, PROJECT_ID_PLACEHOLDER


class Outputs(NamedTuple):
    """What the pipeline returns."""

    outcome: str
    passed: bool
    metrics: Metrics
    checkpoint: Artifact


@dsl.pipeline(
    name="spot-training-and-serving",
    description=(
        "Trains on Spot VMs through a Vertex AI CustomJob that survives preemption, evaluates the "
        "last committed checkpoint and, only when it passes the quality thresholds, promotes the "
        "model and deploys it to a Vertex AI endpoint on Spot VMs."
    ),
)
def spot_training_and_serving(
    source: str,
    project: str = PROJECT_ID_PLACEHOLDER,
    location: str = LOCATION_PLACEHOLDER,
    staging_uri: str = "",
    python_module: str = "",
    check_import: bool = False,
    requirements: list = [],
    training_args: list = [],
    executor_image_uri: str = "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest",
    machine_type: str = "n1-standard-4",
    accelerator_type: str = "",
    accelerator_count: int = 0,
    replica_count: int = 1,
    base_output_directory: str = "",
    max_resubmissions: int = 2,
    fallback_after: int = 0,
    regions: list = [],
    region_policy: str = "STAY",
    region_buckets: dict = {},
    api_endpoint: str = "",
    evaluation_entry_point: str = "",
    evaluation_params: dict = {},
    thresholds: dict = {"accuracy": ">=0.85"},
    allow_foreign_layout: bool = False,
    fallback_to_previous: bool = False,
    serving_container_image_uri: str = (
        "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-6:latest"
    ),
    serving_machine_type: str = "n1-standard-4",
    serving_min_replica_count: int = 2,
    serving_max_replica_count: int = 0,
    serving_spot: bool = True,
    endpoint_display_name: str = "kfp-spot-endpoint",
) -> Outputs:
    """Trains on Spot, gates on quality, then serves the promoted model on Spot VMs.

    Args:
        source: training code: a project directory, module directory, script or source archive.
        project: Google Cloud project that runs the CustomJob and the endpoint; default: the
            pipeline's (``local-project`` on the local emulator when not given).
        location: Vertex AI region of the CustomJob and the endpoint; default: the pipeline's.
        staging_uri: where the built package is staged (gs:// on Vertex); empty: next to outputs.
        python_module: module the job runs with ``python -m``; empty: the package's own
            (``[tool.kfp-spot] python-module`` in its pyproject.toml, else its one ``*.task``).
        check_import: import the module before staging, in an environment holding only
            what the executor image provides and the package's declared requirements, so
            an import typo or a missing requirement fails here, before a paid VM starts.
        requirements: dependencies of a script or bare package source (PEP 508 strings, e.g.
            ``["pyyaml>=6"]``), installed on the training VM with it; a project declares its
            own in its pyproject.toml/setup.py (giving them for a project is an error).
        training_args: arguments passed to the training module.
        executor_image_uri: the Vertex AI prebuilt training image the package runs in.
        machine_type: Compute Engine machine type of each training replica.
        accelerator_type: training accelerator type (e.g. NVIDIA_TESLA_T4); empty for none.
        accelerator_count: accelerators per training replica.
        replica_count: replicas in the first worker pool.
        base_output_directory: the job's output root (checkpoints, model, logs); empty: next to
            this run's outputs.
        max_resubmissions: new CustomJobs after the service's own Spot restarts are exhausted.
        fallback_after: exhausted Spot submissions before falling back to standard VMs (0: never).
        regions: regions to run Spot jobs in, in order (empty: only ``location``); a region out
            of Spot capacity hands on to the next, which resumes from the newest checkpoint.
        region_policy: ``STAY`` (leave a region once it is out of Spot capacity) or ``EAGER``
            (also at its first preemption).
        region_buckets: region -> ``gs://`` directory in that region, for regions the base
            output directory's bucket does not serve (the checkpoint is copied and verified).
        api_endpoint: Vertex AI API endpoint; ``http://127.0.0.1:PORT`` for the local emulator.
        evaluation_entry_point: ``module:function`` that scores a checkpoint; empty: the
            package's ``[tool.kfp-spot] evaluation-entry-point``, else
            ``trainer.evaluate:evaluate``.
        evaluation_params: keyword parameters for the evaluation function.
        thresholds: metric → bound (``">=0.9"``, ``"<=0.3"``); all must hold to deploy.
        allow_foreign_layout: evaluate a checkpoint directory without kfp-spot steps (a
            trainer's own files) as a whole, unverified.
        serving_container_image_uri: the prediction image the model is served with (the model
            directory must hold the file it loads, e.g. ``model.joblib``).
        serving_machine_type: machine type of each serving replica.
        serving_min_replica_count: serving replicas always running (2 or more rides out a Spot
            preemption without an outage).
        serving_max_replica_count: most serving replicas under load (0: the minimum).
        serving_spot: serve on Spot VMs (False: standard VMs).
        endpoint_display_name: display name of the endpoint.
        fallback_to_previous: when the newest step does not verify (torn or corrupted),
            evaluate the newest earlier step that does instead of failing.

    Returns:
        The launch outcome, whether the quality gate passed, the evaluation metrics and the
        checkpoint artifact.
    """
    package = prepare_package(
        source=source,
        staging_uri=staging_uri,
        python_module=python_module,
        check_import=check_import,
        requirements=requirements,
        executor_image_uri=executor_image_uri,
    )
    launch, evaluation = train_evaluate_promote(
        package=package.outputs["package"],
        evaluation_entry_point=evaluation_entry_point,
        evaluation_params=evaluation_params,
        thresholds=thresholds,
        fallback_to_previous=fallback_to_previous,
        allow_foreign_layout=allow_foreign_layout,
        deploy_inputs={
            "project": project,
            "location": location,
            "serving_container_image_uri": serving_container_image_uri,
            "machine_type": serving_machine_type,
            "min_replica_count": serving_min_replica_count,
            "max_replica_count": serving_max_replica_count,
            "spot": serving_spot,
            "endpoint_display_name": endpoint_display_name,
            "api_endpoint": api_endpoint,
        },
        project=project,
        location=location,
        args=training_args,
        executor_image_uri=executor_image_uri,
        machine_type=machine_type,
        accelerator_type=accelerator_type,
        accelerator_count=accelerator_count,
        replica_count=replica_count,
        base_output_directory=base_output_directory,
        max_resubmissions=max_resubmissions,
        fallback_after=fallback_after,
        regions=regions,
        region_policy=region_policy,
        region_buckets=region_buckets,
        api_endpoint=api_endpoint,
    )
    return Outputs(
        outcome=launch.outputs["Output"],
        passed=evaluation.outputs["Output"],
        metrics=evaluation.outputs["metrics"],
        checkpoint=launch.outputs["checkpoint"],
    )
