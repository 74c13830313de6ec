"""Rules for the suite's own fixtures.

One GCS emulator per test process: ``STORAGE_EMULATOR_HOST`` is process-wide, so a second
emulator started by another conftest repoints every gcsfs call of the tests that use the first
(a bucket created on the first then answers 404). Only ``tests/conftest.py`` starts one, and no
other conftest re-exports a fixture that starts one (an imported fixture function is registered
again, with its own instance).

Every xdist worker collects every test module, so what a module imports at its top is paid once
per worker before any test runs: the machine-learning frameworks (seconds of CPU each) are
imported by the fixtures and tests that use them, never at a module's top.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_only_the_root_conftest_starts_a_gcs_emulator():
    starters = sorted(
        path.relative_to(TESTS).as_posix()
        for path in TESTS.rglob("*.py")
        if path != Path(__file__).resolve()
        and "gcp_storage_emulator" in path.read_text(encoding="utf-8")
    )
    assert starters == ["conftest.py"]


def test_no_conftest_reimports_the_gcs_emulator_fixture():
    reimports = sorted(
        path.relative_to(TESTS).as_posix()
        for path in TESTS.rglob("conftest.py")
        if "import gcs_emulator" in path.read_text(encoding="utf-8")
    )
    assert reimports == []


# Each costs from one to several seconds of CPU to import.
HEAVY = {"sklearn", "scipy", "keras", "jax", "xgboost", "transformers", "tensorflow", "torch"}


def _top_level_imports(path: Path) -> set[str]:
    """The top-level packages ``path`` imports in its module body (not inside functions)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_test_module_imports_a_framework_at_collection():
    heavy = sorted(
        f"{path.relative_to(TESTS).as_posix()}: {', '.join(sorted(found))}"
        for path in TESTS.rglob("*.py")
        if (found := _top_level_imports(path) & HEAVY)
    )
    assert heavy == []
