"""A lightweight component that returns its input (a module of its own: no __future__ annotations,
which KFP cannot read)."""

from kfp import dsl


@dsl.component
def echo(text: str) -> str:
    """Return ``text`` as it arrived in the task."""
    return text
