"""Heavy packages imported lighter in kfp-spot's own processes, nothing else seeing a difference.

What the packages' ``__init__``s load that the process never uses is left out.

- :func:`defer_gapic_packages`: ``google.cloud.aiplatform_v1/__init__.py`` imports every
  service's client and every type module (about 500 modules, 0.9 s of CPU); ``types/__init__.py``
  and ``services/__init__.py`` do the same for their halves. A task that builds one CustomJob and
  talks to the JobService needs a tenth of that. Python 3.15 defers these imports by itself (the
  packages declare ``__lazy_modules__``, PEP 810); on earlier Pythons this does it.
  How: each of the three packages is put into ``sys.modules`` as it would be imported, but
  without running its ``__init__``. A submodule (``google.cloud.aiplatform_v1.types.custom_job``)
  then imports as usual, with exactly the modules it imports itself. The first time anything asks
  a deferred package for a name it lacks (``from google.cloud.aiplatform_v1 import
  JobServiceClient``, ``aiplatform_v1.types.JobState``, a star import, ``dir()``), its
  ``__init__`` runs into the same module object and the name is there: the package is then the
  one a plain import makes, so code that does not know of the deferral (the SDK, GCPC, a user's
  own) sees no difference.
- :func:`kfp_without_client`: ``import kfp`` imports ``kfp.Client`` and with it the Kubernetes
  client (0.36 s of CPU), unless ``_KFP_RUNTIME=true``, which KFP's own task command sets for the
  same reason. No command of the CLI uses the client (compile, run and submit use ``kfp.dsl``,
  ``kfp.local`` and ``kfp.compiler``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Sequence
from typing import Any

GAPIC_PACKAGES = (
    "google.cloud.aiplatform_v1",
    "google.cloud.aiplatform_v1.services",
    "google.cloud.aiplatform_v1.types",
)
"""The packages whose ``__init__`` imports everything below them, parents first."""

_LOCK = threading.RLock()


def defer_gapic_packages() -> None:
    """Let :data:`GAPIC_PACKAGES`' submodules be imported without the packages' ``__init__`` (once).

    Does nothing when ``google.cloud.aiplatform_v1`` is already imported (deferred or not):
    a process that has paid for the whole package keeps it.
    """
    with _LOCK:
        if GAPIC_PACKAGES[0] in sys.modules:
            return
        for name in GAPIC_PACKAGES:
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
                    assert spec.loader is not None  # checked by defer_gapic_packages
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


KFP_RUNTIME = "_KFP_RUNTIME"
"""What KFP's task command sets (``_KFP_RUNTIME=true``) so that ``import kfp`` skips its client."""


def kfp_without_client() -> None:
    """Have ``kfp`` imported as KFP's task processes import it, without ``kfp.Client``.

    Nothing is imported now: when ``kfp`` is (a broken template is refused before that), its
    ``__init__`` runs with ``_KFP_RUNTIME=true`` set for that moment only, so processes started
    later do not inherit it, and its loader is the usual one again after. ``kfp.dsl``,
    ``kfp.local``, ``kfp.compiler`` and ``kfp.components`` import as usual. Does nothing when
    ``kfp`` is already imported.
    """
    with _LOCK:
        if "kfp" not in sys.modules and not any(
            isinstance(f, _KfpWithoutClient) for f in sys.meta_path
        ):
            sys.meta_path.insert(0, _KfpWithoutClient())


class _KfpWithoutClient(importlib.abc.MetaPathFinder):
    """Finds ``kfp`` once, as the other finders would, with its loader in a _RuntimeLoader."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "kfp":
            return None
        with _LOCK:
            if self in sys.meta_path:
                sys.meta_path.remove(self)  # once; and the search below is the usual one
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _RuntimeLoader(spec.loader)
        return spec


class _RuntimeLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        saved = os.environ.get(KFP_RUNTIME)
        os.environ[KFP_RUNTIME] = "true"
        try:
            self._loader.exec_module(module)
        finally:
            if saved is None:
                os.environ.pop(KFP_RUNTIME, None)
            else:
                os.environ[KFP_RUNTIME] = saved
            module.__loader__ = self._loader
            if module.__spec__ is not None:
                module.__spec__.loader = self._loader
