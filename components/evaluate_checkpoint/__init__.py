"""The evaluate_checkpoint component."""

from kfp_spot.components.evaluate_checkpoint.component import evaluate_checkpoint

EvaluateCheckpointOp = evaluate_checkpoint

__all__ = ["EvaluateCheckpointOp", "evaluate_checkpoint"]
