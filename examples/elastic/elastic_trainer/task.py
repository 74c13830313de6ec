"""Elastic data-parallel training that keeps going while a worker's Spot VM is away.

``python -m elastic_trainer.task --steps N [--chunk-seconds S] [...]``, run by every replica of a
Vertex AI CustomJob (``workerpool0`` one chief, ``workerpool1`` any number of workers).

- The chief (``workerpool0-0``) owns the weights and the step count, checkpoints them through
  :class:`kfp_spot.trainer.CheckpointManager` (only the chief writes), and serves the protocol of
  :mod:`elastic_trainer.protocol` on its ``CLUSTER_SPEC`` address.
- A worker restores the chief's newest checkpoint, catches up with the updates since, and then
  computes its share of each step. On SIGTERM (its VM is being preempted) it tells the chief and
  exits 143; the chief and the other workers carry on with its share. Its replacement (same name,
  same address) restores, catches up and is given work again.
- The chief's own preemption restarts the whole job (Vertex does so when the primary replica's
  VM goes): every replica resumes from the chief's newest checkpoint.

However many workers there were at each step, the run does exactly ``--steps`` steps and ends with
the same weights (see :mod:`elastic_trainer.model`). At the end the chief writes ``model.npz``,
``model.json`` and ``history.json`` (per step: time, workers present, loss) to ``$AIP_MODEL_DIR``.
"""

from __future__ import annotations

import argparse
import io
import ipaddress
import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from elastic_trainer import model
from elastic_trainer.protocol import (
    CHIEF,
    ChiefClient,
    ChiefServer,
    ChiefUnreachableError,
    Coordinator,
    decode,
)
from kfp_spot.trainer import PREEMPTED_EXIT_CODE, CheckpointManager, PreemptionNotice, SaveInterval

log = logging.getLogger("elastic_trainer.task")

# Settings that decide the weights: a checkpoint written with other values cannot be resumed.
_FIXED = (
    "seed",
    "data_seed",
    "data_size",
    "hidden",
    "batch_size",
    "chunks",
    "learning_rate",
    "momentum",
)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}")
    return value


def _interval(text: str) -> str:
    try:
        SaveInterval.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m elastic_trainer.task", description=__doc__)
    p.add_argument("--steps", type=_positive_int, default=200, help="training steps in all")
    p.add_argument("--batch-size", type=_positive_int, default=96, help="examples per step")
    p.add_argument("--chunks", type=_positive_int, default=6, help="parts of a step's batch")
    p.add_argument("--hidden", type=_positive_int, default=32, help="hidden units")
    p.add_argument("--learning-rate", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0, help="initial weights and data order")
    p.add_argument("--data-seed", type=int, default=0, help="the synthetic data set")
    p.add_argument("--data-size", type=_positive_int, default=3072, help="examples in the set")
    p.add_argument(
        "--chunk-seconds",
        type=_seconds,
        default=0.0,
        help="pacing: at least this long per chunk, as if each were real work (default 0)",
    )
    p.add_argument(
        "--checkpoint-every", type=_interval, default="20", help="steps (20) or time (30s)"
    )
    p.add_argument("--keep-last", type=_positive_int, default=3, help="checkpoints kept")
    p.add_argument("--grace-period", type=_seconds, default=30.0, help="SIGTERM to SIGKILL, s")
    p.add_argument(
        "--member-timeout",
        type=_seconds,
        default=10.0,
        help="drop a worker that owes its chunks this long (killed without notice)",
    )
    p.add_argument(
        "--join-timeout",
        type=_seconds,
        default=30.0,
        help="at the start, wait this long for every worker to join",
    )
    p.add_argument("--poll-seconds", type=_seconds, default=0.5, help="long-poll time")
    p.add_argument(
        "--chief-timeout",
        type=_seconds,
        default=120.0,
        help="a worker gives up after the chief is unreachable this long",
    )
    p.add_argument("--checkpoint-dir", default=None, help="default: $AIP_CHECKPOINT_DIR")
    p.add_argument("--model-dir", default=None, help="default: $AIP_MODEL_DIR")
    args = p.parse_args(argv)
    args.checkpoint_dir = args.checkpoint_dir or os.environ.get("AIP_CHECKPOINT_DIR")
    args.model_dir = args.model_dir or os.environ.get("AIP_MODEL_DIR")
    if not args.checkpoint_dir:
        p.error("no checkpoint directory: set AIP_CHECKPOINT_DIR or pass --checkpoint-dir")
    if not args.model_dir:
        p.error("no model directory: set AIP_MODEL_DIR or pass --model-dir")
    if args.data_size < args.batch_size:
        p.error(f"--data-size {args.data_size} is smaller than --batch-size {args.batch_size}")
    if args.chunks > args.batch_size:
        p.error(f"--chunks {args.chunks} is more than the {args.batch_size} examples of a step")
    return args


def _config(args: argparse.Namespace) -> dict[str, Any]:
    return {key: getattr(args, key) for key in _FIXED}


def _update(args: argparse.Namespace) -> dict[str, Any]:
    """The optimizer settings every replica applies a step's gradient with."""
    return {
        "batch_size": args.batch_size,
        "learning_rate": args.learning_rate,
        "momentum": args.momentum,
    }


def cluster() -> tuple[str, str | None, list[str]]:
    """This replica's name, the chief's address (None alone) and every worker's name.

    From ``CLUSTER_SPEC`` as Vertex sets it: ``{"cluster": {"workerpool0": ["host:port"], ...},
    "task": {"type": "workerpool1", "index": 0}}``; a single-replica job has none.
    """
    text = os.environ.get("CLUSTER_SPEC")
    if not text:
        return CHIEF, None, []
    spec = json.loads(text)
    task = spec.get("task") or {}
    me = f"{task.get('type', 'workerpool0')}-{task.get('index', 0)}"
    pools = spec.get("cluster") or {}
    chief = pools["workerpool0"][0]
    workers = [f"{pool}-{i}" for pool, hosts in pools.items() for i in range(len(hosts))]
    return me, chief, [w for w in workers if w != CHIEF]


def _bind_host(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        host = "0.0.0.0"  # a host name (Vertex's workerpool0-0): listen on every interface
    return host, int(port)


def _local_dir(uri: str) -> Path:
    """A local directory for ``uri``; ``gs://b/p`` is Vertex's Cloud Storage FUSE path /gcs/b/p."""
    if uri.startswith("gs://"):
        return Path("/gcs") / uri[len("gs://") :]
    return Path(uri.removeprefix("file://"))


def write_model(
    model_dir: str,
    params: dict[str, np.ndarray],
    info: dict[str, Any],
    history: list[dict[str, Any]],
) -> None:
    """``model.npz`` (weights), ``model.json`` (settings, steps, accuracy), ``history.json``."""
    out = _local_dir(model_dir)
    out.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, **params)
    for name, payload in (
        ("model.npz", buf.getvalue()),
        ("model.json", json.dumps(info, indent=1, sort_keys=True).encode()),
        ("history.json", json.dumps(history).encode()),
    ):
        tmp = out / f".{name}.tmp"
        tmp.write_bytes(payload)
        tmp.replace(out / name)


def _restore(ckpt: CheckpointManager, config: dict[str, Any]) -> tuple[Any, ...] | None:
    restored = ckpt.restore()
    if restored is None:
        return None
    state = restored.state
    changed = [k for k in _FIXED if state["config"].get(k) != config[k]]
    if changed:
        raise SystemExit(
            "the checkpoints were written with other settings ("
            + ", ".join(f"{k}: {state['config'].get(k)!r} -> {config[k]!r}" for k in changed)
            + "); use a new checkpoint directory or the same settings"
        )
    params = {k: np.array(v) for k, v in state["params"].items()}
    velocity = {k: np.array(v) for k, v in state["velocity"].items()}
    return params, velocity, int(state["progress"]["step"])


def _compute(
    args: argparse.Namespace,
    params: dict[str, np.ndarray],
    data: tuple[np.ndarray, np.ndarray],
    step: int,
    chunks: list[int],
    notice: PreemptionNotice,
) -> dict[int, tuple[np.ndarray, float]] | None:
    """Gradients of some chunks of ``step``; None when a preemption notice came meanwhile."""
    x, y = data
    batch = model.batch_indices(step, args.data_size, args.batch_size, args.seed)
    out = {}
    for chunk in chunks:
        started = time.monotonic()
        rows = model.chunk_of(batch, chunk, args.chunks)
        out[chunk] = model.chunk_gradient(params, x[rows], y[rows])
        if notice.sleep(args.chunk_seconds - (time.monotonic() - started)):
            return None
    return out


def run_chief(args: argparse.Namespace, chief_address: str | None, workers: list[str]) -> int:
    """The chief: serve, run every step with whoever is present, checkpoint, write the model."""
    config = _config(args)
    data = model.dataset(args.data_seed, args.data_size)
    update = _update(args)
    with CheckpointManager(
        args.checkpoint_dir,
        interval=args.checkpoint_every,
        keep_last=args.keep_last,
        grace_period=args.grace_period,
        writer=True,
    ) as ckpt:
        restored = _restore(ckpt, config)
        if restored is None:
            params = model.init_params(args.seed, args.hidden)
            velocity = {k: np.zeros_like(v) for k, v in params.items()}
            step = 0
        else:
            params, velocity, step = restored
            print(f"resuming from step {step}")

        def snapshot() -> dict[str, Any]:
            return {
                "params": params,
                "velocity": velocity,
                "progress": {"step": step},
                "config": config,
            }

        if ckpt.last_committed_step is None:
            ckpt.save(step, snapshot(), blocking=True)  # workers restore from it
        coord = Coordinator(step, chunks=args.chunks, member_timeout=args.member_timeout)
        server = None
        if chief_address:
            server = ChiefServer(_bind_host(chief_address), coord, args.poll_seconds)
            server.serve_in_background()
            joined = coord.wait_for_workers(len(workers), args.join_timeout)
            print(f"{joined} of {len(workers)} workers joined; training")
        previous_commit = ckpt.last_committed_step
        history: list[dict[str, Any]] = []
        try:
            while step < args.steps:
                rnd = coord.open_round(model.digest(params))
                present = len(set(rnd.owner.values()))
                while (mine := coord.chief_work(stop=lambda: ckpt.notice.requested)) is not None:
                    results = _compute(args, params, data, rnd.step, mine, ckpt.notice)
                    if results is None:
                        break
                    coord.deliver(CHIEF, rnd.step, results)
                if ckpt.notice.requested:  # the primary's VM is going: the job restarts
                    ckpt.maybe_save(step, snapshot)
                    print(f"preempted at step {step}; every replica resumes from it")
                    return PREEMPTED_EXIT_CODE
                gradient = rnd.results[0][0].copy()
                loss = rnd.results[0][1]
                for chunk in range(1, args.chunks):  # chunk order: the sum never depends on who
                    gradient += rnd.results[chunk][0]
                    loss += rnd.results[chunk][1]
                loss /= args.batch_size
                model.apply_update(params, velocity, gradient, **update)
                step += 1
                coord.finish_round(gradient)
                history.append(
                    {"step": step, "time": time.time(), "replicas": present, "loss": loss}
                )
                if step % 10 == 0 or step == args.steps:
                    print(f"step {step}/{args.steps} loss {loss:.4f} replicas {present}")
                ckpt.maybe_save(step, snapshot, metrics={"loss": loss, "replicas": present})
                if ckpt.last_committed_step != previous_commit:
                    # keep the updates since the commit before: a worker restoring the newest
                    # checkpoint (or the one before, if it looked just as this one landed) finds
                    # every update it needs
                    coord.forget_until(previous_commit or 0)
                    previous_commit = ckpt.last_committed_step
                if ckpt.should_stop:
                    print(f"preempted after step {step}; every replica resumes")
                    return PREEMPTED_EXIT_CODE
            if ckpt.last_committed_step != step:
                ckpt.save(step, snapshot(), blocking=True)
            coord.finish()
            x, y = data
            info = {
                "config": config,
                "steps": step,
                "digest": model.digest(params),
                "train_accuracy": model.accuracy(params, x, y),
            }
            write_model(args.model_dir, params, info, history)
            deadline = time.monotonic() + min(2.0, args.poll_seconds * 4)
            while coord.members_count() and time.monotonic() < deadline:
                time.sleep(0.05)  # let present workers hear "done" before the job ends
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()
    print(f"finished {step} steps; train accuracy {info['train_accuracy']:.4f}")
    return 0


def run_worker(args: argparse.Namespace, me: str, chief_address: str) -> int:
    """A worker: restore, catch up, compute chunks until done; leave on a preemption notice."""
    config = _config(args)
    data = model.dataset(args.data_seed, args.data_size)
    update = _update(args)
    client = ChiefClient(chief_address, me, patience=args.chief_timeout, poll=args.poll_seconds)
    with CheckpointManager(
        args.checkpoint_dir, grace_period=args.grace_period, writer=False
    ) as ckpt:
        notice = ckpt.notice

        def restore() -> tuple[Any, ...]:
            deadline = time.monotonic() + args.chief_timeout
            while (restored := _restore(ckpt, config)) is None:
                if time.monotonic() > deadline:
                    raise ChiefUnreachableError("the chief wrote no checkpoint to start from")
                if notice.sleep(0.2):
                    break
            return restored or (None, None, 0)

        params, velocity, step = restore()
        print(f"{me}: restored step {step} from the chief's checkpoint")
        caught_up = False
        try:
            while not notice.requested:
                answer = client.sync(step)
                action = answer["action"]
                if action == "updates":
                    for grad in answer["grads"]:
                        model.apply_update(params, velocity, decode(grad), **update)
                        step += 1
                elif action == "restore":
                    params, velocity, step = restore()
                elif action == "work":
                    if not caught_up:
                        print(f"{me}: caught up at step {step}; computing")
                        caught_up = True
                    if answer["digest"] != model.digest(params):
                        log.warning("weights differ from the chief's at step %d: restoring", step)
                        params, velocity, step = restore()
                        continue
                    results = _compute(args, params, data, answer["step"], answer["chunks"], notice)
                    if results is not None:
                        client.deliver(answer["step"], results)
                elif action == "done":
                    print(f"{me}: training finished at step {answer['step']}")
                    return 0
        except ChiefUnreachableError as err:
            print(f"{me}: {err}", file=sys.stderr)
            return 1
        client.leave()
        print(f"{me}: preempted at step {step}; left the job")
        return PREEMPTED_EXIT_CODE


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m elastic_trainer.task``."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    sys.stdout.reconfigure(line_buffering=True)  # progress lines reach the job's log at once
    args = parse_args(argv)
    me, chief_address, workers = cluster()
    if me == CHIEF:
        return run_chief(args, chief_address, workers)
    if chief_address is None:
        raise SystemExit(f"{me}: no CLUSTER_SPEC: a worker needs the chief's address")
    return run_worker(args, me, chief_address)


if __name__ == "__main__":
    sys.exit(main())
