"""One re-entrant stand-in for a function of kfp.local, for as long as a local run needs it.

A local run changes two things in kfp.local for its duration (:mod:`local_placeholders`,
:mod:`local_tasks`): each is a module attribute kfp.local looks up at each use, replaced while at
least one ``with`` of it is active in this process and put back by the last exit, also when runs
nest or overlap in threads.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable, Iterator
from typing import Any


class Standin:
    """``module.attribute`` replaced by ``make(original)`` while a :meth:`active` is entered.

    Args:
        module: the module's import name (imported at the first entry, not before).
        attribute: the function's name in it.
        make: builds the stand-in from the original function.
    """

    def __init__(self, module: str, attribute: str, make: Callable[[Any], Any]) -> None:
        self.module, self.attribute, self._make = module, attribute, make
        self._lock = threading.Lock()
        self._depth = 0
        self._original: Any = None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Re-entrant: the first entry puts the stand-in in place, the last exit the original."""
        target = importlib.import_module(self.module)
        with self._lock:
            if self._depth == 0:
                self._original = getattr(target, self.attribute)
                setattr(target, self.attribute, self._make(self._original))
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    setattr(target, self.attribute, self._original)
                    self._original = None
