"""gs:// sources, staging and checkpoints through a local GCS emulator."""

import io
import json
import tarfile
import uuid

import pytest

from kfp_spot import checkpoints, envcache, fs
from kfp_spot.checkpoints import CheckpointCorruptError
from kfp_spot.evaluation import evaluate
from kfp_spot.packaging import SourceError, prepare_package
from tests.conftest import TEST_BUCKET


def gs(*parts) -> str:
    return fs.join(f"gs://{TEST_BUCKET}", f"pkg-{uuid.uuid4().hex[:8]}", *parts)


def object_info(uri):
    filesystem, path = fs.filesystem(uri)
    filesystem.invalidate_cache()
    return filesystem.info(path)


def test_gs_staging_then_cache_hit_uploads_nothing(gcs_emulator, project):
    staging = gs("staging")
    first = prepare_package(str(project), staging)
    assert first.uri == f"{staging}/tiny-trainer/{first.sha256}/tiny_trainer-1.2.3.tar.gz"
    before = object_info(first.uri)
    assert before["size"] == first.size
    second = prepare_package(str(project), staging)
    after = object_info(second.uri)
    assert second.cache_hit and second.uri == first.uri
    # Every upload makes a new object generation; the same one means nothing was written.
    assert before["generation"] and after["generation"] == before["generation"]


def test_gs_source_archive(gcs_emulator, project, tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        tf.add(project, arcname="tiny")
    source = gs("src", "tiny.tar.gz")
    filesystem, path = fs.filesystem(source)
    with filesystem.open(path, "wb") as handle:
        handle.write(buffer.getvalue())
    local = prepare_package(str(project), str(tmp_path / "stage"))
    remote = prepare_package(source, gs("staging"))
    assert remote.source_kind == "project+gs+archive"
    assert remote.sha256 == local.sha256


def test_missing_gs_source(gcs_emulator, tmp_path):
    with pytest.raises(SourceError, match=r"source: gs://.*/nothing.tar.gz does not exist"):
        prepare_package(gs("nothing.tar.gz"), str(tmp_path / "stage"))


def test_package_staged_on_gs_installs(gcs_emulator, project, env_cache, tmp_path):
    info = prepare_package(str(project), gs("staging"))
    python = envcache.package_env([info.uri], env_cache)
    assert python.exists()


def test_evaluation_of_a_gs_checkpoint_downloads_and_verifies(
    gcs_emulator, project, env_cache, tmp_path
):
    info = prepare_package(str(project), gs("staging"))
    root = gs("run", "checkpoints")
    for step, accuracy in ((4, 0.7), (8, 0.93)):
        data = json.dumps({"accuracy": accuracy, "step": step}).encode()
        checkpoints.write_step(root, step, {"model.json": data}, metadata={"accuracy": accuracy})
    result = evaluate(
        root,
        list(info.package_uris),
        entry_point="tinytrainer.evaluate:evaluate",
        thresholds={"accuracy": ">=0.9"},
        cache_dir=env_cache,
    )
    assert result.step == 8 and result.metrics["seen_step"] == 8 and result.passed
    # Corrupt the latest step in the bucket: refused, or the previous step with fallback.
    filesystem, path = fs.filesystem(fs.join(root, "step-8", "model.json"))
    with filesystem.open(path, "wb") as handle:
        handle.write(b'{"accuracy": 1.0, "step": 8}')
    with pytest.raises(CheckpointCorruptError, match=r"latest checkpoint step-8 .*model\.json"):
        evaluate(root, list(info.package_uris), entry_point="tinytrainer.evaluate:evaluate")
    fallback = evaluate(
        root,
        list(info.package_uris),
        entry_point="tinytrainer.evaluate:evaluate",
        fallback_to_previous=True,
        cache_dir=env_cache,
    )
    assert fallback.step == 4 and fallback.metrics["seen_step"] == 4
