"""An upload naming a gs:// artifact while Cloud Storage cannot be reached is answered in seconds.

The storage client retries a refused connection for ~30 s and then raises something that is not
FileNotFoundError; the emulator used to wait that out and answer 500. Google's APIs answer 503
UNAVAILABLE for a backend they cannot reach, and so does the emulator, within its bound.
"""

import socket
import time

import gcsfs
import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud.aiplatform_v1.types import Model

from kfp_spot.emulator.serving.models import STORAGE_TIMEOUT_SECONDS
from tests.serving.conftest import PARENT, SKLEARN_IMAGE


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens


@pytest.fixture
def unreachable_storage(monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    gcsfs.GCSFileSystem.clear_instance_cache()  # an instance made for another host is not reused
    yield
    gcsfs.GCSFileSystem.clear_instance_cache()


def test_unreachable_storage_is_503_unavailable_within_seconds(serving, unreachable_storage):
    model = Model(
        display_name="m",
        artifact_uri="gs://kfp-spot-test/m",
        container_spec={"image_uri": SKLEARN_IMAGE},
    )
    start = time.monotonic()
    with pytest.raises(api_exceptions.ServiceUnavailable) as info:
        serving.models.upload_model(parent=PARENT, model=model)
    elapsed = time.monotonic() - start
    # Its own bound, not the storage client's ~30 s of retries; room for a loaded machine.
    assert elapsed < STORAGE_TIMEOUT_SECONDS + 15, elapsed
    message = info.value.message
    assert "gs://kfp-spot-test/m" in message and "Cloud Storage did not answer" in message
    # Nothing was stored: the upload can simply be retried.
    assert list(serving.models.list_models(parent=PARENT)) == []


def test_the_deployer_names_an_unreachable_model_directory_in_one_line(
    unreachable_storage, tmp_path, monkeypatch
):
    from kfp_spot.serving import deploy
    from kfp_spot.serving.deploy import DeployInputError
    from kfp_spot.serving.entry import deploy_spot_endpoint
    from tests.jobs.artifacts import FakeArtifact

    # The deployer's bound (20 s) made short: what is tested is that it holds, not its length.
    monkeypatch.setattr(deploy, "STORAGE_TIMEOUT_SECONDS", 2.0)
    start = time.monotonic()
    with pytest.raises(
        DeployInputError, match="could not be listed: Cloud Storage did not answer within 2 s"
    ) as refused:
        deploy_spot_endpoint(
            project="test-proj",
            artifact_uri="gs://kfp-spot-test/m",
            endpoint=FakeArtifact(uri=str(tmp_path / "e")),
            vertex_model=FakeArtifact(),
            gcp_resources=str(tmp_path / "gcp_resources"),
            api_endpoint="http://127.0.0.1:9",  # never reached: the check comes first
        )
    assert time.monotonic() - start < 2.0 + 15  # its bound, with room for a loaded box (not ~30 s)
    assert refused.value.field == "model" and "\n" not in str(refused.value)
