"""A checkpoint on gs:// (local GCS emulator) is downloaded, verified and scored."""

import json
import uuid

import pytest

from kfp_spot import checkpoints, fs
from kfp_spot.checkpoints import CheckpointCorruptError
from kfp_spot.evaluation import evaluate
from tests.conftest import TEST_BUCKET

ENTRY = "tinytrainer.evaluate:evaluate"


def test_gs_checkpoint_is_verified_and_scored(gcs_emulator, package, env_cache):
    root = fs.join(f"gs://{TEST_BUCKET}", f"eval-{uuid.uuid4().hex[:8]}", "checkpoints")
    for step, accuracy in ((4, 0.7), (8, 0.93)):
        data = json.dumps({"accuracy": accuracy, "step": step}).encode()
        checkpoints.write_step(root, step, {"model.json": data}, metadata={"accuracy": accuracy})
    uris = list(package.package_uris)
    result = evaluate(
        root, uris, entry_point=ENTRY, thresholds={"accuracy": ">=0.9"}, cache_dir=env_cache
    )
    assert result.step == 8 and result.metrics["seen_step"] == 8 and result.passed
    # Corrupt the latest step in the bucket: refused, or the previous step with fallback.
    filesystem, path = fs.filesystem(fs.join(root, "step-8", "model.json"))
    with filesystem.open(path, "wb") as handle:
        handle.write(b'{"accuracy": 1.0, "step": 8}')
    with pytest.raises(CheckpointCorruptError, match=r"latest checkpoint step-8 .*model\.json"):
        evaluate(root, uris, entry_point=ENTRY, cache_dir=env_cache)
    fallback = evaluate(
        root, uris, entry_point=ENTRY, fallback_to_previous=True, cache_dir=env_cache
    )
    assert fallback.step == 4 and fallback.metrics["seen_step"] == 4
    assert fallback.skipped[0][0] == 8
