"""GAPIC modules without their packages' import-all ``__init__``: :func:`defer_package_inits`.

``google.cloud.aiplatform_v1/__init__.py`` imports every service's client and every type module
(about 500 modules, 0.9 s of CPU); ``types/__init__.py`` and ``services/__init__.py`` do the same
for their halves. A task that builds one CustomJob and talks to the JobService needs a tenth of
that. Python 3.15 defers these imports by itself (the packages declare ``__lazy_modules__``,
PEP 810); on earlier Pythons :func:`defer_package_inits` does it for kfp-spot's own processes.

How: each of the three packages is put into ``sys.modules`` as it would be imported, but without
running its ``__init__``. A submodule (``google.cloud.aiplatform_v1.types.custom_job``) then
imports as usual, with exactly the modules it imports itself. The first time anything asks a
deferred package for a name it lacks (``from google.cloud.aiplatform_v1 import
JobServiceClient``, ``aiplatform_v1.types.JobState``, a star import, ``dir()``), its ``__init__``
runs into the same module object and the name is there: the package is then the one a plain
import makes, so code that does not know of the deferral (the SDK, GCPC, a user's own) sees no
difference.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from typing import Any

PACKAGES = (
    "google.cloud.aiplatform_v1",
    "google.cloud.aiplatform_v1.services",
    "google.cloud.aiplatform_v1.types",
)
"""The packages whose ``__init__`` imports everything below them, parents first."""

_LOCK = threading.RLock()


def defer_package_inits() -> None:
    """Let :data:`PACKAGES`' submodules be imported without the packages' ``__init__`` (once).

    Does nothing when ``google.cloud.aiplatform_v1`` is already imported (deferred or not):
    a process that has paid for the whole package keeps it.
    """
    with _LOCK:
        if PACKAGES[0] in sys.modules:
            return
        for name in PACKAGES:
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None or spec.submodule_search_locations is None:
                return  # not installed as a package: a plain import says so, when it comes
            module = importlib.util.module_from_spec(spec)
            complete = _completer(module, spec)
            module.__dict__["__getattr__"] = complete
            module.__dict__["__dir__"] = lambda complete=complete: complete(None)
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            setattr(sys.modules[parent], child, module)


def is_deferred(name: str) -> bool:
    """Whether package ``name`` is in ``sys.modules`` with its ``__init__`` not yet run."""
    module = sys.modules.get(name)
    return module is not None and getattr(module.__dict__.get("__getattr__"), "_kfp_spot", False)


def _completer(module: types.ModuleType, spec: importlib.machinery.ModuleSpec) -> Any:
    running = False

    def __getattr__(attr: str | None) -> Any:
        """``attr`` of the package, its ``__init__`` run first; None: its names (``__dir__``)."""
        nonlocal running
        # A submodule (``from google.cloud.aiplatform_v1.types import custom_job``, the form
        # GAPIC's own modules import each other in) is imported alone, as the deferral is for;
        # the package's __init__ would have imported it too.
        submodule = f"{module.__name__}.{attr}"
        if attr and not attr.startswith("__") and importlib.util.find_spec(submodule) is not None:
            return importlib.import_module(submodule)
        with _LOCK:
            if module.__dict__.get("__getattr__") is __getattr__ and not running:
                running = True
                try:
                    assert spec.loader is not None  # checked by defer_package_inits
                    spec.loader.exec_module(module)
                finally:
                    running = False
                    if module.__dict__.get("__getattr__") is __getattr__:
                        del module.__dict__["__getattr__"]
                        module.__dict__.pop("__dir__", None)
        if attr is None:
            return sorted(module.__dict__)
        try:
            return module.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {module.__name__!r} has no attribute {attr!r}") from None

    __getattr__._kfp_spot = True  # type: ignore[attr-defined]
    return __getattr__
