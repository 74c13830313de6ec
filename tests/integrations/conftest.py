"""Fixtures for the framework integration tests."""

from __future__ import annotations

import os

# Keras 3 picks its backend when first imported; these tests (and the example trainers they run
# as subprocesses) use JAX on CPU.
os.environ.setdefault("KERAS_BACKEND", "jax")
