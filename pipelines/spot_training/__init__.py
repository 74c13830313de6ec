"""The spot_training pipeline."""

from kfp_spot.pipelines.spot_training.pipeline import spot_training

__all__ = ["spot_training"]
