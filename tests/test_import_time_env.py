"""No project module reads the environment when it is imported.

A value read at import time is fixed for the process: a launcher forked from a preloaded process,
a test that sets a variable after the import, a notebook that sets ``KFP_SPOT_*`` after
``import kfp_spot`` would all see the old one, and what a task or a job gets on Vertex AI (its
container's environment, set before it starts) would differ from what a local run saw. Reads
belong in the function that needs the value. This checks every module of the product
(``kfp_spot``, ``pipelines``, ``components``) statically: module-level statements,
class bodies, decorators and default values run at import; function bodies and lambdas do not.
The examples are users' packages, not the library: a Keras package sets ``KERAS_BACKEND`` in its
``__init__.py``, before Keras is imported, as Keras asks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("kfp_spot", "pipelines", "components")
ENV_NAMES = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})


def _is_env(node: ast.AST) -> bool:
    """``os.environ``/``os.getenv``/... or the bare names ``from os import ...`` gives."""
    if isinstance(node, ast.Attribute):
        return node.attr in ENV_NAMES and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id in ENV_NAMES


def _run_at_import(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes under ``node`` that run when its module is imported."""
    if isinstance(node, ast.Lambda):
        yield from _run_at_import(node.args)  # its defaults run; its body does not
        return
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for part in (*node.decorator_list, node.args, node.returns):
            if part is not None:
                yield from _run_at_import(part)
        return
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _run_at_import(child)


def env_reads_at_import(source: str) -> list[int]:
    """The lines of ``source`` that touch the environment when the module is imported."""
    tree = ast.parse(source)
    lines = set()
    for statement in tree.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            continue  # ``from os import environ`` names it; the use is what counts
        for node in _run_at_import(statement):
            if isinstance(node, ast.arguments):
                continue
            if _is_env(node):
                lines.add(node.lineno)
    return sorted(lines)


def _product_modules() -> list[Path]:
    files = []
    for top in PRODUCT:
        files.extend(p for p in (ROOT / top).rglob("*.py") if "kfp-spot-runs" not in p.parts)
    return sorted(files)


def test_no_product_module_reads_the_environment_at_import():
    found = []
    for path in _product_modules():
        for line in env_reads_at_import(path.read_text(encoding="utf-8")):
            found.append(f"{path.relative_to(ROOT)}:{line}")
    assert found == [], "environment read at import time (read it where it is used): " + ", ".join(
        found
    )


def test_the_product_has_modules_to_check():
    modules = _product_modules()
    assert len(modules) > 100
    assert ROOT / "kfp_spot" / "trainer" / "manager.py" in modules


@pytest.mark.parametrize(
    "source",
    [
        "import os\nPORT = os.environ['PORT']\n",
        "import os\nPORT = os.environ.get('PORT', '80')\n",
        "import os\nDEBUG = os.getenv('DEBUG')\n",
        "from os import environ\nSEEN = dict(environ)\n",
        "from os import getenv\nif getenv('X'):\n    pass\n",
        "import os\nclass C:\n    home = os.environ.get('HOME')\n",
        "import os\ndef f(home=os.environ.get('HOME')):\n    return home\n",
        "import os\n@register(os.getenv('NAME'))\ndef f():\n    pass\n",
        "import os\ntry:\n    X = os.environ['X']\nexcept KeyError:\n    X = ''\n",
        "import os\nf = lambda home=os.getenv('HOME'): home\n",
    ],
)
def test_the_checker_sees_a_read_at_import_however_it_is_written(source):
    assert env_reads_at_import(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "import os\ndef f():\n    return os.environ['PORT']\n",
        "import os\nclass C:\n    def home(self):\n        return os.getenv('HOME')\n",
        "from os import environ\nf = lambda: environ.get('X')\n",
        "import os\nasync def f():\n    return os.environ.get('X')\n",
        "import os\nPATH = os.path.join('a', 'b')\n",
    ],
)
def test_the_checker_leaves_reads_at_call_time_alone(source):
    assert env_reads_at_import(source) == []
