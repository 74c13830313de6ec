"""The digits data set bundled with scikit-learn (nothing is downloaded) and a fixed split."""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits

TEST_FRACTION = 0.25


def split(split_seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(X_train, y_train, X_test, y_test)``: a held-out quarter fixed by ``split_seed``."""
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    order = np.random.default_rng(split_seed).permutation(len(y))
    n_test = round(len(y) * TEST_FRACTION)
    return X[order[n_test:]], y[order[n_test:]], X[order[:n_test]], y[order[:n_test]]


def scores(probs: np.ndarray, y: np.ndarray) -> dict:
    """Accuracy, log loss and the confusion matrix (rows: true labels) of class probabilities."""
    predicted = probs.argmax(axis=1)
    labels = list(range(probs.shape[1]))
    matrix = np.zeros((len(labels), len(labels)), dtype=np.int64)
    np.add.at(matrix, (y, predicted), 1)
    return {
        "accuracy": float((predicted == y).mean()),
        "log_loss": float(-np.log(probs[np.arange(len(y)), y] + 1e-12).mean()),
        "examples": float(len(y)),
        "confusion_matrix": {"labels": labels, "matrix": matrix.tolist()},
    }
