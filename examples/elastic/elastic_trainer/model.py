"""The model and data of the elastic example: a small MLP on a synthetic classification task.

Everything is a pure function of the seed and the step number, so any replica can compute any
part of any step and get the same bits:

- the data set is drawn from ``--data-seed``; the examples of step *s* are a slice of that
  epoch's permutation (drawn from ``(seed, epoch)``), so no data-order state needs saving;
- a step's global batch is cut into a fixed number of *chunks*; a replica returns the summed
  gradient of each chunk it was given, and the chief adds the chunks up in chunk order. Who
  computed which chunk (three replicas, or two while a worker is away) never changes the sum, so
  a run with preemptions ends with the same weights as one without.
"""

from __future__ import annotations

import hashlib

import numpy as np

N_FEATURES = 16
N_CLASSES = 4
PARAM_NAMES = ("w1", "b1", "w2", "b2")


def dataset(seed: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A learnable synthetic task: labels from a random linear teacher plus noise."""
    rng = np.random.default_rng([seed, 0])
    x = rng.normal(size=(size, N_FEATURES))
    teacher = rng.normal(size=(N_FEATURES, N_CLASSES))
    logits = x @ teacher + 0.5 * rng.normal(size=(size, N_CLASSES))
    return x, logits.argmax(axis=1)


def init_params(seed: int, hidden: int) -> dict[str, np.ndarray]:
    """Initial weights (scaled normal), biases zero."""
    rng = np.random.default_rng([seed, 1])
    return {
        "w1": rng.normal(scale=1.0 / np.sqrt(N_FEATURES), size=(N_FEATURES, hidden)),
        "b1": np.zeros(hidden),
        "w2": rng.normal(scale=1.0 / np.sqrt(hidden), size=(hidden, N_CLASSES)),
        "b2": np.zeros(N_CLASSES),
    }


def pack(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The arrays as one float64 vector, in ``PARAM_NAMES`` order."""
    return np.concatenate([arrays[name].ravel() for name in PARAM_NAMES])


def unpack(vector: np.ndarray, like: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inverse of :func:`pack`, shaped like ``like``."""
    out, offset = {}, 0
    for name in PARAM_NAMES:
        size = like[name].size
        out[name] = vector[offset : offset + size].reshape(like[name].shape)
        offset += size
    return out


def digest(params: dict[str, np.ndarray]) -> str:
    """A short fingerprint of the weights (replicas compare theirs with the chief's)."""
    return hashlib.sha256(pack(params).tobytes()).hexdigest()[:16]


def batch_indices(step: int, size: int, batch_size: int, seed: int) -> np.ndarray:
    """The examples of step ``step`` (1-based): a slice of its epoch's permutation."""
    per_epoch = size // batch_size
    epoch, position = divmod(step - 1, per_epoch)
    order = np.random.default_rng([seed, 2, epoch]).permutation(size)
    return order[position * batch_size : (position + 1) * batch_size]


def chunk_of(indices: np.ndarray, chunk: int, chunks: int) -> np.ndarray:
    """The examples of one chunk of a step's batch."""
    return np.array_split(indices, chunks)[chunk]


def chunk_gradient(
    params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, float]:
    """Summed (not averaged) gradient of the cross-entropy over the examples, and summed loss."""
    hidden = np.tanh(x @ params["w1"] + params["b1"])
    logits = hidden @ params["w2"] + params["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    loss = float(-np.log(probs[np.arange(len(y)), y] + 1e-12).sum())
    delta = probs
    delta[np.arange(len(y)), y] -= 1.0
    grads = {"w2": hidden.T @ delta, "b2": delta.sum(axis=0)}
    back = (delta @ params["w2"].T) * (1.0 - hidden**2)
    grads["w1"] = x.T @ back
    grads["b1"] = back.sum(axis=0)
    return pack(grads), loss


def apply_update(
    params: dict[str, np.ndarray],
    velocity: dict[str, np.ndarray],
    gradient_sum: np.ndarray,
    *,
    batch_size: int,
    learning_rate: float,
    momentum: float,
) -> None:
    """SGD with momentum, in place, from a step's summed gradient (every replica does the same)."""
    grads = unpack(gradient_sum / batch_size, params)
    for name in PARAM_NAMES:
        velocity[name] *= momentum
        velocity[name] -= learning_rate * grads[name]
        params[name] += velocity[name]


def accuracy(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """Share of examples classified right."""
    hidden = np.tanh(x @ params["w1"] + params["b1"])
    return float(((hidden @ params["w2"] + params["b2"]).argmax(axis=1) == y).mean())
