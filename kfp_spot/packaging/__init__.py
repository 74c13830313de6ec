"""Reproducible training packages: build, validate and stage them, named by their sha256.

Runtime of the ``prepare_package`` component (no kfp import). ``prepare_package`` works without
KFP; ``component_entry`` adapts it to the component's artifacts.
"""

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
