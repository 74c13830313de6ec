"""A replica pool whose replica cannot be started fails its deployment instead of dying."""

from __future__ import annotations

import sys
import threading

from kfp_spot.emulator.policy import PreemptionPolicy
from kfp_spot.emulator.serving.pool import (
    PoolIdentity,
    PoolSettings,
    ReplicaLaunch,
    ReplicaPool,
)
from kfp_spot.emulator.serving.store import ServingStore


def test_a_value_no_process_can_be_given_fails_the_deployment(tmp_path):
    # Popen raises ValueError for a NUL in the environment; the pool's thread caught only
    # OSError, so it died and the deployment stayed in progress for ever.
    store = ServingStore(tmp_path / "serving.sqlite")
    settings = PoolSettings(store, PreemptionPolicy(), 0.1, 0.1, 0.0, tmp_path / "logs")
    identity = PoolIdentity("7", "1", 1, 1, "n1-standard-4", True, 0.01, 0.05)
    launch = ReplicaLaunch(
        lambda _port: [sys.executable, "-c", "pass"], {"BAD": "a\x00b"}, "/health", "/predict"
    )
    failed: list[str] = []
    done = threading.Event()

    def on_failed(message: str) -> None:
        failed.append(message)
        done.set()

    pool = ReplicaPool(settings, identity, launch, on_ready=done.set, on_failed=on_failed)
    pool.start()
    try:
        assert done.wait(30), "the pool neither failed nor became ready"
    finally:
        pool.stop("FAILED", 0.0)
        store.close()
    assert failed == ["The replicas could not be started: embedded null byte"]
