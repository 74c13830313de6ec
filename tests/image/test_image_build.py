"""The pieces of `kfp-spot image build` that decide what goes into the image."""

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from kfp_spot import image
from kfp_spot.image import build, wheels

REPO = Path(__file__).resolve().parents[2]
MAPPED = {
    "kfp_spot": "kfp_spot",
    "components": "kfp_spot/components",
    "pipelines": "kfp_spot/pipelines",
    # kfp-spot run without --source trains it, installed as from a checkout
    "examples/trainer": "kfp_spot/examples/trainer",
}


@pytest.fixture(scope="module")
def wheel(images, tmp_path_factory) -> Path:
    """The kfp-spot wheel the runtime image of this run was built from (a copy).

    ``kfp-spot image build`` builds it into build/image/dist of the checkout, once per test run
    (the ``images`` fixture): these tests read that wheel rather than build one more (a pip
    process of a second or two). The copy keeps it as it was should the directory change.
    """
    (built,) = (REPO / "build" / "image" / "dist").glob("kfp_spot-*.whl")
    return Path(shutil.copy(built, tmp_path_factory.mktemp("dist")))


def test_the_wheel_the_image_installs_holds_every_file_of_the_package(wheel):
    if not (REPO / ".git").exists():
        pytest.skip("needs the git checkout to know the tracked files")
    tracked = subprocess.run(
        ["git", "ls-files", *MAPPED], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = []
    for rel in tracked:
        top = next(folder for folder in MAPPED if rel.startswith(f"{folder}/"))
        rest = rel[len(top) + 1 :]
        if (REPO / rel).is_file() and f"{MAPPED[top]}/{rest}" not in names:
            missing.append(rel)
    # Data files too (machines.csv once was not, and every launch failed in the image).
    assert missing == [], f"not in the wheel: {missing}"


def test_requirements_split_runtime_from_the_examples_extra(wheel):
    runtime, examples = wheels.wheel_requirements(wheel)
    assert any(r.startswith("kfp<3") or r.startswith("kfp>=") for r in runtime)
    assert all(";" not in r for r in runtime + examples)  # markers resolved, not copied
    assert [r.split(">")[0] for r in examples] == ["scikit-learn"]
    assert not any(r.startswith(("pytest", "ruff", "scikit-learn")) for r in runtime)


def test_the_inputs_digest_ignores_zip_timestamps_but_not_content(tmp_path, wheel):
    again = wheels.build_wheel(REPO, tmp_path / "again")
    assert wheels.wheel_content_digest(again) == wheels.wheel_content_digest(wheel)
    source = tmp_path / "src"
    for name in wheels._WHEEL_SOURCES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes(src.read_bytes())
    (source / "kfp_spot" / "extra.py").write_text("X = 1\n")
    changed = wheels.build_wheel(source, tmp_path / "changed")
    assert wheels.wheel_content_digest(changed) != wheels.wheel_content_digest(wheel)


def test_not_a_checkout_is_named(tmp_path):
    with pytest.raises(image.ImageBuildError, match="not a kfp-spot source checkout"):
        wheels.build_wheel(tmp_path, tmp_path / "dist")


def test_an_unknown_engine_is_named(monkeypatch):
    with pytest.raises(image.ImageBuildError, match="'containerd' is not 'podman' or 'docker'"):
        image.detect_engine("containerd")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(image.ImageBuildError, match="no container engine: install podman"):
        image.detect_engine()


@pytest.mark.parametrize(
    "destination",
    [
        "kfp-spot:0.1.0",
        "us-docker.pkg.dev/p/r/kfp-spot",
        "host/p/x :1",
        # Taken before, though `compile --base-image` and KFP_SPOT_RUNTIME_IMAGE refuse them:
        # the pushed image could be named by no template.
        "us-central1-docker.pkg.dev/MyProject/r/kfp-spot:0.1.0",
        "us-central1-docker.pkg.dev/p/r/kfp-spot:a/b",
    ],
)
def test_push_refuses_a_destination_that_is_not_a_registry_reference(destination):
    from click.testing import CliRunner

    from kfp_spot.cli import main

    with pytest.raises(image.ImageBuildError, match="is not a registry reference"):
        image.push_image(destination, engine=image.Engine("podman"))
    result = CliRunner().invoke(main, ["image", "push", destination])
    assert result.exit_code == 2, result.output  # the argument's error, before any engine runs
    assert "is not a registry reference HOST/PATH:TAG" in result.output


@pytest.mark.parametrize(
    ("args", "option"),
    [
        # An empty tag was built as an image of no name (`building  with podman`); `UP:1` failed
        # only inside the engine; an empty base image built on python:3.11-slim, silently.
        (["build", "--tag", ""], "--tag"),
        (["build", "--tag", "Kfp-Spot:1"], "--tag"),
        (["build", "--base-image", ""], "--base-image"),
        (["build", "--base-image", "python 3.11"], "--base-image"),
        (["push", "us-docker.pkg.dev/p/r/kfp-spot:1", "--source", ""], "--source"),
    ],
)
def test_an_image_option_that_is_no_image_reference_is_refused_before_any_engine(args, option):
    from click.testing import CliRunner

    from kfp_spot.cli import main

    result = CliRunner().invoke(main, ["image", *args], env={"KFP_SPOT_CONTAINER_ENGINE": "none"})
    assert result.exit_code == 2, result.output
    (line,) = result.output.splitlines()
    assert line.startswith(f"kfp-spot: error: Invalid value for '{option}': "), line
    assert "is not an image reference [HOST/]PATH[:TAG]" in line


@pytest.mark.parametrize(
    "destination",
    ["us-central1-kfp.pkg.dev/my-project/templates/kfp-spot:1", "us-python.pkg.dev/p-1/r/i:1"],
)
def test_a_push_to_an_artifact_registry_host_of_another_format_is_refused_naming_docker(
    destination,
):
    # A template repository's host (where `kfp-spot push` sends pipelines) went to the engine,
    # which failed on the registry's answer after the layers were read.
    with pytest.raises(image.ImageBuildError) as refused:
        image.push_image(destination, engine=None)
    server = destination.split("/")[0]
    assert str(refused.value) == (
        f"destination {destination!r}: {server} serves no container images: Artifact Registry "
        "serves them from LOCATION-docker.pkg.dev/PROJECT/REPO/IMAGE:TAG"
    )


def test_push_to_a_digest_is_refused_naming_the_tag_form():
    with pytest.raises(image.ImageBuildError, match="names a digest: push to a tag"):
        image.push_image(f"us-docker.pkg.dev/p/r/kfp-spot@sha256:{'a' * 64}")


def test_push_refuses_an_image_that_was_not_built(engine):
    with pytest.raises(image.ImageBuildError, match="is not built: run `make image`"):
        image.push_image(
            "127.0.0.1:5999/team/kfp-spot:1", engine=engine, source="localhost/never-built:1"
        )


def test_the_image_is_linux_amd64_and_holds_exactly_the_locked_packages(engine, images):
    import json

    from kfp_spot import RUNTIME_IMAGE, __version__
    from kfp_spot.image import load_records, lock

    (info,) = json.loads(engine.run("image", "inspect", RUNTIME_IMAGE).stdout)
    assert (info["Os"], info["Architecture"]) == ("linux", "amd64")
    frozen = engine.run(
        *("run", "--rm", "--network=none", RUNTIME_IMAGE),
        *("python3", "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"),
    ).stdout.decode()
    installed = dict(line.split("==", 1) for line in frozen.split())
    installed = {lock.canonical(name): version for name, version in installed.items()}
    assert installed.pop("kfp-spot") == __version__
    installed.pop("pip")  # the venv's installer, not a dependency
    pins = lock.read_lock(REPO / lock.LOCK_FILE)
    assert installed == pins  # nothing more, nothing less, nothing at another version
    assert installed["kfp"] == lock.sdk_version(REPO)  # the kfp that compiled the YAMLs
    record = load_records()[RUNTIME_IMAGE]
    assert record.platform == "linux/amd64" and record.image_id == images[RUNTIME_IMAGE]


def test_push_refuses_an_image_vertex_cannot_run(engine, tmp_path):
    from kfp_spot import __version__

    arm = f"localhost/kfp-spot-arm64-test:{__version__}"
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "empty").write_text("")
    subprocess.run(["tar", "-C", str(tmp_path / "root"), "-cf", str(tmp_path / "r.tar"), "."])
    arch = ["--arch", "arm64"] if engine.name == "podman" else ["--platform", "linux/arm64"]
    label = f"LABEL {build.VERSION_LABEL}={__version__}"
    engine.run("import", *arch, "--change", label, str(tmp_path / "r.tar"), arm)
    try:
        assert engine.platform(arm) == "linux/arm64"
        with pytest.raises(image.ImageBuildError) as info:
            image.push_image("127.0.0.1:5999/team/kfp-spot:1", engine=engine, source=arm)
        assert str(info.value) == (
            f"{arm} is a linux/arm64 image and Vertex AI runs linux/amd64 only: rebuild it with "
            "`kfp-spot image build`"
        )
    finally:
        engine.run("rmi", "-f", arm, check=False)
