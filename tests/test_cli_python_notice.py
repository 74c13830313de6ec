"""Google's notice that this Python is past its libraries' support: one line, not twenty.

On a Python Google's client libraries no longer support (3.10, as of late 2026), each of them
(google-api-core, the aiplatform SDK and each of its API versions) warns on import: every
kfp-spot command printed some twenty lines of FutureWarnings before its own output.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

from kfp_spot import cli

NOTICE_FILE = str(Path("site-packages", "google", "api_core", "_python_version_support.py"))


def google_notice(package: str) -> str:
    return (
        "You are using a non-supported Python version (3.10.13). Google will not post any "
        f"further updates to {package} supporting this Python version."
    )


def test_googles_python_support_notices_are_one_line_and_other_warnings_stay(capsys):
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        cli.one_python_support_notice()
        cli.one_python_support_notice()  # main run again: still one notice
        for package in ("google.api_core", "google.cloud.aiplatform_v1", "google.cloud.storage"):
            warnings.warn_explicit(google_notice(package), FutureWarning, NOTICE_FILE, 212)
        warnings.warn_explicit("a warning of another library", FutureWarning, "other.py", 3)
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "non-supported Python version" in line]
    assert notes == [
        f"kfp-spot: note: {google_notice('google.api_core')} (and so for Google's other libraries)"
    ]
    assert [str(w.message) for w in caught] == ["a warning of another library"]  # passed on


def test_the_command_line_installs_it():
    probe = (
        "import warnings\n"
        "from kfp_spot.cli import main\n"
        "main.main(['--help'], prog_name='kfp-spot', standalone_mode=False)\n"
        "print(getattr(warnings.showwarning, 'kfp_spot_notice', False))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.splitlines()[-1] == "True"
