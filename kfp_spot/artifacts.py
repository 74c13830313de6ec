"""What runtime code uses of a KFP artifact, typed without importing kfp.

The component adapters (``component_entry`` functions) receive ``dsl.Artifact`` objects from the
KFP executor; this protocol is the part of them they touch, so the adapters stay importable and
testable without KFP.
"""

from __future__ import annotations

from typing import Any, Protocol


class Artifact(Protocol):
    """A KFP input or output artifact (``dsl.Artifact`` and its subclasses fit)."""

    uri: str
    """Where the artifact lives (``gs://...`` on Vertex AI, a local path under kfp.local)."""

    metadata: dict[str, Any]
    """The artifact's metadata; KFP records what an output's adapter puts here."""

    @property
    def path(self) -> str:
        """The local path of :attr:`uri` (a FUSE path for ``gs://`` on Vertex AI)."""
        ...
