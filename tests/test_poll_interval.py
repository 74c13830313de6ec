"""A poll interval Vertex AI's quota cannot bear is refused by every component that polls.

Each poll is a read counted against the project's 600 resource-management requests a minute in
the region, shared by every pipeline there: ``poll_interval_seconds=0.0001`` asked Vertex AI ten
thousand times a second. The local emulator takes any interval (the suite polls it every 0.05 s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kfp_spot.vertex.client import VERTEX_MIN_POLL_SECONDS
from tests.jobs.artifacts import FakeArtifact

EMULATOR = "http://127.0.0.1:9"  # nothing listens: the checks come before any call
SAYS = "give 0 (a gentle schedule of its own) or at least 5 s"


def _launch_inputs(tmp_path: Path, seconds: float, **given: Any) -> dict[str, Any]:
    package = FakeArtifact(
        uri="gs://bucket/pkg/trainer-0.1.tar.gz",
        metadata={"python_module": "trainer.task", "sha256": "0" * 64},
    )
    return {
        "project": "test-proj",
        "location": "us-central1",
        "package": package,
        "checkpoint": FakeArtifact(uri="gs://bucket/run/checkpoint"),
        "gcp_resources": str(tmp_path / "gcp_resources"),
        "poll_interval_seconds": seconds,
        **given,
    }


@pytest.mark.parametrize("seconds", [0.0001, 4.9])
def test_launch_refuses_a_poll_too_often_for_vertex_ai_and_the_emulator_takes_it(
    tmp_path: Path, seconds: float
):
    from kfp_spot.jobs.entry import build_request
    from kfp_spot.jobs.inputs import LaunchInputError

    with pytest.raises(LaunchInputError) as info:
        build_request(**_launch_inputs(tmp_path, seconds))  # no api_endpoint: Vertex AI
    assert info.value.field == "poll_interval_seconds"
    assert SAYS in str(info.value)
    local = build_request(**_launch_inputs(tmp_path, seconds, api_endpoint=EMULATOR))
    assert local.poll_interval_seconds == seconds
    least = build_request(**_launch_inputs(tmp_path, VERTEX_MIN_POLL_SECONDS))
    assert least.poll_interval_seconds == VERTEX_MIN_POLL_SECONDS == 5


def test_deploy_refuses_a_poll_too_often_for_vertex_ai(tmp_path: Path):
    from kfp_spot.serving.deploy import DeployInputError
    from kfp_spot.serving.entry import deploy_spot_endpoint

    with pytest.raises(DeployInputError) as info:
        deploy_spot_endpoint(
            project="test-proj",
            location="us-central1",
            model=FakeArtifact(uri="gs://bucket/model"),
            endpoint=FakeArtifact(uri=str(tmp_path / "e")),
            vertex_model=FakeArtifact(),
            gcp_resources=str(tmp_path / "gcp_resources"),
            poll_interval_seconds=0.5,
        )
    assert info.value.field == "poll_interval_seconds"
    assert SAYS in str(info.value)
    assert not (tmp_path / "gcp_resources").exists()
