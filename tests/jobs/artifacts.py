"""An artifact stand-in: the runtime code only reads and sets .uri, .path and .metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeArtifact:
    uri: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    path: str = ""
