"""Which environment variables a job's code reads by name, read statically (envreads)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kfp_spot.packaging import envreads
from tests.shared import write_tree


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('import os\nx = os.environ["A"]\n', [("A", 2)]),
        ('import os\nx = os.environ.get("A", "d")\n', [("A", 2)]),
        ('import os\nx = os.environ.pop("A", None)\n', [("A", 2)]),
        ('import os\nx = os.getenv("A")\n', [("A", 2)]),
        ('from os import getenv\nx = getenv("A")\n', [("A", 2)]),
        ('from os import environ\nx = environ["A"]\n', [("A", 2)]),
        ('import os\nif "A" in os.environ:\n    pass\n', [("A", 2)]),
        ('import os\nif "A" not in os.environ:\n    pass\n', [("A", 2)]),
        (
            'import os\ndef f():\n    return os.environ["B"] + os.getenv("A", "")\n',
            [("B", 3), ("A", 3)],
        ),
        # Writes and names that are not literals are no reads this reader can name.
        ('import os\nos.environ["A"] = "1"\n', []),
        ('import os\nos.environ.setdefault("A", "1")\n', []),
        ('import os\nname = "A"\nx = os.environ[name]\n', []),
        ("import os\nx = dict(os.environ)\n", []),
        ('d = {}\nx = d.get("A")\n', []),
    ],
)
def test_reads_by_literal_name(source: str, expected: list[tuple[str, int]]) -> None:
    assert envreads.names_read(ast.parse(source)) == expected


def test_reads_follow_the_package_s_own_imports_only(tmp_path: Path) -> None:
    site = write_tree(
        tmp_path,
        {
            "trainer/__init__.py": "",
            "trainer/task.py": "from trainer import config\nfrom . import data\nimport other\n",
            "trainer/config.py": 'import os\nDATA = os.environ["DATA_PATH"]\n',
            "trainer/data.py": 'import os\n\n\nBATCH = os.getenv("BATCH_SIZE", "32")\n',
            "trainer/unused.py": 'import os\nos.environ["NEVER_IMPORTED"]\n',
            "other/__init__.py": 'import os\nos.environ["ANOTHER_PACKAGE"]\n',
        },
    )
    assert envreads.reads(site, "trainer.task") == {
        "DATA_PATH": "trainer/config.py, line 2",
        "BATCH_SIZE": "trainer/data.py, line 4",
    }


def test_a_file_this_python_cannot_parse_is_skipped(tmp_path: Path) -> None:
    site = write_tree(tmp_path, {"t/__init__.py": "", "t/task.py": "def (:\n"})
    assert envreads.reads(site, "t.task") == {}
