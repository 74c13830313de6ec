"""`kfp-spot submit` / `run --vertex` refuse a template whose image Vertex AI could not pull.

A template's kfp-spot tasks may run in the runtime image the release workflow published with the
installed wheel, or in an image `kfp-spot image push` pushed from this machine for this version.
Anything else is refused before a request is sent, with the one-line fix.
"""

import dataclasses
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from google.auth.credentials import AnonymousCredentials
from kfp import compiler, dsl

import kfp_spot
from kfp_spot import RUNTIME_IMAGE, __version__
from kfp_spot.cli import main
from kfp_spot.image import (
    ImageKind,
    ImageRecord,
    UnpublishedImageError,
    check_template_images,
    load_records,
    remember,
    template_images,
)
from kfp_spot.pipelines import catalog
from kfp_spot.version import RELEASE_FILE, published_runtime_image
from kfp_spot.vertex import pipeline_job
from tests.recording_server import RecordingServer

COMMITTED = catalog.pipeline_path("spot_training")
# spot_training's required source is given: a real submit refuses a run without it first.
SUBMIT = [
    "--project",
    "my-project-123",
    "--pipeline-root",
    "gs://bkt/r",
    "--param",
    "source=gs://b/src.tar.gz",
]


@pytest.fixture(scope="module", autouse=True)
def _one_worker():
    """A test here writes the release file into the installed package (as a release wheel holds
    it), which every other test of this module reads: a module fixture keeps them on one xdist
    worker (tests/conftest.py groups a module's tests that use one)."""
    return


@pytest.fixture(autouse=True)
def records_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KFP_SPOT_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "config"


def test_every_kfp_spot_task_of_the_committed_template_is_checked():
    import yaml

    images = template_images(yaml.safe_load(COMMITTED.read_text()))
    assert list(images) == [RUNTIME_IMAGE]
    assert set(images[RUNTIME_IMAGE]) == {
        "exec-evaluate-checkpoint",
        "exec-launch-spot-job",
        "exec-prepare-package",
        "exec-promote-model",
    }


def test_a_source_checkouts_runtime_image_is_refused_with_the_fix():
    assert published_runtime_image() is None  # a checkout, not the release wheel
    with RecordingServer() as server, pytest.raises(UnpublishedImageError) as info:
        pipeline_job.submit_pipeline(
            COMMITTED,
            project="my-project-123",
            location="us-central1",
            pipeline_root="gs://bkt/r",
            parameter_values={"source": "gs://b/src.tar.gz"},
            api_endpoint=server.endpoint,
            credentials=AnonymousCredentials(),
        )
    assert server.requests == []  # refused before anything was sent
    message = str(info.value)
    assert RUNTIME_IMAGE in message and "exec-launch-spot-job" in message
    assert "not a release wheel" in message
    assert (
        f"make image && kfp-spot image push REGION-docker.pkg.dev/PROJECT/REPO/kfp-spot:"
        f"{__version__}" in message
    )
    assert "kfp-spot compile --base-image" in message


def test_built_but_never_pushed_is_refused():
    remember(ImageRecord(RUNTIME_IMAGE, "built", __version__, "sha256:ab"))
    with pytest.raises(UnpublishedImageError, match="built on this machine but never pushed"):
        check_template_images(COMMITTED)


def test_an_image_pushed_for_another_version_is_refused(tmp_path):
    image = "us-docker.pkg.dev/p-123456/r/kfp-spot:0.0.9"
    out = tmp_path / "t.yaml"
    (entry,) = [e for e in catalog.PIPELINES if e.name == "evaluate_checkpoint"]
    catalog.compile_entry(entry, out, base_image=image)
    remember(ImageRecord(image, "pushed", "0.0.9", "sha256:cd", "sha256:ef"))
    with pytest.raises(
        UnpublishedImageError, match=f"holds kfp-spot 0.0.9 .* this is {__version__}"
    ):
        check_template_images(out)
    remember(ImageRecord(image, "pushed", __version__, "sha256:cd", "sha256:ef"))
    assert check_template_images(out) == template_images(
        __import__("yaml").safe_load(out.read_text())
    )


def test_an_image_pushed_for_a_platform_vertex_cannot_run_is_refused(tmp_path):
    image = "us-docker.pkg.dev/p-123456/r/kfp-spot:arm"
    out = tmp_path / "t.yaml"
    (entry,) = [e for e in catalog.PIPELINES if e.name == "evaluate_checkpoint"]
    catalog.compile_entry(entry, out, base_image=image)
    pushed = ImageRecord(image, "pushed", __version__, "sha256:cd", "sha256:ef")
    remember(dataclasses.replace(pushed, platform="linux/arm64"))
    with pytest.raises(UnpublishedImageError) as info:
        check_template_images(out)
    assert "it is a linux/arm64 image and Vertex AI runs linux/amd64 only" in str(info.value)
    remember(dataclasses.replace(pushed, platform="linux/amd64"))
    check_template_images(out)
    remember(pushed)  # recorded before platforms were: judged by its version alone
    check_template_images(out)


def test_a_template_pinned_to_the_pushed_digest_is_accepted(tmp_path):
    """docs/image.md takes `HOST/PATH@sha256:...` for the runtime image: pinned to the digest
    `kfp-spot image push` recorded, the template names the pushed image; another digest, or the
    same digest in another repository, is not one this machine pushed."""
    digest = "sha256:" + "7c" * 32
    pushed = "us-central1-docker.pkg.dev/p-123456/r/kfp-spot:" + __version__
    record = ImageRecord(pushed, "pushed", __version__, "sha256:cd", digest)
    remember(dataclasses.replace(record, platform="linux/amd64"))
    (entry,) = [e for e in catalog.PIPELINES if e.name == "evaluate_checkpoint"]
    for image, accepted in (
        ("us-central1-docker.pkg.dev/p-123456/r/kfp-spot@" + digest, True),
        ("us-central1-docker.pkg.dev/p-123456/r/kfp-spot@sha256:" + "00" * 32, False),
        ("us-central1-docker.pkg.dev/p-123456/other/kfp-spot@" + digest, False),
    ):
        out = tmp_path / "t.yaml"
        catalog.compile_entry(entry, out, base_image=image)
        if accepted:
            check_template_images(out)
        else:
            with pytest.raises(UnpublishedImageError, match="this machine never pushed it"):
                check_template_images(out)


def test_the_release_wheels_published_image_is_accepted():
    release = Path(kfp_spot.__file__).with_name(RELEASE_FILE)
    assert not release.exists()
    release.write_text(json.dumps({"image": RUNTIME_IMAGE}))
    try:
        assert published_runtime_image() == RUNTIME_IMAGE
        check_template_images(COMMITTED)  # no refusal
        release.write_text(json.dumps({"image": "ghcr.io/kfp-spot/python-runtime:0.0.1"}))
        assert published_runtime_image() is None  # a release of another version
    finally:
        release.unlink()


def test_images_of_other_components_are_their_authors_concern(tmp_path):
    from kfp_spot.components import PromoteModelOp

    @dsl.container_component
    def notify(text: str):
        return dsl.ContainerSpec(image="alpine:3", command=["echo"], args=[text])

    @dsl.pipeline(name="mixed")
    def mixed(model_uri: str = "gs://b/m"):
        model = dsl.importer(artifact_uri=model_uri, artifact_class=dsl.Model).output
        metrics = dsl.importer(artifact_uri=model_uri, artifact_class=dsl.Metrics).output
        PromoteModelOp(model=model, metrics=metrics)
        notify(text="done")

    out = tmp_path / "mixed.yaml"
    compiler.Compiler().compile(mixed, str(out))
    with pytest.raises(UnpublishedImageError) as info:
        check_template_images(out)
    assert "exec-promote-model" in str(info.value) and "alpine" not in str(info.value)
    # The fix speaks to the author of this pipeline too, which `kfp-spot compile` does not write.
    assert "for a pipeline of your own, compile it with KFP_SPOT_RUNTIME_IMAGE=" in str(info.value)
    assert "build/templates/components/" in str(info.value)


def test_cli_submit_refuses_in_one_line_and_can_be_told_to_skip(gcs_emulator):
    result = CliRunner().invoke(main, ["submit", str(COMMITTED), *SUBMIT])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kfp-spot: error: ") and "fix: " in lines[0]

    with RecordingServer() as server:
        result = CliRunner().invoke(
            main,
            [
                "submit",
                str(COMMITTED),
                *SUBMIT,
                "--service-account",
                "runner@my-project-123.iam.gserviceaccount.com",
                "--api-endpoint",
                server.endpoint,
                "--skip-image-check",
            ],
        )
    assert result.exit_code == 0, result.output
    assert [r["method"] for r in server.requests].count("POST") == 1


def test_cli_run_vertex_refuses_the_committed_template_too():
    result = CliRunner().invoke(main, ["run", "--vertex", *SUBMIT])
    assert result.exit_code == 1
    assert "could not pull" in result.output


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        # JSON of another shape (a hand edit, another tool's file): was an AttributeError
        # traceback from every submit and `image list`
        '{"images": [{"reference": "h/p/kfp-spot:1"}]}',
        '"images"',
        '{"images": {"h/p/kfp-spot:1": "pushed"}}',
    ],
)
def test_a_corrupt_records_file_is_named(records_dir, content):
    records_dir.mkdir(parents=True)
    (records_dir / "images.json").write_text(content)
    result = CliRunner().invoke(main, ["submit", str(COMMITTED), *SUBMIT])
    assert result.exit_code == 1
    assert "images.json is not a kfp-spot image records file" in result.output
    result = CliRunner().invoke(main, ["image", "list"])
    assert result.exit_code == 1


def test_a_records_file_that_is_a_fifo_is_refused_not_waited_on(records_dir):
    # Every submit and `image list` read it whole: a named pipe held them for ever.
    records_dir.mkdir(parents=True)
    os.mkfifo(records_dir / "images.json")
    result = CliRunner().invoke(main, ["image", "list"])
    assert result.exit_code == 1, result.output
    assert "images.json is not a kfp-spot image records file: not a regular file" in result.output


def test_records_survive_a_round_trip(records_dir):
    first = ImageRecord("h/p/kfp-spot:1", "pushed", __version__, "sha256:1", "sha256:2", 5.0)
    remember(first)
    remember(ImageRecord("h/p/kfp-spot:2", "built", __version__, "sha256:3", time=6.0))
    assert load_records()["h/p/kfp-spot:1"] == first
    assert load_records()["h/p/kfp-spot:2"].kind is ImageKind.BUILT
    assert sorted(load_records()) == ["h/p/kfp-spot:1", "h/p/kfp-spot:2"]
    # The file holds the kinds' plain strings (what older kfp-spot versions wrote and read).
    doc = json.loads((records_dir / "images.json").read_text())
    assert [r["kind"] for r in doc["images"].values()] == ["pushed", "built"]
    result = CliRunner().invoke(main, ["image", "list"])
    assert result.exit_code == 0 and "pushed h/p/kfp-spot:1" in result.output


def test_a_record_of_an_unknown_kind_is_a_corrupt_records_file(records_dir):
    remember(ImageRecord("h/p/kfp-spot:1", ImageKind.PUSHED, __version__, "sha256:1"))
    path = records_dir / "images.json"
    path.write_text(path.read_text().replace('"pushed"', '"pulled"'))
    result = CliRunner().invoke(main, ["image", "list"])
    assert result.exit_code == 1
    assert "images.json is not a kfp-spot image records file" in result.output


def test_a_config_dir_that_is_a_file_is_named_not_a_traceback(records_dir):
    records_dir.parent.mkdir(parents=True, exist_ok=True)
    records_dir.write_text("")  # $KFP_SPOT_CONFIG_DIR names a file
    for args in (["image", "list"], ["submit", str(COMMITTED), *SUBMIT]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, result.output
        assert result.output.startswith(
            f"kfp-spot: error: cannot read the image records {records_dir / 'images.json'}: "
            "Not a directory; $KFP_SPOT_CONFIG_DIR"
        ), result.output
