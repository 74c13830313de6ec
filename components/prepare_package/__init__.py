"""The prepare_package component."""

from kfp_spot.components.prepare_package.component import prepare_package

PreparePackageOp = prepare_package

__all__ = ["PreparePackageOp", "prepare_package"]
