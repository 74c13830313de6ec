"""The evaluate_checkpoint component."""
