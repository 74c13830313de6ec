"""The ``evaluate_checkpoint`` pipeline: score an existing checkpoint directory."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Metrics

from kfp_spot.components.evaluate_checkpoint import EvaluateCheckpointOp
from kfp_spot.pipelines.steps import prepare_package


class Outputs(NamedTuple):
    """What the pipeline returns."""

    passed: bool
    metrics: Metrics


@dsl.pipeline(
    name="evaluate-checkpoint-pipeline",
    description="Verifies and scores a committed checkpoint of an earlier training run.",
)
def evaluate_checkpoint(
    source: str,
    checkpoint_uri: str,
    staging_uri: str = "",
    python_module: str = "",
    check_import: bool = False,
    requirements: list = [],
    step: str = "latest",
    evaluation_entry_point: str = "",
    evaluation_params: dict = {},
    thresholds: dict = {},
    allow_foreign_layout: bool = False,
    fallback_to_previous: bool = False,
) -> Outputs:
    """Scores the checkpoint at ``checkpoint_uri`` with the package's evaluation function.

    Args:
        source: training code whose evaluation entry point scores the checkpoint.
        checkpoint_uri: a checkpoint directory (``.../checkpoints``) of an earlier run.
        staging_uri: where the built package is staged; empty: next to outputs.
        python_module: the package's training module (checked to exist in the package);
            empty: the package's own (``[tool.kfp-spot] python-module``, else its ``*.task``).
        check_import: import the module before staging, in an environment holding only
            what the executor image provides and the package's declared requirements.
        requirements: dependencies of a script or bare package source (PEP 508 strings, e.g.
            ``["pyyaml>=6"]``), installed with it for the evaluation; a project declares its
            own in its pyproject.toml/setup.py (giving them for a project is an error).
        step: ``latest``, a step number, or ``best:<metric>``.
        evaluation_entry_point: ``module:function`` that scores a checkpoint; empty: the
            package's ``[tool.kfp-spot] evaluation-entry-point``, else
            ``trainer.evaluate:evaluate``.
        evaluation_params: keyword parameters for the evaluation function.
        thresholds: metric → bound; ``passed`` is true when all hold.
        allow_foreign_layout: score a directory without kfp-spot steps (a trainer's own files)
            as a whole, unverified.
        fallback_to_previous: when the newest step does not verify (torn or corrupted),
            evaluate the newest earlier step that does instead of failing.

    Returns:
        Whether the thresholds hold, and the metrics.
    """
    checkpoint = dsl.importer(
        artifact_uri=checkpoint_uri, artifact_class=Artifact, reimport=False
    ).set_display_name("import-checkpoint")
    package = prepare_package(
        source=source,
        staging_uri=staging_uri,
        python_module=python_module,
        check_import=check_import,
        requirements=requirements,
    )
    evaluation = EvaluateCheckpointOp(
        checkpoint=checkpoint.output,
        package=package.outputs["package"],
        entry_point=evaluation_entry_point,
        params=evaluation_params,
        step=step,
        thresholds=thresholds,
        allow_foreign_layout=allow_foreign_layout,
        fallback_to_previous=fallback_to_previous,
    ).set_display_name("evaluate-checkpoint")
    # Not cached: the imported directory keeps its URI as it gains steps, so a rerun with the same
    # parameters would replay the metrics of the step evaluated the first time.
    evaluation.set_caching_options(False)
    return Outputs(passed=evaluation.outputs["Output"], metrics=evaluation.outputs["metrics"])
