"""``kfp-spot push|pull|tags``, ``registry serve`` and ``report``."""

from __future__ import annotations

COMMANDS: list = []
