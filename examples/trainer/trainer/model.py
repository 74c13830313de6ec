"""A one-hidden-layer MLP with softmax output, trained by minibatch SGD with momentum (NumPy)."""

from __future__ import annotations

from typing import Any

import numpy as np

N_CLASSES = 10


def init_params(rng: np.random.Generator, n_in: int, n_hidden: int) -> dict[str, np.ndarray]:
    """He-initialised weights, zero biases."""
    return {
        "W1": rng.normal(0.0, np.sqrt(2.0 / n_in), size=(n_in, n_hidden)),
        "b1": np.zeros(n_hidden),
        "W2": rng.normal(0.0, np.sqrt(2.0 / n_hidden), size=(n_hidden, N_CLASSES)),
        "b2": np.zeros(N_CLASSES),
    }


def predict_proba(params: dict[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """Class probabilities, shape ``(n, 10)``."""
    hidden = np.maximum(X @ params["W1"] + params["b1"], 0.0)
    logits = hidden @ params["W2"] + params["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    exp = np.exp(logits)
    return exp / exp.sum(axis=1, keepdims=True)


def sgd_step(
    params: dict[str, np.ndarray],
    velocity: dict[str, np.ndarray],
    X: np.ndarray,
    y: np.ndarray,
    *,
    learning_rate: float,
    momentum: float,
) -> float:
    """One minibatch update in place; returns the minibatch's cross-entropy before the update."""
    pre = X @ params["W1"] + params["b1"]
    hidden = np.maximum(pre, 0.0)
    logits = hidden @ params["W2"] + params["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    exp = np.exp(logits)
    probs = exp / exp.sum(axis=1, keepdims=True)
    n = len(y)
    loss = float(-np.log(probs[np.arange(n), y] + 1e-12).mean())
    d_logits = probs
    d_logits[np.arange(n), y] -= 1.0
    d_logits /= n
    grads = {"W2": hidden.T @ d_logits, "b2": d_logits.sum(axis=0)}
    d_hidden = (d_logits @ params["W2"].T) * (pre > 0)
    grads["W1"] = X.T @ d_hidden
    grads["b1"] = d_hidden.sum(axis=0)
    for name, grad in grads.items():
        velocity[name] *= momentum
        velocity[name] -= learning_rate * grad
        params[name] += velocity[name]
    return loss


def to_sklearn(params: dict[str, np.ndarray], X: np.ndarray, y: np.ndarray) -> Any:
    """The same network as a scikit-learn ``MLPClassifier`` (what Vertex's sklearn image serves).

    ``predict`` and ``predict_proba`` give what :func:`predict_proba` gives: ReLU hidden layer,
    softmax output, these weights. ``X``/``y`` (a few rows) only let scikit-learn set up its
    internals before the weights replace its own.
    """
    from sklearn.neural_network import MLPClassifier

    clf = MLPClassifier(hidden_layer_sizes=(params["W1"].shape[1],), random_state=0)
    clf.partial_fit(X, y, classes=np.arange(N_CLASSES))
    clf.coefs_ = [params["W1"].copy(), params["W2"].copy()]
    clf.intercepts_ = [params["b1"].copy(), params["b2"].copy()]
    return clf
