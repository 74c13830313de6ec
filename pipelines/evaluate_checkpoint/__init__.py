"""The evaluate_checkpoint pipeline."""

from kfp_spot.pipelines.evaluate_checkpoint.pipeline import evaluate_checkpoint

__all__ = ["evaluate_checkpoint"]
