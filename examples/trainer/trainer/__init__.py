"""Example Spot training package: a small MLP on scikit-learn's bundled digits data set.

``python -m trainer.task`` trains it with checkpoints in ``$AIP_CHECKPOINT_DIR`` and resumes after a
preemption; ``trainer.evaluate:evaluate`` scores a checkpoint on the held-out split.
"""

__version__ = "0.1.0"
