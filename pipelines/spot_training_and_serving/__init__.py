"""The spot_training_and_serving pipeline."""
