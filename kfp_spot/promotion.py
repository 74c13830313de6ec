"""Runtime of the ``promote_model`` component: publish a model that passed its quality gate."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping
from typing import Any

from kfp_spot import fs, vertex
from kfp_spot.artifacts import Artifact
from kfp_spot.validation.inputs import report_input_errors

log = logging.getLogger(__name__)

RECORD_NAME = "PROMOTION.json"
SOURCE_KEY = "source"
"""The promoted model's metadata key holding the URI it was copied from (always that URI)."""
_URI_FORM = "a gs:// URI or a local path"


class PromotionInputError(ValueError):
    """An input of promote_model is invalid; names the input and what would be valid."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"promote_model input {field_name!r}: {message}")
        self.field = field_name
        self.reason = message


def _check_uri(name: str, uri: Any) -> str:
    if not isinstance(uri, str) or not uri:
        raise PromotionInputError(name, f"has no URI; expected {_URI_FORM}")
    try:
        vertex.check_text(uri)
    except vertex.InvalidValueError as exc:
        raise PromotionInputError(name, str(exc)) from None
    if fs.is_remote(uri) and not uri.startswith("gs://"):
        raise PromotionInputError(name, f"{vertex.show(uri)} is not {_URI_FORM}")
    return uri


def _within(path: str, root: str) -> bool:
    path, root = path.rstrip("/"), root.rstrip("/")
    return path == root or path.startswith(f"{root}/")


def check_inputs(model_uri: Any, destination_uri: Any, evidence: Any) -> None:
    """Check promote_model's inputs before anything is copied.

    Raises:
        PromotionInputError: naming the input and the valid form.
    """
    _check_uri("model", model_uri)
    _check_uri("promoted_model", destination_uri)
    if not isinstance(evidence, Mapping):
        raise PromotionInputError(
            "metrics", f"expected metrics metadata (a dict), got {type(evidence).__name__}"
        )
    src_fs, src = fs.filesystem(model_uri)
    dst_fs, dst = fs.filesystem(destination_uri)
    if type(src_fs) is type(dst_fs) and (_within(dst, src) or _within(src, dst)):
        raise PromotionInputError(
            "promoted_model",
            f"{destination_uri!r} overlaps the model directory {model_uri!r}; expected a "
            "directory outside it (the component's own output artifact)",
        )
    if src_fs.isfile(src):
        raise PromotionInputError(
            "model",
            f"{model_uri!r} is a file; expected the training job's model directory "
            "(AIP_MODEL_DIR) holding the saved model",
        )
    if not src_fs.exists(src) or not src_fs.find(src):
        raise PromotionInputError(
            "model",
            f"{model_uri!r} is missing or empty; expected the training job's model directory "
            "(AIP_MODEL_DIR) holding the saved model",
        )


def _model_files(model_uri: str) -> list[str]:
    """Every file of the model directory, through links to directories (as ``cp -rL``).

    fsspec's ``find`` lists a local link to a directory as an entry of its own without
    descending into it; its files are the model's too. A link back into a directory already
    listed would copy forever: refused, naming it.
    """
    src_fs, src = fs.filesystem(model_uri)
    local = not fs.is_remote(model_uri)
    seen = {os.path.realpath(src)} if local else set()
    files: list[str] = []
    pending = [src]
    while pending:
        for path in src_fs.find(pending.pop()):
            if not (local and src_fs.isdir(path)):
                files.append(path)
                continue
            real = os.path.realpath(path)
            if real in seen:
                raise PromotionInputError(
                    "model",
                    f"{model_uri!r} holds {path!r}, a link back to {real!r} (a loop); expected "
                    "a model directory without links to itself",
                )
            seen.add(real)
            pending.append(path)
    return files


def _strict_json(value: Any) -> Any:
    """``value`` with every non-finite float as its text (``"nan"``, ``"inf"``), nested too.

    ``PROMOTION.json`` is read by registries and tools in other languages, whose JSON has no
    ``NaN`` or ``Infinity``; the evaluation writes such a metric's metadata the same way.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {key: _strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict_json(item) for item in value]
    return value


def promote(model_uri: str, destination_uri: str, evidence: Mapping[str, Any]) -> str:
    """Copy the model directory to ``destination_uri`` and write a promotion record beside it.

    Args:
        model_uri: directory of the trained model (``AIP_MODEL_DIR`` of the job).
        destination_uri: where the promoted copy goes (local path or ``gs://``).
        evidence: why it was promoted: the evaluated checkpoint step, manifest digest, metrics.

    Returns:
        The destination URI.

    Raises:
        PromotionInputError: an input is invalid, or the model directory is empty or missing
            (nothing is copied).
    """
    check_inputs(model_uri, destination_uri, evidence)
    files = _model_files(model_uri)
    src_fs, src = fs.filesystem(model_uri)
    dst_fs, dst = fs.filesystem(destination_uri)
    dst_fs.makedirs(dst, exist_ok=True)
    for path in files:
        rel = path[len(src.rstrip("/")) + 1 :]
        target = f"{dst.rstrip('/')}/{rel}"
        dst_fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        with src_fs.open(path, "rb") as reader, dst_fs.open(target, "wb") as writer:
            writer.write(reader.read())
    record = {SOURCE_KEY: model_uri, "promoted_at": time.time(), "evidence": dict(evidence)}
    fs.atomic_write(
        fs.join(destination_uri, RECORD_NAME),
        json.dumps(_strict_json(record), indent=1, sort_keys=True, default=str, allow_nan=False),
    )
    return destination_uri


def promoted_metadata(model_uri: str, evidence: Mapping[str, Any]) -> dict[str, Any]:
    """The promoted model artifact's metadata: ``source`` (the model's URI) and the metrics.

    ``source`` always names the model that was copied, as downstream steps trace it. A metric
    of that name is kept as ``metric_source`` (``metric_metric_source`` if that is taken too,
    and so on), never dropped, and a warning names the key it went to; ``PROMOTION.json``
    keeps every metric under ``evidence`` with its own name.
    """
    out: dict[str, Any] = {SOURCE_KEY: model_uri}
    clashing = SOURCE_KEY in evidence
    for key, value in evidence.items():
        if key != SOURCE_KEY:
            out[key] = value
    if clashing:
        renamed = f"metric_{SOURCE_KEY}"
        while renamed in out:
            renamed = f"metric_{renamed}"
        out[renamed] = evidence[SOURCE_KEY]
        log.warning(
            "promote_model: the metrics hold a key %r, which the promoted model's metadata keeps "
            "for the model's URI; the metric is published as %r (PROMOTION.json keeps it as %r "
            "under 'evidence')",
            SOURCE_KEY,
            renamed,
            SOURCE_KEY,
        )
    return out


def component_entry(model: Artifact, metrics: Artifact, promoted_model: Artifact) -> str:
    """Adapter for the KFP component: artifacts in, artifact out (duck-typed, no kfp import).

    In a KFP task a bad input ends the task with one line naming it (no traceback).
    """
    with report_input_errors(PromotionInputError):
        evidence = getattr(metrics, "metadata", None)
        if not isinstance(evidence, Mapping):
            raise PromotionInputError("metrics", "expected a Metrics artifact with metadata")
        evidence = dict(evidence)
        promote(getattr(model, "uri", ""), getattr(promoted_model, "uri", ""), evidence)
    promoted_model.metadata.update(promoted_metadata(model.uri, evidence))
    return promoted_model.uri
