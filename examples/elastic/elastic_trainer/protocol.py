"""The elastic protocol: the chief coordinates every step over HTTP at its cluster address.

The chief (``workerpool0-0``) serves three requests on the address ``CLUSTER_SPEC`` gives it;
workers call them with JSON bodies:

``POST /sync {"replica", "step"}``
    "I hold the weights after step ``step``; what next?" The answer (long-polled, at most
    ``poll_seconds``) is one of: ``updates`` (the summed gradients of the steps after
    ``step``, which the worker applies itself, exactly as the chief did), ``work`` (the chunks
    of the next step this worker computes, with the fingerprint of the weights they start from),
    ``restore`` (the updates it needs are gone: restore the chief's newest checkpoint and sync
    again), ``done`` or ``wait``. A worker that syncs at the chief's own step is a *member*: it
    gets chunks from the next step on.
``POST /grads {"replica", "step", "chunks": {chunk: gradient}, "losses": {chunk: loss}}``
    The worker's results for the chunks it was given.
``POST /leave {"replica"}``
    The worker is going away (its VM got the preemption notice). The chief computes the chunks
    it still owed and stops giving it any.

A member that owes chunks for longer than ``member_timeout`` (killed without notice) is dropped
the same way. Nothing waits for an absent worker: the chief and the members present share the
step's chunks, so the job slows down while a worker is away and speeds up when it is back.

The chief keeps the updates since its previous committed checkpoint, so a worker restarted on a
new VM restores the chief's newest checkpoint (through ``kfp_spot.trainer``) and catches up from
there.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

log = logging.getLogger("elastic_trainer.protocol")

CHIEF = "workerpool0-0"
MAX_UPDATES_PER_ANSWER = 64


def encode(vector: np.ndarray) -> str:
    """A float64 vector as base64 text (exact)."""
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f8").tobytes()).decode()


def decode(text: str) -> np.ndarray:
    """The inverse of :func:`encode` (a writable copy)."""
    return np.frombuffer(base64.b64decode(text), dtype="<f8").copy()


def rank_key(replica: str) -> tuple[int, int]:
    """``workerpool1-2`` -> (1, 2): the order of replicas (the chief first)."""
    pool, _, index = replica.removeprefix("workerpool").partition("-")
    try:
        return int(pool), int(index)
    except ValueError:
        return 99, 0


@dataclass
class Round:
    """One step being computed: who computes which chunk, and what came back."""

    step: int
    digest: str
    owner: dict[int, str]
    opened: float
    results: dict[int, tuple[np.ndarray, float]] = field(default_factory=dict)

    def missing(self) -> list[int]:
        """Chunks nobody delivered yet."""
        return [c for c in sorted(self.owner) if c not in self.results]


class Coordinator:
    """The chief's state: members, the step in progress and the recent updates.

    Args:
        step: the step the chief's weights are at.
        chunks: chunks per step.
        member_timeout: seconds a member may owe chunks before it is dropped.
        clock: monotonic clock.
    """

    def __init__(
        self,
        step: int,
        *,
        chunks: int,
        member_timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cond = threading.Condition()
        self.step = step
        self.chunks = chunks
        self.member_timeout = member_timeout
        self.clock = clock
        self.members: set[str] = set()
        self.log_start = step  # the updates of the steps after this one are in ``updates``
        self.updates: dict[int, np.ndarray] = {}
        self.round: Round | None = None
        self.done = False

    # -- the workers' requests ------------------------------------------------------------

    def sync(self, replica: str, step: int, wait: float) -> dict[str, Any]:
        """Answer a worker at ``step`` (see the module docstring)."""
        deadline = self.clock() + wait
        with self.cond:
            while True:
                if step < self.log_start or step > self.step:
                    return {"action": "restore", "step": self.step}
                if step < self.step:
                    last = min(self.step, step + MAX_UPDATES_PER_ANSWER)
                    grads = [encode(self.updates[s]) for s in range(step + 1, last + 1)]
                    return {"action": "updates", "step": step, "grads": grads}
                if self.done:
                    return {"action": "done", "step": self.step}
                if replica not in self.members:
                    self.members.add(replica)
                    log.info("%s joined at step %d (%d workers)", replica, step, len(self.members))
                    self.cond.notify_all()  # the chief may be waiting for workers to join
                rnd = self.round
                if rnd is not None and rnd.step == step + 1:
                    mine = [c for c in rnd.missing() if rnd.owner[c] == replica]
                    if mine:
                        return {
                            "action": "work",
                            "step": rnd.step,
                            "chunks": mine,
                            "digest": rnd.digest,
                        }
                left = deadline - self.clock()
                if left <= 0:
                    return {"action": "wait", "step": self.step}
                self.cond.wait(left)

    def deliver(
        self, replica: str, step: int, results: Mapping[int, tuple[np.ndarray, float]]
    ) -> bool:
        """Take a replica's chunk results; False when that step is no longer being computed."""
        with self.cond:
            rnd = self.round
            if rnd is None or rnd.step != step:
                return False
            for chunk, value in results.items():
                if rnd.owner.get(chunk) == replica and chunk not in rnd.results:
                    rnd.results[chunk] = value
            self.cond.notify_all()
            return True

    def leave(self, replica: str, why: str = "left") -> None:
        """A worker is gone: the chief takes over the chunks it owed."""
        with self.cond:
            self._drop(replica, why)

    def _drop(self, replica: str, why: str) -> None:
        if replica in self.members:
            self.members.discard(replica)
            log.info("%s %s at step %d (%d workers)", replica, why, self.step, len(self.members))
        rnd = self.round
        if rnd is not None:
            for chunk in rnd.missing():
                if rnd.owner[chunk] == replica:
                    rnd.owner[chunk] = CHIEF
        self.cond.notify_all()

    # -- the chief's loop -------------------------------------------------------------------

    def wait_for_workers(self, expected: int, timeout: float) -> int:
        """Wait (at most ``timeout`` s) until ``expected`` workers have joined; how many did."""
        deadline = self.clock() + timeout
        with self.cond:
            while len(self.members) < expected and self.clock() < deadline:
                self.cond.wait(deadline - self.clock())
            return len(self.members)

    def open_round(self, digest: str) -> Round:
        """Start the next step: its chunks go round-robin to the chief and the members."""
        with self.cond:
            everyone = [CHIEF, *sorted(self.members, key=rank_key)]
            owner = {c: everyone[c % len(everyone)] for c in range(self.chunks)}
            self.round = Round(self.step + 1, digest, owner, self.clock())
            self.cond.notify_all()
            return self.round

    def chief_work(self, stop: Callable[[], bool] = lambda: False) -> list[int] | None:
        """The chunks the chief must compute now; None once every chunk is in (or on ``stop``).

        Waits while only workers owe chunks; a worker that owes them past ``member_timeout``
        is dropped and its chunks become the chief's. ``stop`` is looked at every 0.1 s (a
        signal does not wake a waiting thread).
        """
        with self.cond:
            rnd = self.round
            if rnd is None:
                raise RuntimeError("chief_work() needs an open round (open_round first)")
            while not stop():
                missing = rnd.missing()
                if not missing:
                    return None
                mine = [c for c in missing if rnd.owner[c] == CHIEF]
                if mine:
                    return mine
                overdue = rnd.opened + self.member_timeout - self.clock()
                if overdue <= 0:
                    for worker in {rnd.owner[c] for c in missing}:
                        self._drop(worker, f"owed chunks for {self.member_timeout:g} s: dropped")
                    continue
                self.cond.wait(min(overdue, 0.1))
            return None

    def finish_round(self, gradient_sum: np.ndarray) -> None:
        """The step is applied: members get its update on their next sync."""
        with self.cond:
            self.step += 1
            self.updates[self.step] = gradient_sum
            self.round = None
            self.cond.notify_all()

    def forget_until(self, step: int) -> None:
        """Drop the updates up to ``step``: a restarted worker restores a checkpoint past it."""
        with self.cond:
            for old in [s for s in self.updates if s <= step]:
                del self.updates[old]
            self.log_start = max(self.log_start, step)

    def finish(self) -> None:
        """Training is over: members hear ``done``."""
        with self.cond:
            self.done = True
            self.cond.notify_all()

    def members_count(self) -> int:
        """Workers present right now."""
        with self.cond:
            return len(self.members)


class _Handler(BaseHTTPRequestHandler):
    server: ChiefServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the chief logs membership changes itself."""

    def do_POST(self) -> None:
        """``/sync``, ``/grads``, ``/leave``."""
        coord = self.server.coordinator
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            replica = str(body["replica"])
            if self.path == "/sync":
                answer = coord.sync(replica, int(body["step"]), self.server.poll_seconds)
            elif self.path == "/grads":
                results = {
                    int(c): (decode(g), float(body["losses"][c])) for c, g in body["chunks"].items()
                }
                answer = {"ok": coord.deliver(replica, int(body["step"]), results)}
            elif self.path == "/leave":
                coord.leave(replica)
                answer = {"ok": True}
            else:
                self.send_error(404)
                return
        except (KeyError, TypeError, ValueError) as err:
            self.send_error(400, f"bad request: {err}")
            return
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ChiefServer(ThreadingHTTPServer):
    """The chief's HTTP server (a thread per request; long polls block their own thread)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], coordinator: Coordinator, poll: float) -> None:
        super().__init__(address, _Handler)
        self.coordinator = coordinator
        self.poll_seconds = poll

    def serve_in_background(self) -> threading.Thread:
        """Serve from a daemon thread."""
        thread = threading.Thread(target=self.serve_forever, name="chief-server", daemon=True)
        thread.start()
        return thread


class ChiefUnreachableError(RuntimeError):
    """The chief did not answer for longer than the worker's patience."""


class ChiefClient:
    """A worker's side of the protocol.

    Args:
        address: the chief's ``host:port``.
        replica: this worker's name.
        patience: seconds to keep retrying while the chief does not answer.
        poll: the chief's long-poll time (requests time out well after it).
    """

    def __init__(self, address: str, replica: str, *, patience: float, poll: float) -> None:
        self.base = f"http://{address}"
        self.replica = replica
        self.patience = patience
        self.timeout = poll + 30.0

    def _post(self, path: str, body: dict[str, Any], *, retry: bool = True) -> dict[str, Any]:
        data = json.dumps({"replica": self.replica, **body}).encode()
        deadline = time.monotonic() + self.patience
        delay = 0.05
        while True:
            request = urllib.request.Request(f"{self.base}{path}", data=data, method="POST")
            request.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError:
                raise
            except OSError as err:  # refused (the chief is starting) or reset
                if not retry or time.monotonic() > deadline:
                    raise ChiefUnreachableError(
                        f"the chief at {self.base} did not answer for {self.patience:g} s: {err}"
                    ) from err
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def sync(self, step: int) -> dict[str, Any]:
        """What to do next, holding the weights after ``step``."""
        return self._post("/sync", {"step": step})

    def deliver(self, step: int, results: Mapping[int, tuple[np.ndarray, float]]) -> bool:
        """Send chunk results; False when the chief had moved on."""
        body = {
            "step": step,
            "chunks": {str(c): encode(g) for c, (g, _) in results.items()},
            "losses": {str(c): loss for c, (_, loss) in results.items()},
        }
        return bool(self._post("/grads", body).get("ok"))

    def leave(self) -> None:
        """Tell the chief this worker is going (best effort: the VM is being taken away)."""
        try:
            self._post("/leave", {}, retry=False)
        except (ChiefUnreachableError, urllib.error.HTTPError) as err:
            log.warning("could not tell the chief I am leaving: %s", err)
