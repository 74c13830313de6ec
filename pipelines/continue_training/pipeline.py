"""The ``continue_training`` pipeline: resume training from an earlier run's checkpoint."""

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
    name="continue-training",
    description=(
        "Resumes training on Spot VMs from the checkpoint directory of an earlier run (for "
        "instance one that ran out of Spot capacity or budget), then evaluates and gates."
    ),
)
def continue_training(
    source: str,
    checkpoint_uri: str,
    project: str = PROJECT_ID_PLACEHOLDER,
    location: str = LOCATION_PLACEHOLDER,
    staging_uri: str = "",
    python_module: str = "",
    check_import: bool = False,
    requirements: list = [],
    training_args: list = [],
    machine_type: str = "n1-standard-4",
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
    fallback_to_previous: bool = False,
) -> Outputs:
    """Continues training from ``checkpoint_uri`` and evaluates the result.

    Args:
        source: training code (as for ``spot_training``).
        checkpoint_uri: the earlier run's checkpoint directory (``.../checkpoints``).
        project: Google Cloud project that runs the CustomJob; default: the pipeline's.
        location: Vertex AI region of the CustomJob; default: the pipeline's region.
        staging_uri: where the built package is staged; empty: next to outputs.
        python_module: module the job runs with ``python -m``; empty: the package's own
            (``[tool.kfp-spot] python-module`` in its pyproject.toml, else its one ``*.task``).
        check_import: import the module before staging, in an environment holding only
            what the executor image provides and the package's declared requirements, so
            an import typo or a missing requirement fails here, before a paid VM starts.
        requirements: dependencies of a script or bare package source (PEP 508 strings, e.g.
            ``["pyyaml>=6"]``), installed on the training VM with it; a project declares its
            own in its pyproject.toml/setup.py (giving them for a project is an error).
        training_args: arguments passed to the training module.
        machine_type: Compute Engine machine type.
        base_output_directory: the new job's output root; empty: next to this run's outputs.
        max_resubmissions: new CustomJobs after the service's Spot restarts are exhausted.
        fallback_after: exhausted Spot submissions before falling back to standard VMs.
        regions: regions to run Spot jobs in, in order (empty: only ``location``); a region out
            of Spot capacity hands on to the next, which resumes from the newest checkpoint.
        region_policy: ``STAY`` (leave a region once it is out of Spot capacity) or ``EAGER``
            (also at its first preemption).
        region_buckets: region -> ``gs://`` directory in that region, for regions the base
            output directory's bucket does not serve (the checkpoint is copied and verified).
        api_endpoint: Vertex AI API endpoint; ``http://127.0.0.1:PORT`` for the emulator.
        evaluation_entry_point: ``module:function`` that scores a checkpoint; empty: the
            package's ``[tool.kfp-spot] evaluation-entry-point``, else
            ``trainer.evaluate:evaluate``.
        evaluation_params: keyword parameters for the evaluation function.
        thresholds: metric → bound; all must hold to promote.
        fallback_to_previous: when the newest step does not verify (torn or corrupted),
            evaluate the newest earlier step that does instead of failing.

    Returns:
        The launch outcome, the gate result, the metrics and the new checkpoint artifact.
    """
    previous = dsl.importer(
        artifact_uri=checkpoint_uri, artifact_class=Artifact, reimport=False
    ).set_display_name("import-checkpoint")
    package = prepare_package(
        source=source,
        staging_uri=staging_uri,
        python_module=python_module,
        check_import=check_import,
        requirements=requirements,
    )
    launch, evaluation = train_evaluate_promote(
        package=package.outputs["package"],
        resume_from=previous.output,
        evaluation_entry_point=evaluation_entry_point,
        evaluation_params=evaluation_params,
        thresholds=thresholds,
        fallback_to_previous=fallback_to_previous,
        project=project,
        location=location,
        args=training_args,
        machine_type=machine_type,
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
