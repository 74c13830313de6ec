"""Errors of prepare_package: each names the argument at fault and what would be valid."""

from __future__ import annotations


class PackagingError(ValueError):
    """A training package cannot be prepared.

    Attributes:
        field: the argument at fault (``source``, ``python_module``, ``extra_package_uris``, ...).
    """

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


class SourceError(PackagingError):
    """The source is missing, unreadable or of a kind that cannot be packaged."""


class MissingProjectFileError(SourceError):
    """A source directory has no project file and is not a Python package either."""


class BuildError(PackagingError):
    """The PEP 517 build failed; the message holds the end of the build's output."""


class ModuleNotInPackageError(PackagingError):
    """The python module the job runs is not in the built package."""


class ModuleSyntaxError(PackagingError):
    """A module of the package does not compile."""


class PackageUrisError(PackagingError):
    """The extra package URIs are invalid or, with the trainer, exceed the service's limit."""


class ImportCheckError(PackagingError):
    """The python module does not import in a fresh environment with the package installed."""
