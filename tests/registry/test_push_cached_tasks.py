"""`kfp-spot push` of a team's own template: what a run made from it in the console would replay."""

from pathlib import Path

from click.testing import CliRunner

from kfp_spot.cli import main


def test_push_warns_of_a_launch_a_console_run_would_replay_from_cache(tmp_path: Path, monkeypatch):
    """A team's template of the loaded component YAMLs, left cacheable, pushed to a registry: a
    run made from it in the Vertex AI console skips `kfp-spot submit`'s warnings, and there a
    cached launch replays its outcome without training. The push says so, per task."""
    from kfp import compiler, components, dsl

    from kfp_spot.image import ImageRecord, remember
    from kfp_spot.registry import RegistryServer
    from kfp_spot.version import runtime_image

    monkeypatch.setenv("KFP_SPOT_CONFIG_DIR", str(tmp_path / "config"))
    remember(ImageRecord(runtime_image(), "pushed", "0.1.0", "sha256:1d"))  # no image warning
    root = Path(__file__).resolve().parents[2] / "components"
    load = {
        name: components.load_component_from_file(str(root / name / "component.yaml"))
        for name in ("prepare_package", "launch_spot_job")
    }

    def compiled(cached: bool) -> Path:
        @dsl.pipeline(name="team-training")
        def team_training(code_uri: str = "gs://team-bucket/src/t.tar.gz"):
            package = load["prepare_package"](source=code_uri).set_caching_options(cached)
            with dsl.If(code_uri != ""):
                load["launch_spot_job"](package=package.outputs["package"]).set_caching_options(
                    cached
                )

        path = tmp_path / f"team-{cached}.yaml"
        compiler.Compiler().compile(team_training, str(path))
        return path

    with RegistryServer(tmp_path / "reg", port=0) as server:
        host = server.repository_url("my-team", "templates")
        result = CliRunner().invoke(main, ["push", str(compiled(True)), "--host", host])
        assert result.exit_code == 0, result.output
        assert (
            "task 'condition-1/launch-spot-job' (launch_spot_job) is cached: a rerun with the "
            "same inputs replays the earlier outcome without training"
        ) in result.stderr
        assert "task 'prepare-package' (prepare_package) is cached" in result.stderr
        again = CliRunner().invoke(main, ["push", str(compiled(False)), "--host", host])
        assert again.exit_code == 0, again.output
        assert "warning" not in again.stderr, again.stderr


def test_push_warns_of_a_launch_given_a_machine_of_its_own(tmp_path: Path, monkeypatch):
    """`.set_accelerator_type("NVIDIA_TESLA_T4")` on a launch task sizes the container that
    submits and watches the CustomJob on Vertex AI Pipelines, never the training: a team paid
    for a GPU the launcher idles on while the training ran on n1-standard-4 without one."""
    from kfp import compiler, dsl

    from kfp_spot.components import LaunchSpotJobOp
    from kfp_spot.image import ImageRecord, remember
    from kfp_spot.registry import RegistryServer
    from kfp_spot.version import runtime_image

    monkeypatch.setenv("KFP_SPOT_CONFIG_DIR", str(tmp_path / "config"))
    remember(ImageRecord(runtime_image(), "pushed", "0.1.0", "sha256:1d"))  # no image warning

    @dsl.pipeline(name="team-gpu")
    def team_gpu():
        LaunchSpotJobOp(container_image_uri="us-docker.pkg.dev/p/r/t:1").set_accelerator_type(
            "NVIDIA_TESLA_T4"
        ).set_accelerator_limit(1).set_memory_limit("32G")

    path = tmp_path / "team-gpu.yaml"
    compiler.Compiler().compile(team_gpu, str(path))
    with RegistryServer(tmp_path / "reg", port=0) as server:
        host = server.repository_url("my-team", "templates")
        result = CliRunner().invoke(main, ["push", str(path), "--host", host])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == (
        f"kfp-spot: warning: {path}: task 'launch-spot-job' (launch_spot_job) sets its own "
        "container's machine (accelerator NVIDIA_TESLA_T4 x1, memory limit 32G): on Vertex AI "
        "Pipelines that sizes the task that submits and watches the CustomJob, which uses none "
        "of it, not the training; set the task's machine_type, accelerator_type and "
        "accelerator_count inputs instead"
    ), result.stderr
    assert "is cached" not in result.stderr  # a Python component's launch starts uncached
