"""A cancellation whose signal lands inside a finalizer is not lost.

Python runs signal handlers between bytecodes of the main thread, also inside an object's
``__del__`` (the CI run that found this: an HTTP response's temporary file closed by the garbage
collector), where an exception is dropped with "Exception ignored in ...". The launcher then went
on as if never cancelled and ended with exit 1 instead of cancelling its CustomJob.
"""

from __future__ import annotations

import signal
import sys
import threading

import pytest

from kfp_spot.vertex import signals
from kfp_spot.vertex.signals import LaunchInterruptedError, cancel_on_signals


class _SignalledWhileFinalized:
    """Raises SIGTERM from its ``__del__``: the handler runs, and raises, inside the finalizer."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGTERM)


def test_a_signal_dropped_by_a_finalizer_is_raised_at_the_next_sleep(capsys):
    slept: list[float] = []
    with pytest.raises(LaunchInterruptedError) as caught, cancel_on_signals():
        obj = _SignalledWhileFinalized()
        del obj  # the handler's error is raised in __del__, and Python drops it
        slept.append(0.0)
        signals.sleep(0.0)  # the launcher's next wait
        slept.append(1.0)
    assert caught.value.signum == signal.SIGTERM
    assert slept == [0.0]
    assert "Exception ignored" not in capsys.readouterr().err


def test_a_delivered_signal_is_not_raised_again_while_cancelling():
    cancelled: list[bool] = []
    with pytest.raises(LaunchInterruptedError), cancel_on_signals():
        try:
            signal.raise_signal(signal.SIGTERM)
        except LaunchInterruptedError:
            signals.sleep(0.0)  # the cancel path's retries wait too
            cancelled.append(True)
            raise
    assert cancelled == [True]


def test_a_dropped_signal_is_raised_in_the_main_thread_only():
    waited: list[str] = []

    def poll_elsewhere() -> None:
        signals.sleep(0.0)
        waited.append("the other thread went on")

    with pytest.raises(LaunchInterruptedError), cancel_on_signals():
        obj = _SignalledWhileFinalized()
        del obj
        other = threading.Thread(target=poll_elsewhere)
        other.start()
        other.join()
        signals.sleep(0.0)
    assert waited == ["the other thread went on"]


def test_other_dropped_exceptions_still_reach_the_previous_hook(monkeypatch):
    seen: list[BaseException] = []
    monkeypatch.setattr("sys.unraisablehook", lambda args: seen.append(args.exc_value))

    class Faulty:
        def __del__(self) -> None:
            raise ValueError("not ours")

    with cancel_on_signals():
        obj = Faulty()
        del obj
        signals.sleep(0.0)
    assert [type(e) for e in seen] == [ValueError]


def test_the_handlers_and_hook_are_restored(monkeypatch):
    def hook(_args: object) -> None:
        return None

    monkeypatch.setattr("sys.unraisablehook", hook)
    before = signal.getsignal(signal.SIGTERM)
    with cancel_on_signals():
        pass
    assert sys.unraisablehook is hook
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_inside_a_held_block_is_raised_as_the_block_ends():
    # subprocess.Popen cut after its fork leaves a child no one can stop: the launch of a
    # process is held, and the signal raised once the caller has the handle
    done: list[str] = []
    with pytest.raises(LaunchInterruptedError) as caught, cancel_on_signals():
        with signals.held():
            signal.raise_signal(signal.SIGTERM)
            done.append("held")
        done.append("after")
    assert caught.value.signum == signal.SIGTERM
    assert done == ["held"]


def test_a_held_signal_wins_over_the_blocks_own_error_and_held_alone_does_nothing():
    with pytest.raises(LaunchInterruptedError), cancel_on_signals(), signals.held():
        signal.raise_signal(signal.SIGINT)
        raise OSError("the process could not start")
    with signals.held():  # outside cancel_on_signals: nothing to hold
        pass
    with pytest.raises(LaunchInterruptedError), cancel_on_signals():  # the block is reusable
        with signals.held():
            pass
        signal.raise_signal(signal.SIGTERM)
