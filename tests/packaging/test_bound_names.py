"""Which names a module binds, read statically (the evaluation entry point's checks)."""

from __future__ import annotations

import ast

import pytest

from kfp_spot.packaging.imports import bound_names, functions


@pytest.mark.parametrize(
    ("source", "bound", "unbound"),
    [
        ("def evaluate(d, p):\n    return {}\n", "evaluate", "evaluat"),
        ("async def evaluate(d, p):\n    return {}\n", "evaluate", "score"),
        ("from m import f as evaluate\n", "evaluate", "f"),
        ("import a.b\n", "a", "b"),
        ("evaluate = make()\n", "evaluate", "make"),
        ("x: int = 1\nif x:\n    def evaluate(d, p): ...\n", "evaluate", "y"),
        (
            "try:\n    from fast import evaluate\nexcept ImportError:\n    evaluate = None\n",
            "evaluate",
            "fast",
        ),
        ("for evaluate in [len]:\n    pass\n", "evaluate", "len"),
        ("with open('f') as evaluate:\n    pass\n", "evaluate", "open"),
        ("print(evaluate := len)\n", "evaluate", "x"),
        ("def setup():\n    global evaluate\n    evaluate = len\n", "evaluate", "len"),
        ("class Evaluator:\n    def evaluate(self): ...\n", "Evaluator", "evaluate"),
    ],
)
def test_names_a_module_binds(source: str, bound: str, unbound: str) -> None:
    names = bound_names(ast.parse(source))
    assert names is not None and bound in names and unbound not in names


@pytest.mark.parametrize(
    "source",
    [
        "from m import *\n",
        "def __getattr__(name):\n    return len\n",
        "globals()['evaluate'] = len\n",
        "exec('def evaluate(): pass')\n",
        "import sys\nsetattr(sys.modules[__name__], 'evaluate', len)\n",
        "match 1:\n    case 1:\n        def evaluate(): ...\n",
    ],
)
def test_a_module_that_may_bind_names_dynamically_concludes_nothing(source: str) -> None:
    assert bound_names(ast.parse(source)) is None


def test_functions_lists_the_public_top_level_ones_sorted() -> None:
    tree = ast.parse("def b(): ...\nasync def a(): ...\ndef _c(): ...\nclass D: ...\n")
    assert functions(tree) == ["a", "b"]
