"""Which way a metric recorded with a checkpoint step ranks: smaller or larger is better.

One rule for every reader of a root's metrics: the trainer's ``keep_best`` retention, the
evaluation's ``best:<metric>`` and its thresholds. No kfp import: it ships in the
kfp-spot-trainer wheel.
"""

from __future__ import annotations

import re

# Names where smaller is better: ending in one of these, or holding one as a word (``rmse_val``,
# ``mse-test``, ``loss/valid``). Frameworks' own loss names among them: Keras's
# ``sparse_categorical_crossentropy``, ``kl_divergence``, ``hinge``, ``logcosh``, ``huber``;
# XGBoost's ``poisson-nloglik``, ``gamma-deviance``, ``mphe``; scikit-learn's
# ``mean_poisson_deviance``, ``brier_score``.
MIN_SUFFIXES = (
    "loss",
    "error",
    "err",
    "mse",
    "mae",
    "rmse",
    "perplexity",
    "crossentropy",
    "divergence",
    "deviance",
    "nloglik",
    "hinge",
)
MIN_WORDS = frozenset(
    {
        *MIN_SUFFIXES,
        *("mape", "smape", "msle", "rmsle", "nll", "wer", "cer", "ppl"),
        *("kld", "logcosh", "huber", "mphe", "brier"),
    }
)


NEGATED = "neg"
"""A word of scikit-learn's negated scorers (``neg_log_loss``, ``test_neg_mean_squared_error``
from ``cross_validate``): a loss with its sign flipped, so that larger is better."""


def smaller_is_better(metric: str) -> bool:
    """Whether the metric's name says a smaller value is better (``rmse``, ``loss_val``).

    Not for a negated one (``neg_mean_squared_error``): larger is better, as for any of
    scikit-learn's scorers.
    """
    name = metric.lower()
    words = re.split(r"[^a-z0-9]+", name)
    if NEGATED in words:
        return False
    return name.endswith(MIN_SUFFIXES) or not MIN_WORDS.isdisjoint(words)


def default_mode(metric: str) -> str:
    """``"min"`` for a metric whose name says smaller is better, else ``"max"``."""
    return "min" if smaller_is_better(metric) else "max"
