"""KFP interface of ``evaluate_checkpoint``: the runtime is :mod:`kfp_spot.evaluation`."""

from kfp.dsl import Artifact, ClassificationMetrics, Input, Markdown, Metrics, Output

from kfp_spot.components.factory import component


@component
def evaluate_checkpoint(
    checkpoint: Input[Artifact],
    package: Input[Artifact],
    metrics: Output[Metrics],
    classification_metrics: Output[ClassificationMetrics],
    report: Output[Markdown],
    entry_point: str = "",
    params: dict = {},
    step: str = "latest",
    thresholds: dict = {},
    fallback_to_previous: bool = False,
    allow_foreign_layout: bool = False,
) -> bool:
    """Verifies a checkpoint step and scores it with the training package's evaluate().

    The step's manifest (every file's size and sha256) is verified before anything loads it; a
    torn or corrupted step is an error that says so, unless ``fallback_to_previous``. The package
    is installed into an environment cached by its sha256 and the entry point is called there as
    ``evaluate(checkpoint_dir: str, params: dict) -> dict`` with a local copy of the step.

    Args:
        metrics: Output (see Returns).
        classification_metrics: Output (see Returns).
        report: Output (see Returns).
        checkpoint: the checkpoint root (``<base>/checkpoints``) from launch_spot_job; metadata
            ``latest_step`` names the latest committed step.
        package: the training package from prepare_package (metadata ``package_uris``).
        entry_point: ``module:function`` in the package; empty: the one the package names in
            its pyproject.toml (``[tool.kfp-spot] evaluation-entry-point``, recorded by
            prepare_package), else ``trainer.evaluate:evaluate``.
        params: keyword parameters for evaluate() (JSON values).
        step: ``latest``, a step number such as ``"40"``, or ``best:<metric>[:max|:min]`` over
            the metrics recorded in the manifests' metadata.
        thresholds: metric → bound: ``">=0.9"``, ``"<=0.5"``, ``">0"``, ``"==1"``, or a number
            meaning ``>=``. Every bound must hold for ``passed``.
        fallback_to_previous: when the chosen step does not verify, evaluate the newest earlier
            step that does (the report lists what was passed over).
        allow_foreign_layout: evaluate a checkpoint directory that holds no kfp-spot steps
            (a trainer's own files) as it is: the entry point gets the whole directory and the
            metrics say ``checkpoint_layout: foreign``, ``checkpoint_verified: false``. Off, such
            a directory is an error that names the layout expected and what was found.

    Returns:
        Output: Whether every threshold held (True without thresholds), to gate on with
            ``dsl.If(task.outputs["Output"] == True)``.
        metrics: the metrics evaluate() returned, plus checkpoint_step,
            checkpoint_manifest_sha256, checkpoint_uri and passed.
        classification_metrics: the confusion matrix, when evaluate() returns
            ``confusion_matrix`` (``{"labels": [...], "matrix": [[...]]}``).
        report: a Markdown report: what was evaluated, metrics, thresholds, confusion matrix.
    """
    from kfp_spot.evaluation import component_entry

    return component_entry(
        checkpoint=checkpoint,
        package=package,
        metrics=metrics,
        classification_metrics=classification_metrics,
        report=report,
        entry_point=entry_point,
        params=params,
        step=step,
        thresholds=thresholds,
        fallback_to_previous=fallback_to_previous,
        allow_foreign_layout=allow_foreign_layout,
    )
