"""kfp-spot parses Python source safely from several threads at once (the emulator's runners do)."""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path

import kfp_spot
from kfp_spot.packaging import imports

_SOURCE = Path(kfp_spot.__file__).parent.joinpath("checkpoints", "write.py").read_text()


class _Cycle:
    """Garbage only the cycle collector frees, whose finalizer lets another thread run."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0)


def test_threads_parse_at_once_while_finalizers_run() -> None:
    # On CPython 3.11 a bare ast.parse fails here within a few dozen parses: a collection during
    # one thread's parse runs a finalizer, another thread parses, and the first one's AST
    # constructor finds its shared recursion count changed ("recursion depth mismatch").
    errors: list[BaseException] = []

    def work(depth: int) -> None:
        if depth:  # each thread parses from a different stack depth
            work(depth - 1)
            return
        for _ in range(25):
            for _ in range(50):
                _Cycle()
            try:
                imports.parse(_SOURCE, "write.py")
            except SystemError as exc:
                errors.append(exc)
                return

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        threads = [threading.Thread(target=work, args=(d,)) for d in (0, 2, 5, 9)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


def test_kfp_spot_parses_source_only_through_the_threadsafe_parse() -> None:
    root = Path(kfp_spot.__file__).parent
    offenders = [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "imports.py" or path.parent.name != "packaging"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bast\.parse\(", line) and not line.lstrip().startswith(('"', "#"))
    ]
    assert offenders == []
