"""``kfp-spot emulator ...``: the local Vertex AI training emulator."""

from __future__ import annotations

import click


@click.group()
def emulator() -> None:
    """Run and drive the local Vertex AI CustomJob emulator."""
