"""The continue_training pipeline."""

from kfp_spot.pipelines.continue_training.pipeline import continue_training

__all__ = ["continue_training"]
