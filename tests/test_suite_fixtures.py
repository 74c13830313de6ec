"""Rules for the suite's own fixtures.

One GCS emulator per test process: ``STORAGE_EMULATOR_HOST`` is process-wide, so a second
emulator started by another conftest repoints every gcsfs call of the tests that use the first
(a bucket created on the first then answers 404). Only ``tests/conftest.py`` starts one, and no
other conftest re-exports a fixture that starts one (an imported fixture function is registered
again, with its own instance).
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_only_the_root_conftest_starts_a_gcs_emulator():
    starters = sorted(
        path.relative_to(TESTS).as_posix()
        for path in TESTS.rglob("*.py")
        if path != Path(__file__).resolve() and "create_server(" in path.read_text(encoding="utf-8")
    )
    assert starters == ["conftest.py"]


def test_no_conftest_reimports_the_gcs_emulator_fixture():
    reimports = sorted(
        path.relative_to(TESTS).as_posix()
        for path in TESTS.rglob("conftest.py")
        if "import gcs_emulator" in path.read_text(encoding="utf-8")
    )
    assert reimports == []
