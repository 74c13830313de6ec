"""Keras example trainer. Keras picks its backend on first import: JAX (on CPU) unless set."""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")
