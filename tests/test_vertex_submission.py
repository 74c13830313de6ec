"""`kfp-spot run --vertex` builds a real PipelineJob from the compiled spec and sends it."""

import pytest
from google.auth.credentials import AnonymousCredentials

from kfp_spot import vertex
from kfp_spot.pipelines import catalog
from tests.recording_server import RecordingServer

TEMPLATE = catalog.pipeline_path("spot_training")


def test_submission_sends_the_compiled_template_and_parameters(gcs_emulator):
    with RecordingServer() as server:
        name = vertex.submit_pipeline(
            TEMPLATE,
            project="my-project-123",
            location="europe-west4",
            # A bucket that does not exist yet plus an explicit service account: the SDK then
            # creates the bucket on the GCS emulator and asks no other Google service.
            pipeline_root="gs://kfp-spot-vertex-root/root",
            service_account="runner@my-project-123.iam.gserviceaccount.com",
            parameter_values={"source": "gs://kfp-spot-test/src.tar.gz", "project": "p-1"},
            api_endpoint=server.endpoint,
            credentials=AnonymousCredentials(),
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
def test_bad_submission_arguments_are_named(kwargs, needle):
    args = {
        "template_path": TEMPLATE,
        "project": "my-project-123",
        "location": "us-central1",
        "pipeline_root": "gs://b/r",
    } | kwargs
    template = args.pop("template_path")
    with pytest.raises(vertex.SubmissionError, match=needle):
        vertex.submit_pipeline(template, **args)


def test_cli_submit_sends_parameters_parsed_as_json(gcs_emulator):
    from click.testing import CliRunner

    from kfp_spot.cli import main

    with RecordingServer() as server:
        result = CliRunner().invoke(
            main,
            [
                "submit",
                str(TEMPLATE),
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

    result = CliRunner().invoke(main, ["submit", str(TEMPLATE)])
    assert result.exit_code == 2
    assert "--project" in result.output
