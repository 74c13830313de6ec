"""The adapter between the ``evaluate_checkpoint`` component and :func:`evaluate`."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import Any

from kfp_spot.artifacts import Artifact
from kfp_spot.checkpoints import CheckpointError
from kfp_spot.evaluation.core import evaluate
from kfp_spot.evaluation.entry_point import resolve_entry_point
from kfp_spot.evaluation.errors import EvaluationError, EvaluationInputError
from kfp_spot.evaluation.report import render
from kfp_spot.validation.component_inputs import InputReader
from kfp_spot.vertex.values import show

log = logging.getLogger(__name__)


def latest_step_of(metadata: Mapping[str, Any] | None) -> int | None:
    """The ``latest_step`` a checkpoint artifact records (kfp.local returns ints as floats)."""
    value = (metadata or {}).get("latest_step")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return int(value) if value >= 0 else None


def _package_uris(read: InputReader, value: Any) -> list[str]:
    """The ``package_uris`` of the package artifact's metadata; else an error naming that field."""
    try:
        return read.as_strings("package", value)
    except EvaluationInputError as exc:
        reason = str(exc).removeprefix("package: ")
        raise EvaluationInputError(
            "package",
            "metadata package_uris must be a list of the package's gs:// URIs or local paths (or "
            f'its JSON text), e.g. ["gs://BUCKET/trainer-0.1.tar.gz"]; got {show(value)}: {reason}',
        ) from None


def component_entry(
    *,
    checkpoint: Artifact,
    package: Artifact,
    metrics: Artifact,
    classification_metrics: Artifact,
    report: Artifact,
    entry_point: str = "",
    params: dict[str, Any] | None = None,
    step: str = "latest",
    thresholds: dict[str, Any] | None = None,
    fallback_to_previous: bool = False,
    allow_foreign_layout: bool = False,
) -> bool:
    """Run :func:`evaluate` for the component and fill its output artifacts.

    Args:
        checkpoint: input artifact; ``.uri`` is the checkpoint root, ``metadata["latest_step"]``
            the step the launcher saw committed last.
        package: input artifact; ``metadata["package_uris"]`` (else ``.uri``) are installed.
        metrics: output Metrics artifact (metadata: metric → value, plus checkpoint_step,
            checkpoint_manifest_sha256, checkpoint_uri, passed).
        classification_metrics: output ClassificationMetrics (``confusionMatrix``) when the
            entry point returns a confusion matrix.
        report: output Markdown artifact, written to ``report.path``.
        entry_point: ``module:function``; empty: the package's own (``[tool.kfp-spot]
            evaluation-entry-point``, in ``package.metadata["evaluation_entry_point"]``, else
            read from the package's sdist as :func:`evaluate` does), else
            ``trainer.evaluate:evaluate`` (``entry_point.resolve_entry_point``).
        params: see :func:`evaluate`.
        step: see :func:`evaluate`.
        thresholds: see :func:`evaluate`.
        fallback_to_previous: see :func:`evaluate`.
        allow_foreign_layout: see :func:`evaluate`.

    Returns:
        Whether every threshold held.

    Raises:
        SystemExit: with one line that says what is wrong (a bad input, no usable checkpoint,
            a failing entry point), instead of a traceback.
    """
    if (
        not logging.getLogger().handlers
    ):  # the task log shows the step chosen and evaluate()'s output
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    package_meta = dict(package.metadata or {})
    try:
        # A list reaches the metadata as JSON text where kfp.local passed it through a string.
        read = InputReader({}, {}, EvaluationInputError)
        package_uris = _package_uris(read, package_meta.get("package_uris")) or [package.uri]
        # The parameters as KFP hands them over (a dict as its JSON text too, booleans as
        # "true"/"false"), each refused in one line naming it otherwise.
        given = InputReader(
            {
                "params": params,
                "thresholds": thresholds,
                "fallback_to_previous": fallback_to_previous,
                "allow_foreign_layout": allow_foreign_layout,
            },
            {
                "params": {},
                "thresholds": {},
                "fallback_to_previous": False,
                "allow_foreign_layout": False,
            },
            EvaluationInputError,
        )
        result = evaluate(
            checkpoint.uri,
            package_uris,
            entry_point=resolve_entry_point(entry_point, package_meta),
            params=given.json_value("params", dict),
            step=step,
            thresholds=given.json_value("thresholds", dict),
            fallback_to_previous=given.boolean("fallback_to_previous"),
            latest_step=latest_step_of(checkpoint.metadata),
            allow_foreign_layout=given.boolean("allow_foreign_layout"),
        )
    except (EvaluationInputError, CheckpointError, EvaluationError) as exc:
        # The message says what is wrong and what would fix it; a traceback would bury it.
        log.error("evaluate_checkpoint: %s", exc)
        raise SystemExit(f"evaluate_checkpoint: {exc}") from None
    metrics.metadata.update(result.metrics_metadata())
    matrix = result.confusion_matrix_metadata()
    if matrix is not None:
        classification_metrics.metadata["confusionMatrix"] = matrix
    os.makedirs(os.path.dirname(report.path) or ".", exist_ok=True)
    with open(report.path, "w", encoding="utf-8") as handle:
        handle.write(render(result, package_meta))
    return result.passed
