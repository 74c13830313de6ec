"""KFP interface of ``promote_model``: runs only behind a passing quality gate."""

from kfp.dsl import Input, Metrics, Model, Output

from kfp_spot.components.factory import component


@component
def promote_model(
    model: Input[Model],
    metrics: Input[Metrics],
    promoted_model: Output[Model],
) -> str:
    """Publishes a trained model that passed evaluation.

    Copies the model directory into this task's ``promoted_model`` artifact and writes a
    ``PROMOTION.json`` record with the evaluation evidence (checkpoint step, manifest digest,
    metrics), so a registry or a serving step downstream can trace what it deploys.

    Args:
        promoted_model: Output (see Returns).
        model: the model written by the training job (``AIP_MODEL_DIR``).
        metrics: the evaluation metrics that passed the quality gate.

    Returns:
        Output: The URI of the promoted model (a ``dsl.importer``'s ``artifact_uri`` for GCPC's
            ``ModelUploadOp``, which takes a ``google.UnmanagedContainerModel``).
        promoted_model: the published copy (``system.Model``); metadata ``source`` and the
            evaluation's metrics.
    """
    from kfp_spot.promotion import component_entry

    return component_entry(model=model, metrics=metrics, promoted_model=promoted_model)
