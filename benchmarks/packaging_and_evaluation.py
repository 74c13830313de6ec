"""Figures for prepare_package and evaluate (prints them; asserts nothing).

    .venv/bin/python benchmarks/packaging_and_evaluation.py [--rounds N]

prepare_package: a cold build + stage of the example trainer, a rebuild that is a cache hit,
and the same against a gs:// staging bucket on a local GCS emulator; checks that every round made
the same sha256; prepare_package with check_import (the executor image's environment).
Job environments: the example trainer's environment for its executor image, cold (created) and
warm (cached). evaluate: the first evaluation of a checkpoint (builds the package environment)
and warm ones (environment cached), with the example trainer's evaluate() on a real checkpoint.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kfp_spot import checkpoints, envcache, executors
from kfp_spot.evaluation import evaluate
from kfp_spot.packaging import prepare_package

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "trainer"


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def fmt(samples):
    if len(samples) == 1:
        return f"{samples[0]:.2f} s"
    return f"median {statistics.median(samples):.2f} s (min {min(samples):.2f}, n={len(samples)})"


def start_gcs():
    from gcp_storage_emulator.server import create_server

    server = create_server("127.0.0.1", 0, in_memory=True, default_bucket="bench")
    server.start()
    port = server._api._httpd.server_address[1]
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cold, hits, shas = [], [], set()
        for i in range(args.rounds):
            seconds, info = timed(lambda i=i: prepare_package(str(EXAMPLE), str(tmp / f"s{i}")))
            cold.append(seconds)
            shas.add(info.sha256)
            seconds, again = timed(lambda i=i: prepare_package(str(EXAMPLE), str(tmp / f"s{i}")))
            assert again.cache_hit
            hits.append(seconds)
        print(f"example trainer sdist: {info.size} bytes, sha256 {info.sha256[:16]}...")
        print(f"prepare_package, new staging (build + stage):  {fmt(cold)}")
        print(f"prepare_package, cache hit (build, no upload): {fmt(hits)}")
        print(f"distinct sha256 over {2 * args.rounds} builds: {len(shas)}")

        server = start_gcs()
        try:
            seconds, _ = timed(lambda: prepare_package(str(EXAMPLE), "gs://bench/staging"))
            print(f"prepare_package to gs:// (GCS emulator), upload: {seconds:.2f} s")
            seconds, _ = timed(lambda: prepare_package(str(EXAMPLE), "gs://bench/staging"))
            print(f"prepare_package to gs://, cache hit:            {seconds:.2f} s")
        finally:
            server.stop()

        seconds, _ = timed(
            lambda: prepare_package(str(EXAMPLE), str(tmp / "checked"), check_import=True)
        )
        print(f"prepare_package with check_import (image env):  {seconds:.2f} s")

        uris = list(info.package_uris)
        image = executors.DEFAULT_EXECUTOR_IMAGE
        envs = []
        for i in range(args.rounds):
            cache = tmp / f"envs-{i}"
            envs.append(
                timed(lambda c=cache: envcache.package_env(uris, c, executor_image_uri=image))
            )
        warm_envs = [
            timed(lambda: envcache.package_env(uris, cache, executor_image_uri=image))[0]
            for _ in range(args.rounds)
        ]
        print(f"job environment ({image.rsplit('/', 1)[-1]}), cold: {fmt([s for s, _ in envs])}")
        print(
            f"job environment, warm (cached):  median {statistics.median(warm_envs) * 1e3:.1f} ms"
        )
        python = envs[-1][1]
        root = tmp / "base" / "checkpoints"
        env = dict(os.environ, AIP_CHECKPOINT_DIR=str(root), AIP_MODEL_DIR=str(tmp / "model"))
        subprocess.run(
            [str(python), "-m", "trainer.task", "--epochs", "3", "--checkpoint-every", "1"],
            env=env,
            check=True,
            capture_output=True,
            cwd=tmp,
        )
        step = checkpoints.latest(str(root)).step
        cold_cache = tmp / "envs-cold"

        def run(cache_dir):
            return evaluate(
                str(root),
                uris,
                entry_point="trainer.evaluate:evaluate",
                cache_dir=cache_dir,
            )

        seconds, result = timed(lambda: run(cold_cache))
        print(f"evaluate step {step}, first (installs the package env): {seconds:.2f} s")
        warm = [timed(lambda: run(cold_cache))[0] for _ in range(args.rounds)]
        print(f"evaluate, env cached:                 {fmt(warm)}")
        print(f"  of which the entry point itself:    {result.seconds:.2f} s")
        print(f"accuracy {result.metrics['accuracy']:.4f} at step {result.step}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
