"""Deterministic fault injection, so tests can preempt a run at an exact point.

Set ``KFP_SPOT_FAILPOINTS`` in a training process's environment to a comma-separated list of
``ACTION@POINT:STEP``:

- ``ACTION``: ``kill`` (SIGKILL to itself: no grace, no handler) or ``term`` (SIGTERM to itself:
  the preemption notice, as the platform sends it).
- ``POINT``: ``step`` (after the step finished, before any save), ``save-mid`` (in the save of that
  step, after its first file was written), ``save-before-manifest`` (all files written, manifest
  not), ``save-after`` (just after the commit).

Example: ``KFP_SPOT_FAILPOINTS=kill@save-mid:40`` kills the process in the middle of the save of
step 40. Unset (the normal case) it costs one dictionary look-up per call.

A ``save-*`` point of a background (async) save fires in the writer thread while the training
loop goes on; however slow the storage or the machine, the loop does not pass the step after
the saved one until that point fired or the write ended without reaching it. The signal thus
lands at the same step of every run, and a later ``step`` point is sure to be reached.
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "KFP_SPOT_FAILPOINTS"
POINTS = ("step", "save-mid", "save-before-manifest", "save-after")
_ACTIONS = {"kill": signal.SIGKILL, "term": signal.SIGTERM}
_cache: tuple[str, dict[tuple[str, int], str]] | None = None
_fired: set[tuple[str, int]] = set()
# Background saves of a step with an armed save-* point: set once it fired or the write ended.
_pending: dict[int, threading.Event] = {}


def parse(spec: str) -> dict[tuple[str, int], str]:
    """Parse a failpoint spec into ``{(point, step): action}``.

    Raises:
        ValueError: naming the bad entry and the valid form.
    """
    out: dict[tuple[str, int], str] = {}
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            action, rest = entry.split("@", 1)
            point, step = rest.rsplit(":", 1)
            key = (point, int(step))
        except ValueError:
            raise ValueError(
                f"{ENV} entry {entry!r} is not ACTION@POINT:STEP (e.g. kill@save-mid:40)"
            ) from None
        if action not in _ACTIONS or point not in POINTS:
            raise ValueError(
                f"{ENV} entry {entry!r}: action must be one of {sorted(_ACTIONS)}, "
                f"point one of {list(POINTS)}"
            )
        out[key] = action
    return out


def _armed() -> dict[tuple[str, int], str]:
    """The failpoints the environment asks for (parsed once per spec); empty when unset."""
    global _cache
    spec = os.environ.get(ENV)
    if not spec:
        return {}
    if _cache is None or _cache[0] != spec:
        _cache = (spec, parse(spec))
    return _cache[1]


def background_save_started(step: int) -> None:
    """Call before a background write of ``step`` starts (in the thread that starts it)."""
    armed = _armed()
    if any((point, step) in armed and (point, step) not in _fired for point in POINTS[1:]):
        _pending[step] = threading.Event()


def background_save_ended(step: int) -> None:
    """Call when the background write of ``step`` ends, committed or not."""
    event = _pending.pop(step, None)
    if event is not None:
        event.set()


def hit(point: str, step: int) -> None:
    """Fire the failpoint ``point`` of ``step`` if the environment asks for it (once).

    At a ``step`` point the training loop first waits for a background save of an earlier step
    whose armed ``save-*`` point has not fired yet (see the module docstring).
    """
    armed = _armed()
    if not armed:
        return
    if point == "step":
        for saved, event in list(_pending.items()):
            if saved < step:
                event.wait()  # the writer sets it in a finally: once it fired or gave up
    action = armed.get((point, step))
    if action is None or (point, step) in _fired:
        return
    _fired.add((point, step))
    main = threading.main_thread()
    if threading.current_thread() is main:
        os.kill(os.getpid(), _ACTIONS[action])
    else:
        # From a background save: signal the main thread itself, as the platform's SIGTERM in
        # effect is (a signal taken by another thread reaches Python's handler only later).
        ident = main.ident
        assert ident is not None  # the main thread is always started
        signal.pthread_kill(ident, _ACTIONS[action])
        # The signal is pending in the main thread before the loop is let go (its handler runs
        # as soon as the main thread runs Python again).
        background_save_ended(step)
