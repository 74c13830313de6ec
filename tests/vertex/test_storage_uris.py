"""Every URI Vertex AI reads leaves kfp-spot as ``gs://``: the deployer's Model ``artifactUri``.

(Package URIs and the base output directory: tests/vertex/test_targets.py and
tests/jobs/test_launcher_gcs.py.)
"""

from __future__ import annotations

import uuid

from kfp_spot import fs, vertex
from kfp_spot.serving.deploy import DeployRequest, _model
from tests.conftest import TEST_BUCKET


def test_a_fuse_model_directory_is_uploaded_as_its_gs_uri(gcs_emulator):
    run = f"models/{uuid.uuid4().hex}"
    filesystem, path = fs.filesystem(f"gs://{TEST_BUCKET}/{run}/model.joblib")
    filesystem.pipe_file(path, b"not really a model")
    model = _model(DeployRequest(artifact_uri=f"/gcs/{TEST_BUCKET}/{run}"), vertex.VERTEX_AI)
    assert model.artifact_uri == f"gs://{TEST_BUCKET}/{run}"
