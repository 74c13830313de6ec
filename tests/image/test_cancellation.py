"""Cancelling a pipeline task cancels its CustomJob, whatever runs as PID 1.

When Vertex AI Pipelines (or Kubernetes) stops a task, SIGTERM goes to the container's PID 1: the
committed command itself. The test runs the committed ``launch_spot_job`` command as PID 1 of a new
PID namespace (``unshare --pid --fork``) against the emulator, signals it from outside as a
container runtime does, and checks that the CustomJob ends CANCELLED. (A shell as PID 1 ignores
SIGTERM, so before the command ``exec``-ed Python this left the Spot job RUNNING.)
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from kfp import dsl

from kfp_spot.emulator import Emulator
from tests.image.kfp_task import prepare

SLEEPER = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
print("training", flush=True)
while True:
    time.sleep(0.1)
"""


def sleeper_sdist(directory: Path) -> Path:
    """An sdist whose module ``sleeper.task`` trains until it is stopped."""
    files = {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
        'build-backend = "setuptools.build_meta"\n'
        '[project]\nname = "sleeper"\nversion = "0.1"\n'
        '[tool.setuptools]\npackages = ["sleeper"]\n',
        "sleeper/__init__.py": "",
        "sleeper/task.py": SLEEPER,
    }
    out = directory / "sleeper-0.1.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(f"sleeper-0.1/{name}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return out


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
    return value


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_sigterm_to_the_compiled_command_as_pid_1_cancels_its_custom_job(tmp_path: Path):
    package = sleeper_sdist(tmp_path)
    with Emulator(tmp_path / "emulator", grace_period=2.0) as emu:
        task = prepare(
            "launch_spot_job",
            {
                "project": "local-project",
                "package": dsl.Artifact(
                    uri=str(package),
                    metadata={"python_module": "sleeper.task", "package_uris": [str(package)]},
                ),
                "base_output_directory": str(tmp_path / "job"),
                "api_endpoint": emu.endpoint,
                "poll_interval_seconds": 0.2,
            },
            tmp_path / "root",
        )
        assert task.command[:2] == ["sh", "-ec"]  # the compiled command, not a Python entry
        # `python3` in the command is the one first on PATH, as in the image (its venv's bin).
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--kill-child", *task.command],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            (pid1,) = wait_for(lambda: children(proc.pid), 30, "the namespace's PID 1")
            job = wait_for(
                lambda: [j for j in emu.list_jobs() if j.get("state") == "JOB_STATE_RUNNING"],
                120,
                "the CustomJob to run",
            )[0]["name"]
            # What a container runtime does to stop a task: SIGTERM to its PID 1, from outside.
            os.kill(pid1, signal.SIGTERM)
            final = emu.wait(job, {"JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED"}, timeout=60)
            output, _ = proc.communicate(timeout=60)
        finally:
            proc.kill()
            proc.wait()
    assert final.state.name == "JOB_STATE_CANCELLED", output
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert "the CustomJob was cancelled" in output
