"""Fixtures for the trainer tests: the suite's GCS emulator, as a bucket URI."""

from __future__ import annotations

import pytest

from tests.conftest import TEST_BUCKET


@pytest.fixture(scope="session")
def gs_bucket(gcs_emulator: str) -> str:
    """``gs://`` URI of the GCS emulator's default bucket (one emulator per worker process:
    a second one would repoint ``STORAGE_EMULATOR_HOST`` under the tests that use the first)."""
    return f"gs://{TEST_BUCKET}"
