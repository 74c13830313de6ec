"""The preemption drill preempts each attempt once, only after that attempt saved progress.

What the drill must not do is checked after it has looked (polled) at least twice since the
change, never after a fixed wait: on a loaded machine its thread may not run for a while, and a
fixed wait then checks nothing (and lets the next change land before the drill saw this one).
"""

import threading

import pytest

from kfp_spot import checkpoints
from kfp_spot.drill import CheckpointPreemptionDrill


class Attempts:
    def __init__(self):
        self.running: list[tuple[str, int]] = []
        self.preempted: list[str] = []
        self.event = threading.Event()
        self.polls = 0
        self._polled = threading.Condition()

    def __call__(self):  # the drill asks once per poll, before it looks at the checkpoints
        with self._polled:
            self.polls += 1
            self._polled.notify_all()
        return list(self.running)

    def preempt(self, job):
        with self._polled:
            self.preempted.append(job)
            self.running = []
            self.event.set()
            self._polled.notify_all()

    def not_preempted(self, timeout: float = 60.0) -> bool:
        """False once the drill preempted; True once it finished a whole poll begun after this
        call without preempting (poll n+1 began after the call, n+2 begins once n+1 is done)."""
        with self._polled:
            wanted = self.polls + 2
            looked = self._polled.wait_for(
                lambda: self.event.is_set() or self.polls >= wanted, timeout
            )
            assert looked, f"the drill did not poll within {timeout} s"
            return not self.event.is_set()


def test_preempts_only_after_a_new_commit_and_once_per_attempt(tmp_path):
    root = str(tmp_path / "ckpt")
    checkpoints.write_step(root, 3, {"w": b"old"})  # left by an earlier attempt
    attempts = Attempts()
    with CheckpointPreemptionDrill(root, attempts, attempts.preempt, count=2, poll_seconds=0.01):
        attempts.running = [("job-1", 1)]
        assert attempts.not_preempted(), "preempted before the attempt committed anything"
        checkpoints.write_step(root, 4, {"w": b"new"})
        assert attempts.event.wait(60)
        attempts.event.clear()
        # The same attempt seen again (e.g. while it drains) is never preempted twice.
        attempts.running = [("job-1", 1)]
        checkpoints.write_step(root, 5, {"w": b"save on SIGTERM"})
        assert attempts.not_preempted()
        attempts.running = [("job-1", 2)]
        assert attempts.not_preempted(), "the next attempt has not saved yet"
        checkpoints.write_step(root, 6, {"w": b"progress"})
        assert attempts.event.wait(60)
    assert attempts.preempted == ["job-1", "job-1"]


def test_torn_steps_do_not_count_as_progress(tmp_path):
    root = str(tmp_path / "ckpt")
    attempts = Attempts()
    with CheckpointPreemptionDrill(root, attempts, attempts.preempt, poll_seconds=0.01):
        attempts.running = [("job-1", 1)]
        assert attempts.not_preempted()
        # Files without a manifest: not committed.
        (tmp_path / "ckpt" / "step-9").mkdir(parents=True)
        (tmp_path / "ckpt" / "step-9" / "w").write_bytes(b"half")
        assert attempts.not_preempted()
    assert attempts.preempted == []


@pytest.mark.parametrize(
    ("kwargs", "needle"), [({"count": -1}, "count"), ({"poll_seconds": 0}, "poll")]
)
def test_bad_arguments_are_named(tmp_path, kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        CheckpointPreemptionDrill(str(tmp_path), list, print, **kwargs)


def test_a_job_whose_checkpoint_root_is_found_later_is_preempted_after_its_own_commit(tmp_path):
    """For any pipeline: the root comes from the job (None while the emulator cannot say)."""
    root = str(tmp_path / "job-1" / "checkpoints")
    checkpoints.write_step(root, 3, {"w": b"old"})
    known: dict[str, str | None] = {"job-1": None}
    attempts = Attempts()
    with CheckpointPreemptionDrill(
        known.get, attempts, attempts.preempt, count=1, poll_seconds=0.01
    ) as drill:
        attempts.running = [("job-1", 1)]
        assert attempts.not_preempted()  # root unknown: never a baseline of "no step"
        known["job-1"] = root
        assert attempts.not_preempted(), "preempted on the step an earlier attempt left"
        checkpoints.write_step(root, 4, {"w": b"new"})
        assert attempts.event.wait(60)
    assert drill.preempted_at_steps == [4]
