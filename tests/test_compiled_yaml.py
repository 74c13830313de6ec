"""Committed component and pipeline YAMLs are what the sources compile to, and they load."""

from pathlib import Path

import pytest
from kfp import compiler, components, dsl

from kfp_spot import RUNTIME_IMAGE
from kfp_spot.pipelines import catalog
from kfp_spot.vertex.pipeline_context import PROJECT_ID_PLACEHOLDER

ALL = catalog.COMPONENTS + catalog.PIPELINES


@pytest.mark.parametrize("entry", ALL, ids=[e.name for e in ALL])
def test_committed_yaml_is_current_and_deterministic(entry, tmp_path):
    first = catalog.compile_entry(entry, tmp_path / "a.yaml").read_bytes()
    second = catalog.compile_entry(entry, tmp_path / "b.yaml").read_bytes()
    assert first == second, f"{entry.name} does not compile deterministically"
    committed = entry.default_path()
    assert committed.exists(), f"{committed} is missing: run `make compile`"
    assert committed.read_bytes() == first, f"{committed} is stale: run `make compile`"


@pytest.mark.parametrize("entry", catalog.COMPONENTS, ids=[e.name for e in catalog.COMPONENTS])
def test_committed_component_loads_and_compiles_in_a_new_pipeline(entry, tmp_path):
    loaded = components.load_component_from_file(str(entry.default_path()))
    required = {
        name: spec
        for name, spec in loaded.component_spec.inputs.items()
        if spec.default is None and not spec.optional
    }

    @dsl.pipeline(name=f"reuse-{entry.name.replace('_', '-')}")
    def reuse(text: str = "x"):
        # Artifact inputs come from an importer; parameters from the pipeline.
        kwargs = {}
        for name, spec in required.items():
            if spec.type in ("String", "STRING"):
                kwargs[name] = text
            elif spec.type.startswith("system.") or "." in spec.type:
                kwargs[name] = dsl.importer(
                    artifact_uri="gs://bucket/x", artifact_class=dsl.Artifact
                ).output
            else:
                pytest.skip(f"{entry.name}: required input {name} of type {spec.type}")
        loaded(**kwargs)

    out = tmp_path / "reuse.yaml"
    compiler.Compiler().compile(reuse, str(out))
    assert entry.name.replace("_", "-") in out.read_text()


@pytest.mark.parametrize("entry", catalog.COMPONENTS, ids=[e.name for e in catalog.COMPONENTS])
def test_component_runs_in_the_runtime_image_of_this_version(entry):
    text = entry.default_path().read_text()
    assert f"image: {RUNTIME_IMAGE}" in text
    # The image carries kfp and kfp-spot; nothing is pip-installed when the task starts.
    assert "pip install" not in text


def test_no_project_id_is_baked_into_pipeline_templates():
    import re

    import yaml

    for entry in catalog.PIPELINES:
        text = Path(entry.default_path()).read_text()
        # Resource names with a literal project (docstrings show `projects/{number}/...`).
        assert not re.search(r"projects/(?!\{)[a-z0-9]", text), entry.name
        spec = yaml.safe_load(text)
        params = spec["root"]["inputDefinitions"]["parameters"]
        if "project" in params:
            # Only GCPC's placeholder, which Vertex AI Pipelines fills in with the run's project.
            default = params["project"].get("defaultValue", PROJECT_ID_PLACEHOLDER)
            assert default == PROJECT_ID_PLACEHOLDER, f"{entry.name} defaults a project"


def test_compile_with_another_base_image_rewrites_every_task(tmp_path):
    from click.testing import CliRunner

    from kfp_spot.cli import main

    image = "europe-docker.pkg.dev/team/images/kfp-spot:custom"
    result = CliRunner().invoke(
        main, ["compile", "--output-dir", str(tmp_path), "--base-image", image]
    )
    assert result.exit_code == 0, result.output
    for path in (tmp_path / "pipelines").glob("*.yaml"):
        text = path.read_text()
        assert f"image: {image}" in text
        assert RUNTIME_IMAGE not in text


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--base-image", "x:1"], "needs output_dir"),
        (["--output-dir", "OUT", "--base-image", "no tag"], "not an image reference"),
        (  # a template repository's host (Artifact Registry's KFP format) serves no images
            ["--output-dir", "OUT", "--base-image", "us-central1-kfp.pkg.dev/p-1/templates/i:1"],
            "us-central1-kfp.pkg.dev serves no container images: Artifact Registry serves them "
            "from LOCATION-docker.pkg.dev/PROJECT/REPO/IMAGE:TAG",
        ),
    ],
)
def test_compile_rejects_bad_base_image_usage(tmp_path, args, needle):
    from click.testing import CliRunner

    from kfp_spot.cli import main

    args = [str(tmp_path) if a == "OUT" else a for a in args]
    result = CliRunner().invoke(main, ["compile", *args])
    assert result.exit_code == 2
    assert needle in result.output


def test_an_installed_kfp_spot_compiles_only_into_an_output_dir(tmp_path, monkeypatch):
    # Installed, the YAMLs in place are files of site-packages: a non-root or shared install
    # cannot (and should not) be rewritten. A checkout's own files are what compile updates.
    from click.testing import CliRunner

    from kfp_spot.cli import main

    monkeypatch.setattr(catalog, "CHECKOUT", tmp_path / "site-packages")
    before = {e.name: e.default_path().read_bytes() for e in catalog.PIPELINES}
    result = CliRunner().invoke(main, ["compile"])
    assert result.exit_code == 2
    assert "not a source checkout" in result.output and "--output-dir" in result.output
    assert {e.name: e.default_path().read_bytes() for e in catalog.PIPELINES} == before
    result = CliRunner().invoke(main, ["compile", "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "pipelines" / "spot_training.yaml").is_file()


def test_a_compile_that_fails_midway_leaves_the_yaml_it_would_replace_as_it_was(
    tmp_path, monkeypatch
):
    """A compile that dies while writing (a full disk, Ctrl-C) leaves no half-written YAML."""
    out = tmp_path / "pipeline.yaml"
    good = catalog.compile_entry(catalog.PIPELINES[0], out).read_bytes()

    def dies_writing(self, pipeline_func, package_path, **kwargs):
        Path(package_path).write_text("# PIPELINE DEFINITION\n# Name: half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(compiler.Compiler, "compile", dies_writing)
    with pytest.raises(OSError, match="No space left"):
        catalog.compile_entry(catalog.PIPELINES[0], out)
    assert out.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["pipeline.yaml"]  # no temp file left
