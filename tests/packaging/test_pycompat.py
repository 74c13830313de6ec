"""A job's own code against its executor image's Python, older than the one that runs it here."""

from __future__ import annotations

import re
import sys

import pytest

from kfp_spot import executors
from kfp_spot.packaging import pycompat, trainer_dist
from tests.shared import write_tree

PY311 = sys.version_info >= (3, 11)  # the host must parse what it reports


@pytest.mark.skipif(not PY311, reason="this machine's Python must parse except*")
def test_what_the_module_imports_of_its_own_package_is_read_for_the_images_python(tmp_path):
    site = write_tree(
        tmp_path,
        {
            "trainer/__init__.py": "",
            "trainer/task.py": (
                "import numpy\n"  # another package: not read
                "from trainer import model\n"
                "from . import util\n"
                "def main():\n"
                "    from .deep import thing\n"  # deferred imports count too
            ),
            "trainer/model.py": "try:\n    pass\nexcept* ValueError:\n    pass\n",
            "trainer/util.py": "import json\nimport tomllib\n",
            "trainer/deep.py": "match 1:\n    case 1:\n        thing = 1\n",
            "trainer/unused.py": "try:\n    pass\nexcept* ValueError:\n    pass\n",  # not imported
        },
    )
    found = pycompat.problems(site, "trainer.task", "3.10")
    assert [line.split(":")[0] for line in found] == [
        "trainer/model.py, line 4",
        "trainer/util.py, line 2",
    ], found
    assert "Exception groups are only supported in Python 3.11" in found[0]
    assert found[1].endswith("imports tomllib, which Python 3.10 does not have (new in 3.11)")
    older = pycompat.problems(site, "trainer.task", "3.9")
    assert any(line.startswith("trainer/deep.py") and "Pattern matching" in line for line in older)
    assert pycompat.problems(site, "trainer.task", "3.11") == []


def test_imports_an_older_python_would_skip_are_left_alone(tmp_path):
    site = write_tree(
        tmp_path,
        {
            "job/__init__.py": "",
            "job/task.py": (
                "import sys\n"
                "try:\n"
                "    import tomllib\n"
                "except ModuleNotFoundError:\n"
                "    import tomli as tomllib\n"
                "if sys.version_info >= (3, 11):\n"
                "    from job import new\n"
                "else:\n"
                "    from job import old\n"
            ),
            "job/new.py": "import tomllib\n",
            "job/old.py": "import json\n",
        },
    )
    assert pycompat.problems(site, "job.task", "3.10") == []


def test_a_package_run_with_python_m_is_read_from_its_main(tmp_path):
    site = write_tree(
        tmp_path,
        {"job/__init__.py": "", "job/__main__.py": "import zoneinfo\n"},
    )
    assert pycompat.problems(site, "job", "3.8") == [
        "job/__main__.py, line 1: imports zoneinfo, which Python 3.8 does not have (new in 3.9)"
    ]
    assert pycompat.problems(site, "job", "3.10") == []


def test_a_file_this_machines_python_cannot_parse_is_left_to_its_own_error(tmp_path):
    site = write_tree(tmp_path, {"job/__init__.py": "", "job/task.py": "def (:\n"})
    assert pycompat.problems(site, "job.task", "3.10") == []


def test_the_error_says_where_what_and_which_python(tmp_path):
    text = pycompat.explain(
        ["job/task.py, line 2: imports tomllib, which Python 3.10 does not have (new in 3.11)"],
        "job.task",
        "3.10",
        "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest",
    )
    assert text.startswith(
        "job.task needs a newer Python than 3.10, the Python of "
        "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest: on Vertex AI it would fail"
    )
    assert "\n  job/task.py, line 2: imports tomllib" in text


def test_the_trainer_kfp_spot_ships_to_the_vms_runs_on_every_python_it_declares():
    # The light kfp-spot-trainer wheel runs in the executor image's Python, not this machine's.
    wheel = trainer_dist.contents()
    oldest = re.fullmatch(r">=(\d+\.\d+)", wheel.requires_python)
    assert oldest, wheel.requires_python
    assert len(wheel.files) > 10
    found = [
        line
        for where, path in sorted(wheel.files.items())
        for line in pycompat.file_problems(path, where, oldest.group(1))
    ]
    assert found == []
    assert executors.profile(executors.DEFAULT_EXECUTOR_IMAGE).python == oldest.group(1)


def test_a_package_is_read_before_a_module_of_the_same_name_as_python_imports_it(tmp_path):
    site = write_tree(
        tmp_path,
        {
            "job/__init__.py": "",
            "job/task.py": "import job.util\n",
            "job/util.py": "import json\n",  # shadowed by the package below
            "job/util/__init__.py": "import tomllib\n",
        },
    )
    assert pycompat.problems(site, "job.task", "3.10") == [
        "job/util/__init__.py, line 1: imports tomllib, which Python 3.10 does not have "
        "(new in 3.11)"
    ]


def test_names_an_older_standard_library_lacks_are_found(tmp_path):
    """``from datetime import UTC`` imports on 3.11 and raises ImportError on a 3.10 image."""
    site = write_tree(
        tmp_path,
        {
            "reg/__init__.py": "",
            "reg/fit.py": (
                "from datetime import UTC, datetime\n"
                "from enum import Enum, StrEnum\n"
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from typing import Self\n"  # never imported at run time
                "try:\n"
                "    from itertools import batched\n"
                "except ImportError:\n"
                "    batched = None\n"
            ),
        },
    )
    found = pycompat.problems(site, "reg.fit", "3.10")
    assert found == [
        "reg/fit.py, line 1: imports datetime.UTC, which Python 3.10 does not have (new in 3.11)",
        "reg/fit.py, line 2: imports enum.StrEnum, which Python 3.10 does not have (new in 3.11)",
    ], found
    assert pycompat.problems(site, "reg.fit", "3.11") == []
