"""Load on a Spot endpoint of the local emulator while its replicas are preempted; prints figures.

Deploys a scikit-learn model (model.joblib, the prebuilt sklearn image) on ``--replicas`` Spot
replicas, then for ``--seconds`` sends predictions from ``--concurrency`` threads over keep-alive
loopback connections while, every ``--preempt-every`` seconds, one running replica (picked with
``--seed``) is preempted: SIGTERM, the grace period, SIGKILL; it comes back after
``--restart-delay`` seconds plus its own start (process start, model load, health check).

Prints: requests sent, the share answered, p50/p99 latency of answered requests, the failures by
status, the outage time (the 100 ms windows in which requests failed and none was answered), the
preemptions, and the serving ledger's replica time and cost on Spot vs on demand. Everything stays
on 127.0.0.1 and stops by itself (``--seconds`` is capped at 600).

Usage: python benchmarks/serving_load.py [--replicas 2] [--seconds 60] [--preempt-every 5]
    [--concurrency 4] [--restart-delay 0] [--seed 0]
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import joblib
import numpy as np
from google.cloud.aiplatform_v1 import EndpointServiceClient, ModelServiceClient
from google.cloud.aiplatform_v1.types import DeployedModel, Endpoint, Model
from sklearn.linear_model import LogisticRegression

from kfp_spot.emulator import ApiError, Emulator
from kfp_spot.vertex.client import make_client, resolve_endpoint

PARENT = "projects/bench-project/locations/us-central1"
IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-6:latest"
WINDOW = 0.1


def deploy(emu: Emulator, model_dir: Path, replicas: int) -> tuple[str, str]:
    api = resolve_endpoint("us-central1", emu.endpoint)
    models = make_client(ModelServiceClient, api)
    endpoints = make_client(EndpointServiceClient, api)
    model = (
        models.upload_model(
            parent=PARENT,
            model=Model(
                display_name="load",
                artifact_uri=str(model_dir),
                container_spec={"image_uri": IMAGE},
            ),
        )
        .result(timeout=60)
        .model
    )
    endpoint = endpoints.create_endpoint(
        parent=PARENT, endpoint=Endpoint(display_name="load")
    ).result(timeout=60)
    deployed = endpoints.deploy_model(
        endpoint=endpoint.name,
        deployed_model=DeployedModel(
            model=model,
            dedicated_resources={
                "machine_spec": {"machine_type": "n1-standard-4"},
                "min_replica_count": replicas,
                "spot": True,
            },
        ),
        traffic_split={"0": 100},
    ).result(timeout=300)
    return endpoint.name, deployed.deployed_model.id


def client_loop(
    port: int, path: str, body: bytes, stop: float, out: list[tuple[float, float, int]]
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while (start := time.monotonic()) < stop:
        try:
            conn.request("POST", path, body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            status = response.status
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            status = 0
        out.append((start, time.monotonic() - start, status))
    conn.close()


def preemptor(
    emu: Emulator,
    endpoint: str,
    dm_id: str,
    every: float,
    stop: float,
    rng: random.Random,
    log: list[float],
) -> None:
    next_at = time.monotonic() + every
    while (now := time.monotonic()) < stop:
        time.sleep(max(0.0, min(next_at, stop) - now))
        if time.monotonic() >= stop:
            return
        running = [
            r["replica"] for r in emu.serving_replicas(endpoint, dm_id) if r["state"] == "READY"
        ]
        if running:
            try:
                emu.preempt_replica(endpoint, dm_id, rng.choice(running))
                log.append(time.monotonic())
            except ApiError:
                pass  # it went down meanwhile
        next_at += every


def outage_seconds(samples: list[tuple[float, float, int]], t0: float) -> float:
    """Total length of the windows in which requests failed and none was answered."""
    windows: dict[int, list[int]] = {}
    for start, latency, status in samples:
        windows.setdefault(int((start + latency - t0) / WINDOW), []).append(status)
    down = [k for k, statuses in windows.items() if 200 not in statuses]
    return len(down) * WINDOW


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--preempt-every", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--restart-delay", type=float, default=0.0)
    parser.add_argument("--grace-period", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not 1 <= args.replicas <= 16 or not 0 < args.seconds <= 600 or args.concurrency < 1:
        parser.error("--replicas 1..16, --seconds in (0, 600], --concurrency >= 1")

    with tempfile.TemporaryDirectory(prefix="kfp-spot-serving-load-") as tmp:
        root = Path(tmp)
        rng = np.random.default_rng(args.seed)
        X = rng.normal(size=(200, 8))
        y = (X[:, 0] + X[:, 1] > 0).astype(int)
        (root / "model").mkdir()
        joblib.dump(LogisticRegression().fit(X, y), root / "model" / "model.joblib")
        with Emulator(
            root / "emu",
            grace_period=args.grace_period,
            serving_restart_delay=args.restart_delay,
        ) as emu:
            endpoint, dm_id = deploy(emu, root / "model", args.replicas)
            body = json.dumps({"instances": X[:4].tolist()}).encode()
            samples: list[tuple[float, float, int]] = []
            preemptions: list[float] = []
            t0 = time.monotonic()
            stop = t0 + args.seconds
            threads = [
                threading.Thread(
                    target=client_loop,
                    args=(emu.port, f"/v1/{endpoint}:predict", body, stop, samples),
                )
                for _ in range(args.concurrency)
            ]
            threads.append(
                threading.Thread(
                    target=preemptor,
                    args=(
                        emu,
                        endpoint,
                        dm_id,
                        args.preempt_every,
                        stop,
                        random.Random(args.seed),
                        preemptions,
                    ),
                )
            )
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            ledger = emu.serving_ledger(endpoint)

    answered = [latency for _, latency, status in samples if status == 200]
    failures: dict[int, int] = {}
    for _, _, status in samples:
        if status != 200:
            failures[status] = failures.get(status, 0) + 1
    quantiles = statistics.quantiles(answered, n=100) if len(answered) >= 2 else [0.0] * 99
    total = ledger["total"]
    print(
        f"serving load: {args.replicas} Spot replica(s), {args.seconds:g} s, "
        f"{args.concurrency} clients, a preemption every {args.preempt_every:g} s "
        f"(restart delay {args.restart_delay:g} s, grace {args.grace_period:g} s)"
    )
    print(f"requests:        {len(samples)} ({len(samples) / args.seconds:.0f}/s)")
    print(f"answered:        {len(answered) / max(1, len(samples)):.2%}")
    print(f"latency:         p50 {quantiles[49] * 1000:.1f} ms, p99 {quantiles[98] * 1000:.1f} ms")
    print(f"failures:        {failures or 'none'} (0 = connection error)")
    outage = outage_seconds(samples, t0)
    print(
        f"outage time:     {outage:.1f} s (no request answered); available "
        f"{1 - outage / args.seconds:.1%} of the time"
    )
    print(f"preemptions:     {len(preemptions)}")
    print(
        f"replica time:    {total['billableSeconds']:.1f} s; cost ${total['spotCost']:.6f} on "
        f"Spot vs ${total['onDemandCost']:.6f} on demand"
    )


if __name__ == "__main__":
    main()
