"""Runtime of the ``promote_model`` component: publish a model that passed its quality gate."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from kfp_spot import fs

RECORD_NAME = "PROMOTION.json"


def promote(model_uri: str, destination_uri: str, evidence: Mapping[str, Any]) -> str:
    """Copy the model directory to ``destination_uri`` and write a promotion record beside it.

    Args:
        model_uri: directory of the trained model (``AIP_MODEL_DIR`` of the job).
        destination_uri: where the promoted copy goes (local path or ``gs://``).
        evidence: why it was promoted: the evaluated checkpoint step, manifest digest, metrics.

    Returns:
        The destination URI.

    Raises:
        FileNotFoundError: the model directory is empty or missing.
    """
    if not model_uri:
        raise ValueError("model_uri is empty: connect the launch step's `model` output")
    src_fs, src = fs.filesystem(model_uri)
    if not src_fs.exists(src) or not src_fs.find(src):
        raise FileNotFoundError(f"model directory {model_uri!r} is missing or empty")
    dst_fs, dst = fs.filesystem(destination_uri)
    dst_fs.makedirs(dst, exist_ok=True)
    for path in src_fs.find(src):
        rel = path[len(src.rstrip("/")) + 1 :]
        target = f"{dst.rstrip('/')}/{rel}"
        dst_fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        with src_fs.open(path, "rb") as reader, dst_fs.open(target, "wb") as writer:
            writer.write(reader.read())
    record = {"source": model_uri, "promoted_at": time.time(), "evidence": dict(evidence)}
    with dst_fs.open(f"{dst.rstrip('/')}/{RECORD_NAME}", "wb") as handle:
        handle.write(json.dumps(record, indent=1, sort_keys=True, default=str).encode())
    return destination_uri


def component_entry(model: Any, metrics: Any, promoted_model: Any) -> str:
    """Adapter for the KFP component: artifacts in, artifact out (duck-typed, no kfp import)."""
    evidence = {key: value for key, value in dict(metrics.metadata).items()}
    promote(model.uri, promoted_model.uri, evidence)
    promoted_model.metadata.update({"source": model.uri, **evidence})
    return promoted_model.uri
