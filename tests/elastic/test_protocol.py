"""The elastic example's protocol without processes: membership, chunks, catch-up, drop-outs."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "elastic"))

from elastic_trainer import model
from elastic_trainer.protocol import CHIEF, Coordinator, decode, encode


def _coordinator(**kwargs) -> Coordinator:
    return Coordinator(0, chunks=6, member_timeout=kwargs.pop("member_timeout", 30.0), **kwargs)


def test_members_share_the_chunks_and_a_leaver_hands_them_to_the_chief():
    coord = _coordinator()
    assert coord.sync("workerpool1-1", 0, wait=0)["action"] == "wait"  # joins, no round yet
    assert coord.sync("workerpool1-0", 0, wait=0)["action"] == "wait"
    rnd = coord.open_round("d0")
    assert rnd.owner == {
        0: CHIEF,
        1: "workerpool1-0",
        2: "workerpool1-1",
        3: CHIEF,
        4: "workerpool1-0",
        5: "workerpool1-1",
    }
    work = coord.sync("workerpool1-0", 0, wait=0)
    assert work == {"action": "work", "step": 1, "chunks": [1, 4], "digest": "d0"}
    assert coord.chief_work() == [0, 3]
    coord.leave("workerpool1-0")  # its VM got the notice before it delivered
    assert coord.chief_work() == [0, 1, 3, 4]
    assert coord.members == {"workerpool1-1"}
    one = (np.ones(3), 1.0)
    coord.deliver(CHIEF, 1, {c: one for c in (0, 1, 3, 4)})
    assert not coord.deliver("workerpool1-1", 2, {2: one})  # a step that is not being computed
    coord.deliver("workerpool1-1", 1, {2: one, 5: one})
    assert coord.chief_work() is None  # every chunk is in


def test_a_member_killed_without_notice_is_dropped_after_the_timeout():
    coord = _coordinator(member_timeout=0.2)
    coord.sync("workerpool1-0", 0, wait=0)
    coord.open_round("d0")
    assert coord.chief_work() == [0, 2, 4]
    coord.deliver(CHIEF, 1, {c: (np.zeros(2), 0.0) for c in (0, 2, 4)})
    # the worker never delivers chunks 1, 3, 5: after 0.2 s they are the chief's
    assert coord.chief_work() == [1, 3, 5]
    assert coord.members == set()


def test_a_late_worker_catches_up_from_the_updates_then_restores_when_they_are_gone():
    coord = _coordinator()
    for step in range(1, 6):
        coord.open_round("d")
        coord.finish_round(np.full(2, float(step)))
    answer = coord.sync("workerpool1-0", 2, wait=0)
    assert answer["action"] == "updates" and answer["step"] == 2
    assert [decode(g)[0] for g in answer["grads"]] == [3.0, 4.0, 5.0]
    coord.forget_until(3)  # the chief committed past step 3
    assert coord.sync("workerpool1-0", 2, wait=0)["action"] == "restore"
    assert coord.sync("workerpool1-0", 4, wait=0)["action"] == "updates"
    assert coord.sync("workerpool1-0", 9, wait=0)["action"] == "restore"  # ahead: inconsistent
    coord.finish()
    assert coord.sync("workerpool1-0", 5, wait=0) == {"action": "done", "step": 5}


def test_a_waiting_worker_is_woken_by_the_next_round():
    # The round opens only once the worker waits in its long poll (not merely once its thread
    # started: it may not have run yet, and then it finds the round open and waits for nothing).
    # sync reads the clock for its deadline, then, holding the lock, for the time left right
    # before it waits: once that second read happened, open_round (which takes the lock) runs
    # while the worker waits.
    waiting = threading.Event()
    reads = []

    def clock() -> float:
        if threading.current_thread() is thread:
            reads.append(None)
            if len(reads) == 2:
                waiting.set()
        return time.monotonic()

    answers = []
    thread = threading.Thread(
        target=lambda: answers.append(coord.sync("workerpool1-0", 0, 600)), daemon=True
    )
    coord = Coordinator(0, chunks=6, member_timeout=30.0, clock=clock)
    coord.sync("workerpool1-0", 0, wait=0)  # joins
    thread.start()
    assert waiting.wait(60), "the worker never reached its wait"
    coord.open_round("d0")
    thread.join(60)  # woken, not timed out: its poll lasts 600 s
    assert answers == [{"action": "work", "step": 1, "chunks": [1, 3, 5], "digest": "d0"}]


def test_the_sum_of_chunks_does_not_depend_on_who_computed_them():
    x, y = model.dataset(0, 384)
    params = model.init_params(0, 8)
    batch = model.batch_indices(3, 384, 96, 0)
    chunks = [model.chunk_gradient(params, x[r], y[r]) for r in np.array_split(batch, 6)]
    again = [decode(encode(g)) for g, _ in chunks]  # over the wire and back: exact
    assert all(np.array_equal(a, g) for a, (g, _) in zip(again, chunks, strict=True))
    total = chunks[0][0].copy()
    for g, _ in chunks[1:]:
        total += g
    whole, _ = model.chunk_gradient(params, x[batch], y[batch])
    np.testing.assert_allclose(total, whole, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("steps_per_epoch", [1, 32])
def test_batches_cover_each_epoch_once(steps_per_epoch):
    size = 96 * steps_per_epoch
    seen = np.concatenate(
        [model.batch_indices(s, size, 96, 5) for s in range(1, steps_per_epoch + 1)]
    )
    assert sorted(seen.tolist()) == list(range(size))
