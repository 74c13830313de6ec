"""Reproducible training packages: build, validate and stage them, named by their sha256.

Runtime of the ``prepare_package`` component (no kfp import). ``prepare_package`` works without
KFP; ``component_entry`` adapts it to the component's artifacts.

The names below load on first use (PEP 562): a module that needs one part (the evaluator's
``kfp_spot.packaging.sources``, ``kfp-spot run``'s ``kfp_spot.packaging.build``) does not import
the whole of prepare_package with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kfp_spot.packaging.component import component_entry
    from kfp_spot.packaging.core import (
        PackageInfo,
        check_package_uris,
        prepare_package,
    )
    from kfp_spot.packaging.errors import (
        BuildError,
        ImportCheckError,
        MissingProjectFileError,
        ModuleNotInPackageError,
        ModuleSyntaxError,
        PackageUrisError,
        PackagingError,
        SourceError,
    )
    from kfp_spot.vertex import MAX_PACKAGE_URIS

__all__ = [
    "MAX_PACKAGE_URIS",
    "BuildError",
    "ImportCheckError",
    "MissingProjectFileError",
    "ModuleNotInPackageError",
    "ModuleSyntaxError",
    "PackageInfo",
    "PackageUrisError",
    "PackagingError",
    "SourceError",
    "check_package_uris",
    "component_entry",
    "prepare_package",
]

# name -> the module that defines it
_HOMES = {
    "MAX_PACKAGE_URIS": "kfp_spot.vertex",
    "component_entry": "kfp_spot.packaging.component",
    "PackageInfo": "kfp_spot.packaging.core",
    "check_package_uris": "kfp_spot.packaging.core",
    "prepare_package": "kfp_spot.packaging.core",
    **{
        name: "kfp_spot.packaging.errors"
        for name in (
            "BuildError",
            "ImportCheckError",
            "MissingProjectFileError",
            "ModuleNotInPackageError",
            "ModuleSyntaxError",
            "PackageUrisError",
            "PackagingError",
            "SourceError",
        )
    },
}


def __getattr__(name: str) -> Any:
    """The public name ``name``, imported from its module on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next use is a plain attribute
    return value
