"""The digits data set bundled with scikit-learn, and the fixed train/held-out split."""

from __future__ import annotations

import importlib.util
import os

import numpy as np

TEST_FRACTION = 0.25
N_DIGITS = 1797
"""Rows of the digits data set (8x8 images: 64 features)."""
N_FEATURES = 64


def n_train(split_seed: int) -> int:
    """Rows of the training split, without loading the data (the split's size is fixed)."""
    del split_seed  # every seed splits off the same number of rows
    return N_DIGITS - round(N_DIGITS * TEST_FRACTION)


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1797 8x8 digits as ``(X float64 in [0, 1], y int64)``; nothing is downloaded.

    Reads the CSV that ships inside scikit-learn without importing scikit-learn, which takes
    over a second: a resumed attempt should be back to training quickly.
    """
    spec = importlib.util.find_spec("sklearn")
    path = None
    if spec is not None and spec.submodule_search_locations:
        path = os.path.join(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz")
    if path is not None and os.path.exists(path):
        raw = np.loadtxt(path, delimiter=",")
        X, y = raw[:, :-1], raw[:, -1].astype(np.int64)
    else:  # a scikit-learn that keeps the file elsewhere
        from sklearn.datasets import load_digits as sk_load_digits

        X, y = sk_load_digits(return_X_y=True)
        y = y.astype(np.int64)
    return X.astype(np.float64) / 16.0, y


def split(split_seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(X_train, y_train, X_test, y_test)``: a held-out quarter fixed by ``split_seed``.

    The training run never sees the held-out rows; evaluation scores only them.
    """
    X, y = load_digits()
    if X.shape != (N_DIGITS, N_FEATURES):
        raise ValueError(f"the digits data set has shape {X.shape}, not {(N_DIGITS, N_FEATURES)}")
    order = np.random.default_rng(split_seed).permutation(len(y))
    n_test = round(len(y) * TEST_FRACTION)
    test, train = order[:n_test], order[n_test:]
    return X[train], y[train], X[test], y[test]
