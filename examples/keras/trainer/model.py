"""The model: a small Keras MLP with dropout on the 8x8 digits."""

from __future__ import annotations

import keras  # the backend is chosen in trainer/__init__.py


def build(*, hidden: int = 64, dropout: float = 0.2, learning_rate: float = 1e-2) -> keras.Model:
    """A compiled MLP (64 inputs, ``hidden`` ReLU units, dropout, 10 softmax outputs)."""
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(hidden, activation="relu"),
            keras.layers.Dropout(dropout),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model
