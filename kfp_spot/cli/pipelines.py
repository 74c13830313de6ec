"""``kfp-spot run`` and ``kfp-spot compile``."""

from __future__ import annotations

COMMANDS: list = []
