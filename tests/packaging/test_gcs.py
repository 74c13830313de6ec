"""gs:// sources and staging through a local GCS emulator."""

import io
import tarfile
import uuid

import pytest

from kfp_spot import envcache, fs
from kfp_spot.packaging import PackagingError, SourceError
from tests.conftest import TEST_BUCKET
from tests.prepare import prepare_package


def gs(*parts) -> str:
    return fs.join(f"gs://{TEST_BUCKET}", f"pkg-{uuid.uuid4().hex[:8]}", *parts)


def object_info(uri):
    filesystem, path = fs.filesystem(uri)
    filesystem.invalidate_cache()
    return filesystem.info(path)


def test_gs_staging_then_cache_hit_uploads_nothing(gcs_emulator, project, env_cache):
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
    # What was staged installs from the bucket.
    assert envcache.package_env([first.uri], env_cache).exists()


def test_gs_source_archive(gcs_emulator, project, built):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        tf.add(project, arcname="tiny")
    source = gs("src", "tiny.tar.gz")
    filesystem, path = fs.filesystem(source)
    with filesystem.open(path, "wb") as handle:
        handle.write(buffer.getvalue())
    remote = prepare_package(source, gs("staging"))
    assert remote.source_kind == "project+gs+archive"
    assert remote.sha256 == built.sha256


def test_missing_gs_source(gcs_emulator, tmp_path):
    with pytest.raises(SourceError, match=r"source: gs://.*/nothing.tar.gz does not exist"):
        prepare_package(gs("nothing.tar.gz"), str(tmp_path / "stage"))


def test_staging_bucket_that_does_not_exist(gcs_emulator, project):
    with pytest.raises(PackagingError, match=r"staging_uri: cannot write gs://no-such-bucket/"):
        prepare_package(str(project), "gs://no-such-bucket/staging")
