"""Fixtures for the trainer tests: a local GCS emulator."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[str]:
    """A gcp-storage-emulator on a free 127.0.0.1 port, with bucket ``kfp-spot-test``.

    Yields the bucket URI prefix and points ``STORAGE_EMULATOR_HOST`` at the server.
    """
    from gcp_storage_emulator.server import create_server

    server = create_server("127.0.0.1", 0, in_memory=True, default_bucket="kfp-spot-test")
    server.start()
    port = server._api._httpd.server_address[1]  # port 0: the OS chose it
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    old = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    try:
        yield "gs://kfp-spot-test"
    finally:
        if old is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = old
        server.stop()
