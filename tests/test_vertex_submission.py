"""`kfp-spot run --vertex` builds a real PipelineJob from the compiled spec and sends it."""

import pytest
from google.auth.credentials import AnonymousCredentials

from kfp_spot import __version__
from kfp_spot.image import ImageRecord, remember
from kfp_spot.pipelines import catalog
from kfp_spot.vertex import pipeline_job
from tests.recording_server import RecordingServer

# A team's own copy of the runtime image, as `kfp-spot image push` records it.
PUSHED_IMAGE = f"europe-west4-docker.pkg.dev/my-project-123/images/kfp-spot:{__version__}"
PUSHED = {PUSHED_IMAGE: ImageRecord(PUSHED_IMAGE, "pushed", __version__, "sha256:1d")}


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """spot_training compiled against PUSHED_IMAGE (`kfp-spot compile --base-image`)."""
    (entry,) = [e for e in catalog.PIPELINES if e.name == "spot_training"]
    out = tmp_path_factory.mktemp("templates") / "spot_training.yaml"
    return catalog.compile_entry(entry, out, base_image=PUSHED_IMAGE)


@pytest.fixture
def pushed(tmp_path, monkeypatch):
    """This machine's records say PUSHED_IMAGE was pushed (what `kfp-spot image push` writes)."""
    monkeypatch.setenv("KFP_SPOT_CONFIG_DIR", str(tmp_path / "config"))
    remember(PUSHED[PUSHED_IMAGE])


def test_submission_sends_the_compiled_template_and_parameters(gcs_emulator, template):
    with RecordingServer() as server:
        name = pipeline_job.submit_pipeline(
            template,
            project="my-project-123",
            location="europe-west4",
            # A bucket that does not exist yet plus an explicit service account: the SDK then
            # creates the bucket on the GCS emulator and asks no other Google service.
            pipeline_root="gs://kfp-spot-vertex-root/root",
            service_account="runner@my-project-123.iam.gserviceaccount.com",
            parameter_values={"source": "gs://kfp-spot-test/src.tar.gz", "project": "p-1"},
            api_endpoint=server.endpoint,
            credentials=AnonymousCredentials(),
            image_records=PUSHED,
        )
    posts = [r for r in server.requests if r["method"] == "POST"]
    assert len(posts) == 1
    request = posts[0]
    assert request["path"] == "/v1/projects/my-project-123/locations/europe-west4/pipelineJobs"
    body = request["body"]
    assert body["pipelineSpec"]["pipelineInfo"]["name"] == "spot-training"
    runtime = body["runtimeConfig"]
    assert runtime["gcsOutputDirectory"] == "gs://kfp-spot-vertex-root/root"
    assert body["serviceAccount"] == "runner@my-project-123.iam.gserviceaccount.com"
    assert runtime["parameterValues"]["source"] == "gs://kfp-spot-test/src.tar.gz"
    assert runtime["parameterValues"]["project"] == "p-1"
    assert name.startswith("projects/my-project-123/locations/europe-west4/pipelineJobs/")


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"project": "X"}, "project"),
        ({"location": "mars"}, "location"),
        ({"pipeline_root": "/tmp/root"}, "pipeline_root"),
        ({"template_path": "/nonexistent.yaml"}, "template"),
    ],
)
def test_bad_submission_arguments_are_named(kwargs, needle, template):
    args = {
        "template_path": template,
        "project": "my-project-123",
        "location": "us-central1",
        "pipeline_root": "gs://b/r",
    } | kwargs
    template = args.pop("template_path")
    with pytest.raises(pipeline_job.SubmissionError, match=needle):
        pipeline_job.submit_pipeline(template, **args)


def test_cli_submit_sends_parameters_parsed_as_json(gcs_emulator, template, pushed):
    from click.testing import CliRunner

    from kfp_spot.cli import main

    with RecordingServer() as server:
        result = CliRunner().invoke(
            main,
            [
                "submit",
                str(template),
                "--project",
                "my-project-123",
                "--pipeline-root",
                "gs://kfp-spot-cli-root/r",
                "--service-account",
                "runner@my-project-123.iam.gserviceaccount.com",
                "--api-endpoint",
                server.endpoint,
                "--param",
                "source=gs://b/src.tar.gz",
                "--param",
                'thresholds={"accuracy": ">=0.9"}',
            ],
        )
    assert result.exit_code == 0, result.output
    (post,) = [r for r in server.requests if r["method"] == "POST"]
    values = post["body"]["runtimeConfig"]["parameterValues"]
    assert values["thresholds"] == {"accuracy": ">=0.9"}
    assert values["project"] == "my-project-123"
    assert values["location"] == "us-central1"


def test_cli_submit_without_project_is_a_usage_error():
    from click.testing import CliRunner

    from kfp_spot.cli import main

    result = CliRunner().invoke(main, ["submit", str(catalog.pipeline_path("spot_training"))])
    assert result.exit_code == 2
    assert "--project" in result.output
