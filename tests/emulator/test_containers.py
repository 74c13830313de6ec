"""Which container runtime the emulator runs containerSpec replicas with."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kfp_spot.emulator import containers


def _tool(directory: Path, name: str, exit_code: int) -> Path:
    """An executable ``name`` whose ``info`` exits ``exit_code`` and notes that it was asked."""
    path = directory / name
    path.write_text(f'#!/bin/sh\necho "$0 $*" >> "{directory}/asked"\nexit {exit_code}\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding only a docker whose daemon does not answer and a podman that does."""
    _tool(tmp_path, "docker", 1)
    _tool(tmp_path, "podman", 0)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(containers.ENV, raising=False)
    return tmp_path


@pytest.mark.parametrize("value", [None, "", "auto"])
def test_unset_or_auto_probes_docker_then_podman(tools, monkeypatch, value):
    if value is not None:
        monkeypatch.setenv(containers.ENV, value)
    assert containers.container_runtime() == str(tools / "podman")
    asked = (tools / "asked").read_text().split("\n")
    assert asked[:2] == [f"{tools}/docker info", f"{tools}/podman info"]


@pytest.mark.parametrize("value", ["docker", "DOCKER_PATH"])
def test_a_named_runtime_is_used_without_a_probe(tools, monkeypatch, value):
    """Named (by name or path), the runtime is trusted: ``docker info`` would have failed."""
    monkeypatch.setenv(containers.ENV, str(tools / "docker") if value == "DOCKER_PATH" else value)
    assert containers.container_runtime() == str(tools / "docker")
    assert not (tools / "asked").exists()


@pytest.mark.parametrize("value", ["none", "nerdctl", "/nowhere/podman", "docker info"])
def test_none_or_a_runtime_that_is_not_there_runs_no_containers(tools, monkeypatch, caplog, value):
    monkeypatch.setenv(containers.ENV, value)
    with caplog.at_level(logging.WARNING, logger=containers.__name__):
        assert containers.container_runtime() is None
    assert not (tools / "asked").exists()
    assert (value == "none") == (not caplog.records)  # anything else is said in the log
    assert f"{containers.ENV}={value!r} names none" in containers.no_runtime()


def test_without_the_variable_the_reason_is_that_none_answers(tools):
    assert containers.no_runtime() == "none answers on this machine (docker info, podman info)"
