"""A custom serving container's command line: its port published on loopback, not host network.

On a Mac the container engine runs containers in a Linux VM, whose host network is the VM's: a
port opened there is not this machine's, and the emulator's health checks never reached it.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from google.cloud.aiplatform_v1.types import DeployedModel, Model

from kfp_spot.emulator.serving.launch import replica_launch


def launch_command(tmp_path: Path, *, artifacts: bool) -> list[str]:
    model = Model.pb(
        Model(
            artifact_uri=str(tmp_path / "artifacts") if artifacts else "",
            container_spec={
                "image_uri": "us-docker.pkg.dev/p/r/server:1",
                "command": ["python", "-m", "server"],
                "args": ["--workers", "2"],
                "env": [{"name": "MODE", "value": "fast"}],
            },
        )
    )
    if artifacts:
        (tmp_path / "artifacts").mkdir()
        (tmp_path / "artifacts" / "model.bin").write_bytes(b"m")
    dm = DeployedModel.pb(
        DeployedModel(dedicated_resources={"machine_spec": {"machine_type": "n1-standard-2"}})
    )
    dep = SimpleNamespace(endpoint_id="7", id="9")
    launch = replica_launch(
        dep,  # type: ignore[arg-type]
        dm,
        model,
        local_copy=tmp_path / "copy",
        env_cache_dir=tmp_path / "envs",
        container_runtime=lambda: "/usr/bin/docker",
    )
    return launch.command(5555)


def test_a_custom_container_publishes_its_port_on_loopback(tmp_path: Path):
    cmd = launch_command(tmp_path, artifacts=True)
    assert "--network=host" not in cmd
    assert cmd[:5] == ["/usr/bin/docker", "run", "--rm", "-p", "127.0.0.1:5555:5555"]
    copy = tmp_path / "copy"
    assert cmd[cmd.index("-v") + 1] == f"{copy}:{copy}:ro"
    assert "AIP_HTTP_PORT=5555" in cmd and "MODE=fast" in cmd
    assert cmd[cmd.index("--entrypoint") :] == [
        "--entrypoint",
        "python",
        "us-docker.pkg.dev/p/r/server:1",
        "-m",
        "server",
        "--workers",
        "2",
    ]


def test_a_custom_container_without_artifacts_mounts_nothing(tmp_path: Path):
    cmd = launch_command(tmp_path, artifacts=False)
    assert "-v" not in cmd
    assert cmd[3:5] == ["-p", "127.0.0.1:5555:5555"]
