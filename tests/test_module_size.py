"""No module of kfp-spot over ~400 lines without a reason written at its top.

A long module is where a newcomer's change has to be made in several places at once. A module may
still be long when one concern really is that big (a state machine, one API surface, one table):
its docstring then says so in a paragraph starting ``Why one module:``, so the next reader sees
the decision and can argue with it, instead of finding the length by accident.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREES = (ROOT / "kfp_spot", ROOT / "components", ROOT / "pipelines")
MAX_LINES = 400
MARKER = "Why one module:"
# A reason is a sentence, not the marker alone.
MIN_REASON_WORDS = 12


def _modules() -> list[Path]:
    return sorted(p for tree in TREES for p in tree.rglob("*.py"))


def reason(source: str) -> str | None:
    """The text after ``Why one module:`` in a module's docstring, up to the paragraph's end."""
    doc = ast.get_docstring(ast.parse(source))
    if not doc or MARKER not in doc:
        return None
    return doc.split(MARKER, 1)[1].split("\n\n", 1)[0].strip()


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_long_module_says_why_at_its_top(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    lines = len(source.splitlines())
    if lines <= MAX_LINES:
        return
    why = reason(source)
    assert why is not None and len(why.split()) >= MIN_REASON_WORDS, (
        f"{path.relative_to(ROOT)} has {lines} lines (over {MAX_LINES}): split it by concern, or "
        f"end its module docstring with a paragraph '{MARKER} <the reason, one or two sentences>'"
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('"""Title.\n\nWhy one module: one state machine, every transition here."""\n', True),
        ('"""Title.\n\nWhy one module:\n\nNext paragraph."""\n', False),
        ('"""Title only."""\n', False),
        ("x = 1\n", False),
    ],
)
def test_reason_reads_the_paragraph_after_the_marker(source: str, expected: bool) -> None:
    found = reason(source)
    assert bool(found) is expected
