"""The promote_model component."""

from kfp_spot.components.promote_model.component import promote_model as PromoteModelOp

__all__ = ["PromoteModelOp"]
