"""Fixtures for the elastic example's tests (the emulator tests' helpers, reused)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.emulator.conftest import http, wait_until


@pytest.fixture
def api() -> Callable[..., tuple[int, dict[str, Any]]]:
    """One JSON request to the emulator: (status, body)."""
    return http


@pytest.fixture
def until() -> Callable[..., Any]:
    """Wait for a condition with a bounded timeout."""
    return wait_until
