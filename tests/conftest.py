"""Shared fixtures: a local GCS emulator (gcp-storage-emulator) on a free loopback port, and
kfp.local passing GCPC's pipeline placeholders through (as ``kfp-spot run`` has it)."""

from __future__ import annotations

import os
import socket

import pytest

TEST_BUCKET = "kfp-spot-test"


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session", autouse=True)
def _gcp_placeholders_as_text():
    """kfp.local cannot parse the launch component's GCPC placeholder defaults without it.

    See kfp_spot.pipelines.local_placeholders; tests/jobs/test_pipeline_placeholders.py shows
    kfp.local failing without it.
    """
    from kfp_spot.pipelines.local_placeholders import gcp_placeholders_as_text

    with gcp_placeholders_as_text():
        yield


@pytest.fixture(scope="session")
def gcs_emulator():
    """A GCS emulator with bucket ``kfp-spot-test``; STORAGE_EMULATOR_HOST points at it.

    Yields the emulator's base URL. gcsfs and google-cloud-storage both honour the variable.
    """
    from gcp_storage_emulator.server import create_server

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=TEST_BUCKET)
    server.start()
    saved = {k: os.environ.get(k) for k in ("STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT")}
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    os.environ.setdefault("GOOGLE_CLOUD_PROJECT", "kfp-spot-test")
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
