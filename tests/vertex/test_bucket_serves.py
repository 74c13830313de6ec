"""Which regions a bucket's data lives in (or over): what region failover copies for."""

from __future__ import annotations

import pytest

from kfp_spot.vertex import bucket_serves


@pytest.mark.parametrize(
    ("location", "region", "data_locations", "serves"),
    [
        ("US", "us-central1", (), True),
        ("US", "europe-west4", (), False),
        ("EU", "europe-west4", (), True),
        ("EU", "europe-west2", (), False),  # London is not in the EU multi-region
        ("nam4", "us-east1", (), True),
        ("NAM4", "us-west1", (), False),
        ("EUROPE-WEST4", "europe-west4", (), True),
        ("US-CENTRAL1", "europe-west4", (), False),
        ("US", "us-west1", ("US-CENTRAL1", "US-EAST1"), False),  # configurable dual-region
        ("US", "us-east1", ("US-CENTRAL1", "US-EAST1"), True),
        ("LOCAL", "asia-east1", (), True),  # a local directory: on this machine
    ],
)
def test_bucket_serves(location, region, data_locations, serves):
    assert bucket_serves(location, region, data_locations) is serves
