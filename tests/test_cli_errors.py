"""Every bad command line is one clear line on stderr with exit code 2 (runs the real script)."""

import subprocess
import sys
from pathlib import Path

import pytest

KFP_SPOT = Path(sys.executable).with_name("kfp-spot")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["bogus"], "No such command 'bogus'"),
        (["run", "--preemptions", "9"], "--preemptions"),
        (["run", "--source", "/nonexistent/src"], "--source"),
        (["run", "--regions", "us-central1,europe-wst4"], "--regions"),
        (["run", "--regions", "us-central1,us-central1"], "--regions"),
        (["submit", "/nonexistent.yaml", "--project", "p-123456"], "TEMPLATE"),
        (["compile", "--base-image", "x:1"], "needs output_dir"),
        (["jobs", "describe", "customJobs/1"], "projects/PROJECT/locations/LOCATION"),
        (["jobs", "list", "--project", "p", "--api-endpoint", "ftp://x"], "api_endpoint"),
        (["emulator", "start", "--port", "-1"], "--port"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args, needle):
    proc = subprocess.run([str(KFP_SPOT), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("kfp-spot: error:")
    assert needle in lines[0]
    assert proc.stdout == ""
