"""`kfp-spot run --vertex` builds a real PipelineJob from the compiled spec and sends it."""

import contextlib
import os
import re
import sys
from collections.abc import Iterator

import pytest
from google.auth.credentials import AnonymousCredentials

from kfp_spot import RUNTIME_IMAGE, __version__
from kfp_spot.image import ImageRecord, remember
from kfp_spot.pipelines import catalog, local
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
            parameter_values={
                "source": "gs://kfp-spot-test/src.tar.gz",
                "project": "other-project-1",
            },
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
    assert runtime["parameterValues"]["project"] == "other-project-1"
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
        "pipeline_root": "gs://bkt/r",
    } | kwargs
    template = args.pop("template_path")
    with pytest.raises(pipeline_job.SubmissionError, match=needle):
        pipeline_job.submit_pipeline(template, **args)


def _dry_run_argv(path) -> list[str]:
    """`kfp-spot submit PATH --dry-run` for project my-proj, its root in a bucket that can exist."""
    return [
        "submit",
        str(path),
        "--dry-run",
        "--project",
        "my-proj",
        "--pipeline-root",
        "gs://bkt/r",
    ]


def _submit_argv(template, root: str, endpoint: str, *extra: str) -> list[str]:
    """`kfp-spot submit TEMPLATE` to ``endpoint``, into a new bucket with a service account."""
    return [
        "submit",
        str(template),
        "--project",
        "my-project-123",
        "--pipeline-root",
        root,
        "--service-account",
        "runner@my-project-123.iam.gserviceaccount.com",
        "--api-endpoint",
        endpoint,
        *extra,
    ]


def test_cli_submit_sends_parameters_parsed_as_json(gcs_emulator, template, pushed):
    from click.testing import CliRunner

    from kfp_spot.cli import main

    with RecordingServer() as server:
        result = CliRunner().invoke(
            main,
            _submit_argv(
                template,
                "gs://kfp-spot-cli-root/r",
                server.endpoint,
                "--param",
                "source=gs://b/src.tar.gz",
                "--param",
                'thresholds={"accuracy": ">=0.9"}',
            ),
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


# --- offline checks, dry run and credentials (no Google Cloud, no credentials) ------------------

COMMITTED_TEMPLATES = [e.default_path() for e in catalog.PIPELINES + catalog.COMPONENTS]


@pytest.fixture
def no_credentials(tmp_path, monkeypatch, no_google_login):
    """No Google login on this machine (``no_google_login``).

    The committed templates' image counts as pushed (a team's `kfp-spot image push`), so the image
    check passes and the rest of the submission is what is tested.
    """
    monkeypatch.setenv("KFP_SPOT_CONFIG_DIR", str(tmp_path / "config"))
    remember(ImageRecord(RUNTIME_IMAGE, "pushed", __version__, "sha256:1d"))


def _cli(args):
    from click.testing import CliRunner

    from kfp_spot.cli import main

    return CliRunner().invoke(main, args)


@pytest.mark.parametrize(
    "path", COMMITTED_TEMPLATES, ids=[p.parent.name for p in COMMITTED_TEMPLATES]
)
def test_dry_run_of_every_committed_template_needs_no_credentials(path, no_credentials):
    import json

    spec = pipeline_job.read_template(path)
    # The launch alone has no package artifact (a submission cannot pass one): a container then;
    # the deploy alone has no model artifact: the model directory's URI then.
    extra = {
        "launch_spot_job": ["--param", f"container_image_uri={PUSHED_IMAGE}"],
        "deploy_spot_endpoint": ["--param", "artifact_uri=gs://my-bucket/model"],
    }.get(path.parent.name, [])
    result = _cli([*_dry_run_argv(path), *extra])
    assert result.exit_code == 0, result.stderr
    request = json.loads(result.stdout)
    assert request["method"] == "POST"
    assert request["url"].startswith(
        "https://us-central1-aiplatform.googleapis.com/v1/projects/my-proj/locations/"
        "us-central1/pipelineJobs?pipelineJobId="
    )
    body = request["body"]
    assert body["displayName"] == spec["pipelineInfo"]["name"]
    assert body["runtimeConfig"]["gcsOutputDirectory"] == "gs://bkt/r"
    assert body["pipelineSpec"]["inline"] == str(path)
    # project/location are parameters only where the template declares them.
    declared = pipeline_job.template_parameters(spec)
    sent = body["runtimeConfig"].get("parameterValues", {})
    for name, value in (("project", "my-proj"), ("location", "us-central1")):
        assert (sent.get(name) == value) if name in declared else (name not in sent)
    assert "dry run: nothing was sent" in result.stderr


def test_dry_run_shows_every_field_it_would_send(no_credentials):
    import json

    path = catalog.pipeline_path("spot_training")
    result = _cli(
        [
            "run",
            "--vertex",
            "--dry-run",
            "--project",
            "my-project-123",
            "--location",
            "europe-west4",
            "--pipeline-root",
            "gs://bkt/r",
            "--service-account",
            "runner@my-project-123.iam.gserviceaccount.com",
            "--label",
            "team=ml",
            "--param",
            "source=gs://b/src.tar.gz",
            "--param",
            "replica_count=2",
            "--param",
            'thresholds={"mse": "<=0.1"}',
            "--enable-caching",
        ]
    )
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)["body"]
    assert body["serviceAccount"] == "runner@my-project-123.iam.gserviceaccount.com"
    assert body["labels"]["team"] == "ml"
    values = body["runtimeConfig"]["parameterValues"]
    assert values["source"] == "gs://b/src.tar.gz" and values["replica_count"] == 2
    assert values["project"] == "my-project-123" and values["location"] == "europe-west4"
    assert body["pipelineSpec"]["inline"] == str(path)
    assert all(body["pipelineSpec"]["taskCaching"].values())  # --enable-caching: every task
    # source (required) and the gate are set; the launch's executor image (the default, past its
    # end of availability) is announced as the launcher would announce it, and each task
    # --enable-caching would replay.
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert all(
        "executor image" in line or "is cached by --enable-caching" in line for line in warnings
    ), warnings


def test_dry_run_warns_of_a_required_parameter_left_unset(no_credentials):
    path = catalog.pipeline_path("spot_training")
    result = _cli(["submit", str(path), "--dry-run", "--project", "my-proj"])
    assert result.exit_code == 0, result.stderr
    assert (
        "needs source (pipeline parameters without a default: --param NAME=VALUE, or "
        "parameter_values from Python)"
    ) in result.stderr


def test_a_real_submit_with_a_required_parameter_unset_is_refused_before_sending(no_credentials):
    """The dry run warns and shows the request; a real submit sent it and Vertex AI refused
    it after the round trip (here: the credentials lookup first). Now it is one line, offline."""
    path = catalog.pipeline_path("spot_training")
    result = _cli(["submit", str(path), "--project", "my-proj", "--pipeline-root", "gs://bkt/r"])
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"kfp-spot: error: {path} needs source (pipeline parameters without a default: --param "
        "NAME=VALUE, or parameter_values from Python); Vertex AI refuses the run without them; "
        "nothing was sent"
    ), lines
    with pytest.raises(pipeline_job.SubmissionError, match="needs source"):
        pipeline_job.submit_pipeline(path, project="my-proj", location="us-central1")


def test_dry_run_warns_that_the_default_gate_is_the_examples(no_credentials):
    """Your package's evaluate() may return no ``accuracy``: the evaluation would fail after a
    paid training run (a local ``kfp-spot run`` gates your package only on what you give)."""
    path = catalog.pipeline_path("spot_training")
    args = ["submit", str(path), "--dry-run", "--project", "my-proj"]
    result = _cli([*args, "--param", "source=gs://b/src.tar.gz"])
    assert result.exit_code == 0, result.stderr
    assert """thresholds: left at the template's default {"accuracy": ">=0.85"}""" in result.stderr
    assert "set the pipeline parameter thresholds to" in result.stderr
    result = _cli([*args, "--param", "source=gs://b/src.tar.gz", "--param", "thresholds={}"])
    assert result.exit_code == 0 and "thresholds" not in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--param", "sorce=gs://b/s.tar.gz"], "has no parameter 'sorce'; valid: "),
        (
            ["--param", "replica_count=two"],
            "parameter replica_count is of type Integer; 'two' is not one",
        ),
        (
            ["--pipeline-root", "/tmp/root"],
            "pipeline_root: '/tmp/root' is not a Cloud Storage URI: give gs://BUCKET/PATH",
        ),
        (["--pipeline-root", "/gcs/bkt/r"], "'/gcs/bkt/r' is not a Cloud Storage URI"),
        # Vertex AI writes the run there: a bucket that cannot exist, as staging_uri's is.
        (["--pipeline-root", "gs://My_Bucket/r"], "'My_Bucket' is not a Cloud Storage bucket"),
        # The storage rules' own words, not an empty bucket name cut out of the URI.
        (["--pipeline-root", "gs:///tmp/root"], "pipeline_root: 'gs:///tmp/root' names no bucket"),
        (["--pipeline-root", "gs://"], "pipeline_root: 'gs://' names no bucket"),
        (["--service-account", "runner"], "service_account: 'runner' is not a service account"),
        (["--label", "Team=ml"], "labels.Team: label key 'Team' is invalid"),
        # Google Cloud's limit, which CustomJobs, Models and Endpoints were held to already.
        (
            [f"--label=k{i}=v" for i in range(65)],
            "labels: has 65 labels; at most 64",
        ),
        # Beyond a double's range: protobuf's OverflowError, a traceback, even for a dry run.
        (
            ["--param", 'evaluation_params={"seed": 1' + "0" * 400 + "}"],
            "parameter evaluation_params: item ['seed'] (1000",
        ),
        # Vertex AI Pipelines sets this key on every run and drops the value given.
        (
            ["--label", "vertex-ai-pipelines-run-billing-id=team-a"],
            "labels.vertex-ai-pipelines-run-billing-id: is reserved by Vertex AI Pipelines",
        ),
        (["--location", "mars"], "location"),
        # Shown as the request URL "notaurl/v1/projects/..." by a dry run; now refused.
        (
            ["--api-endpoint", "notaurl"],
            "Invalid value for '--api-endpoint': 'notaurl' is neither a URL nor a domain name",
        ),
        # `--location "$REGION"` with REGION unset: it ran in the template's region silently.
        (["--location", ""], "--location: is empty: give a Vertex AI region"),
        (["--location", " "], "--location: is empty"),
    ],
)
def test_a_bad_argument_is_one_line_before_anything_is_built(extra, needle, no_credentials):
    path = catalog.pipeline_path("spot_training")
    for dry in (["--dry-run"], []):
        result = _cli(["submit", str(path), "--project", "my-proj", *dry, *extra])
        assert result.exit_code == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kfp-spot: error: "), lines
        assert needle in lines[0]
        assert result.stdout == ""


def test_the_dry_run_url_is_the_endpoint_the_submit_would_reach(no_credentials):
    path = catalog.pipeline_path("evaluate_checkpoint")
    where = {"project": "my-proj", "location": "europe-west4", "pipeline_root": "gs://bkt/r"}
    given = {"checkpoint_uri": "gs://bkt/ckpt", "source": "gs://bkt/src.tar.gz"}
    submission = pipeline_job.prepare_submission(path, **where, parameter_values=given)
    for endpoint, base in [
        ("eu.example.com:8443/", "https://eu.example.com:8443"),
        ("http://127.0.0.1:9", "http://127.0.0.1:9"),
        (None, "https://europe-west4-aiplatform.googleapis.com"),
    ]:
        url = pipeline_job.dry_run(submission, api_endpoint=endpoint)["url"]
        assert url.startswith(f"{base}/v1/projects/my-proj/locations/europe-west4/"), url
    for call in (
        lambda: pipeline_job.dry_run(submission, api_endpoint="notaurl"),
        lambda: pipeline_job.submit_pipeline(
            path, **where, parameter_values=given, api_endpoint="notaurl", check_images=False
        ),
    ):
        with pytest.raises(pipeline_job.SubmissionError, match="api_endpoint: 'notaurl' is "):
            call()


def test_a_project_or_location_parameter_only_gcpcs_ops_read_is_checked(tmp_path, no_credentials):
    """A team's pipeline passes its `project` and `location` parameters to GCPC's ops alone:
    `--param project=My_Project` was sent as it was, and the run failed in its first op."""
    from google_cloud_pipeline_components.v1.model import ModelGetOp
    from kfp import compiler, dsl

    @dsl.pipeline(name="team-get")
    def team(project: str, location: str = "us-central1"):
        ModelGetOp(project=project, location=location, model_name="123")

    path = tmp_path / "team.yaml"
    compiler.Compiler().compile(team, str(path))
    base = ["submit", str(path), "--project", "my-proj", "--location", "europe-west4"]
    base += ["--pipeline-root", "gs://bkt/r", "--dry-run"]
    for given, needle in [
        ("project=My_Project", "parameter 'project': expected a Google Cloud project ID"),
        ("location=mars", "parameter 'location': 'mars' is not a Vertex AI region"),
    ]:
        result = _cli([*base, "--param", given])
        assert result.exit_code == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"kfp-spot: error: {needle}"), line
    result = _cli([*base, "--param", "project=example.com:my-team", "--param", "location=us-east1"])
    assert result.exit_code == 0, result.stderr


def test_a_misspelled_param_lists_the_valid_names(no_credentials):
    path = catalog.pipeline_path("evaluate_checkpoint")
    result = _cli(["submit", str(path), "--dry-run", "--project", "my-proj", "--param", "stpe=3"])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "has no parameter 'stpe'; valid: allow_foreign_layout, " in line
    assert ", checkpoint_uri, " in line and ", step, " in line


def test_dry_run_in_a_checkout_still_refuses_an_image_nobody_pushed(tmp_path, monkeypatch):
    monkeypatch.setenv("KFP_SPOT_CONFIG_DIR", str(tmp_path / "config"))
    path = catalog.pipeline_path("spot_training")
    result = _cli(["submit", str(path), "--dry-run", "--project", "my-proj"])
    assert result.exit_code == 1
    assert "could not pull" in result.stderr and result.stdout == ""


def _evaluation_submit_argv() -> list[str]:
    """A real (not dry-run) `kfp-spot submit` of evaluate_checkpoint, every argument valid."""
    return [
        "submit",
        str(catalog.pipeline_path("evaluate_checkpoint")),
        "--project",
        "my-proj",
        "--pipeline-root",
        "gs://bkt/r",
        "--param",
        "source=gs://b/s.tar.gz",
        "--param",
        "checkpoint_uri=gs://bkt/ckpt",
    ]


def test_without_credentials_a_real_submit_says_how_to_log_in(no_credentials):
    result = _cli(_evaluation_submit_argv())
    assert result.exit_code == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("kfp-spot: error: no usable Google Cloud credentials")
    assert "gcloud auth application-default login" in lines[0]


def test_offline_a_real_submit_fails_at_once_in_one_line(sign_in_unreachable, no_credentials):
    """The SDK would retry the token for 120 s in its bucket check, then log a traceback."""
    result = _cli(_evaluation_submit_argv())
    assert result.exit_code == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("kfp-spot: error: cannot reach Google's sign-in service"), lines
    assert "Nothing was sent" in lines[0]


def test_a_template_without_project_or_location_parameters_submits(gcs_emulator):
    """evaluate_checkpoint declares neither: they are not sent as parameters."""
    path = catalog.pipeline_path("evaluate_checkpoint")
    with RecordingServer() as server:
        pipeline_job.submit_pipeline(
            path,
            project="my-project-123",
            location="us-central1",
            pipeline_root="gs://kfp-spot-eval-root/r",
            service_account="runner@my-project-123.iam.gserviceaccount.com",
            parameter_values={"source": "gs://b/s.tar.gz", "checkpoint_uri": "gs://b/c"},
            api_endpoint=server.endpoint,
            credentials=AnonymousCredentials(),
            check_images=False,
        )
    (post,) = [r for r in server.requests if r["method"] == "POST"]
    assert set(post["body"]["runtimeConfig"]["parameterValues"]) == {"source", "checkpoint_uri"}


def test_run_dry_run_without_vertex_is_a_usage_error():
    result = _cli(["run", "--dry-run"])
    assert result.exit_code == 2
    assert "--dry-run shows a Vertex AI submission: add --vertex" in result.output


def test_required_project_and_location_set_by_the_flags_are_not_reported_missing(tmp_path):
    """A team's own pipeline declares `project: str` with no default (as GCPC examples do):
    --project fills it, so the submission must not warn that it is unset."""
    from kfp import compiler, dsl

    @dsl.container_component
    def echo(text: str):
        return dsl.ContainerSpec(image="alpine:3", command=["echo"], args=[text])

    @dsl.pipeline(name="team-pipeline")
    def team(project: str, location: str, source: str):
        echo(text=project)
        echo(text=location)
        echo(text=source)

    path = tmp_path / "team.yaml"
    compiler.Compiler().compile(team, str(path))
    submission = pipeline_job.prepare_submission(
        path,
        project="my-project-123",
        location="europe-west4",
        parameter_values={"source": "gs://b/s"},
        pipeline_root="gs://bkt/root",
    )
    assert submission.parameter_values == {
        "source": "gs://b/s",
        "project": "my-project-123",
        "location": "europe-west4",
    }
    assert submission.warnings == ()
    unset = pipeline_job.prepare_submission(
        path, project="my-project-123", location="europe-west4", pipeline_root="gs://bkt/root"
    )
    assert unset.warnings == (
        f"{path} needs source (pipeline parameters without a default: --param NAME=VALUE, or "
        "parameter_values from Python); Vertex AI refuses the run without them",
    )


def test_without_location_the_templates_own_region_is_kept(tmp_path, no_credentials):
    """A team's pipeline declares `location: str = "europe-west4"`: a submission without
    --location runs there, not in us-central1 with the parameter overwritten (an EU pipeline's
    CustomJobs would silently train in the US)."""
    import json

    from kfp import compiler, dsl

    @dsl.container_component
    def echo(text: str):
        return dsl.ContainerSpec(image="alpine:3", command=["echo"], args=[text])

    @dsl.pipeline(name="eu-pipeline")
    def eu(project: str, location: str = "europe-west4"):
        echo(text=project)
        echo(text=location)

    path = tmp_path / "eu.yaml"
    compiler.Compiler().compile(eu, str(path))
    base = _dry_run_argv(path)
    for extra, region in (
        ([], "europe-west4"),
        (["--param", "location=asia-east1"], "asia-east1"),
        (["--location", "us-east1"], "us-east1"),
    ):
        result = _cli([*base, *extra])
        assert result.exit_code == 0, result.stderr
        request = json.loads(result.stdout)
        assert request["url"].startswith(f"https://{region}-aiplatform.googleapis.com/"), extra
        assert request["body"]["runtimeConfig"]["parameterValues"]["location"] == region


def test_a_template_with_a_local_pipeline_root_of_its_own_is_refused_naming_it(
    tmp_path, no_credentials
):
    """A team tried its pipeline locally with `@dsl.pipeline(pipeline_root="/home/me/root")`:
    without --pipeline-root that root was sent as the run's gcsOutputDirectory, which Vertex AI
    refuses. Now it is one line before anything is built; --pipeline-root gs://... still wins."""
    import json

    import yaml

    spec = yaml.safe_load(catalog.pipeline_path("evaluate_checkpoint").read_text())
    spec["defaultPipelineRoot"] = "/home/me/pipeline_root"
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(spec))
    base = ["submit", str(path), "--project", "my-proj"]
    for dry in (["--dry-run"], []):
        result = _cli([*base, *dry])
        assert result.exit_code == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "kfp-spot: error: pipeline_root (the template's own, defaultPipelineRoot): "
            "'/home/me/pipeline_root' is not a Cloud Storage URI: give gs://BUCKET/PATH; pass "
            "--pipeline-root gs://BUCKET/PATH"
        ), lines
    result = _cli([*base, "--dry-run", "--pipeline-root", "gs://team-bucket/root"])
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)["body"]
    assert body["runtimeConfig"]["gcsOutputDirectory"] == "gs://team-bucket/root"
    spec["defaultPipelineRoot"] = "gs://team-bucket/own-root"
    path.write_text(yaml.safe_dump(spec))
    result = _cli([*base, "--dry-run"])
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)["body"]
    assert body["runtimeConfig"]["gcsOutputDirectory"] == "gs://team-bucket/own-root"


def test_a_template_with_a_platform_spec_is_refused_in_one_line_not_a_traceback(
    tmp_path, no_credentials
):
    """kfp-kubernetes writes a platform spec as a second YAML document; the Vertex AI SDK reads
    one (``yaml.safe_load``) and raised a ComposerError traceback from deep inside PipelineJob.
    A local run still loads it (KFP's loader takes both documents)."""
    path = tmp_path / "with-platform.yaml"
    text = catalog.pipeline_path("evaluate_checkpoint").read_text()
    path.write_text(text + "---\nplatforms:\n  kubernetes:\n    deploymentSpec:\n      {}\n")
    for dry in (["--dry-run"], []):
        args = ["submit", str(path), "--project", "my-proj", "--pipeline-root", "gs://bkt/r"]
        result = _cli([*args, *dry])
        assert result.exit_code == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "holds 2 YAML documents" in lines[0], lines
    with pytest.raises(pipeline_job.SubmissionError, match="platform spec"):
        pipeline_job.prepare_submission(path, project="my-proj", location="us-central1")
    assert local.load(path).platform_spec.platforms["kubernetes"] is not None


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_or_refusing_api_is_one_line_not_a_traceback(gcs_emulator, template, pushed):
    """requests' ConnectionError (nothing listening) and the API's error answer (here a 404 from
    a server that serves no pipelineJobs) came out of `submit` as bare tracebacks."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    from click.testing import CliRunner

    from kfp_spot.cli import main

    class NotFound(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = b'{"error": {"code": 404, "message": "no pipelineJobs here"}}'
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    Thread(target=server.serve_forever, daemon=True).start()
    refusing = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for n, (endpoint, needle) in enumerate(
            (
                (f"http://127.0.0.1:{_closed_port()}", "cannot reach http://127.0.0.1:"),
                (refusing, f"{refusing} refused the PipelineJob: 404 .*no pipelineJobs here"),
            )
        ):
            # A new bucket and a service account: the SDK asks the GCS emulator only (of a
            # bucket that exists it asks Resource Manager, out of reach here).
            root = f"gs://kfp-spot-unreachable-root-{n}/r"
            result = CliRunner().invoke(
                main,
                _submit_argv(template, root, endpoint, "--param", "source=gs://bkt/src.tar.gz"),
            )
            assert result.exit_code == 1, result.output
            assert not isinstance(result.exception, Exception) or isinstance(
                result.exception, SystemExit
            ), result.exception
            (error,) = [line for line in result.output.splitlines() if "error:" in line]
            assert re.search(needle, error), error
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    ("name", "refused"),
    [("p" * 113, False), ("p" * 114, True), ("p" * 128, True), ("1st-team", True)],
)
def test_a_pipeline_name_that_makes_no_valid_job_id_is_one_line(
    tmp_path, no_credentials, name, refused
):
    """KFP compiles names of up to 128 characters, starting with a digit too; the SDK makes the
    job ID NAME-YYYYMMDDHHMMSS, which Vertex AI takes only up to 128 characters, starting with a
    letter: PipelineJob() raised ValueError, a traceback even for --dry-run."""
    import yaml

    spec = yaml.safe_load(catalog.pipeline_path("evaluate_checkpoint").read_text())
    spec["pipelineInfo"]["name"] = name
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(spec))
    args = ["submit", str(path), "--project", "my-proj", "--pipeline-root", "gs://bkt/r"]
    for dry in (["--dry-run"], []):
        result = _cli([*args, *dry])
        if not refused:
            assert "pipeline name" not in result.stderr, result.stderr
            continue
        assert result.exit_code == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert f"pipeline name '{name}' ({len(name)} characters) makes a PipelineJob ID" in line
        assert "at most 113 characters" in line and "Traceback" not in result.stderr


def test_without_a_pipeline_root_the_submission_warns_of_the_sdks_new_bucket(no_credentials):
    """The SDK made up gs://PROJECT-vertex-pipelines-REGION-<random>/ and created that bucket,
    another one for each process that submits; the dry run showed it without a word."""
    path = catalog.pipeline_path("evaluate_checkpoint")
    args = ["submit", str(path), "--dry-run", "--project", "my-proj", "--location", "us-central1"]
    result = _cli(args)
    assert result.exit_code == 0, result.stderr
    assert (
        "warning: no pipeline root (no --pipeline-root, and the template has none of its own): "
        "the Vertex AI SDK makes one up, "
        "gs://my-proj-vertex-pipelines-us-central1-<random>/output_artifacts/"
    ) in result.stderr
    result = _cli([*args, "--pipeline-root", "gs://bkt/r"])
    assert result.exit_code == 0 and "no pipeline root" not in result.stderr, result.stderr


def test_a_domain_scoped_project_without_a_pipeline_root_is_refused_naming_it(no_credentials):
    """A domain-scoped project's ':' made the SDK's bucket name one Cloud Storage refuses."""
    path = catalog.pipeline_path("evaluate_checkpoint")
    args = ["submit", str(path), "--dry-run", "--project", "example.com:my-proj"]
    result = _cli(args)
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "kfp-spot: error: pipeline_root: none given (no --pipeline-root, and the template has "
        "none of its own), and the one the Vertex AI SDK makes up for project "
        "'example.com:my-proj', gs://example.com:my-proj-vertex-pipelines-us-central1-<random>/"
    ), lines
    assert _cli([*args, "--pipeline-root", "gs://bkt/r"]).exit_code == 0


def test_the_default_root_is_the_one_the_installed_sdk_makes():
    from google.cloud.aiplatform.utils import gcs_utils

    from kfp_spot.vertex.pipeline_parameters import sdk_default_root

    for project, location in [("my-proj", "us-central1"), ("a" * 30, "northamerica-northeast1")]:
        salt = gcs_utils._DEFAULT_STAGING_BUCKET_SALT
        assert sdk_default_root(project, location, salt) == (
            gcs_utils.generate_gcs_directory_for_pipeline_artifacts(project, location)
        )


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        # protobuf refused to serialize it: a traceback from dry_run and from a real submit
        ({"evaluation_params": {"alpha": float("nan")}}, "nan is not a finite number"),
        # sent as 9007199254740992.0, silently
        (
            {"max_resubmissions": 2**53 + 1},
            "9007199254740993 is an integer a double cannot hold: ",
        ),
        ({"training_args": ["--seed", 10**400]}, "item [1] (1000000000"),
    ],
)
def test_the_python_api_refuses_a_number_a_protobuf_value_cannot_carry(given, needle):
    path = catalog.pipeline_path("spot_training")
    with pytest.raises(pipeline_job.SubmissionError) as refused:
        pipeline_job.prepare_submission(
            path,
            project="my-proj",
            location="us-central1",
            pipeline_root="gs://bkt/r",
            parameter_values={"source": "gs://bkt/s.tar.gz", **given},
        )
    (name,) = given
    assert str(refused.value).startswith(f"parameter {name!r}: ")
    assert needle in str(refused.value)


_OPENED: list[list[str]] = []  # while a test records: each path a file was opened at


def _record_opens(event: str, args: tuple) -> None:
    if _OPENED and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED[-1].append(os.fsdecode(args[0]))


@contextlib.contextmanager
def _opens(path) -> Iterator[list[str]]:
    """The times ``path`` is opened in the block (Python's `open` audit event: real reads)."""
    if not getattr(_record_opens, "installed", False):
        sys.addaudithook(_record_opens)  # audit hooks cannot be removed: idle outside the block
        _record_opens.installed = True  # type: ignore[attr-defined]
    _OPENED.append([])
    try:
        yield _OPENED[-1]
    finally:
        opened = _OPENED.pop()
        opened[:] = [p for p in opened if os.path.realpath(p) == os.path.realpath(path)]


def test_the_python_submit_sends_the_submission_it_checked(gcs_emulator, template, pushed):
    """`kfp_spot.pipelines.vertex.submit` (and so `kfp-spot submit`) checked the template, then
    had `submit_pipeline` read it and prepare the same submission a second time, whose warnings
    were dropped. It now sends the checked submission: the template is read no more often than
    by a dry run of it (which builds the same request), and each warning reaches `warn` once."""
    from kfp_spot.pipelines import vertex

    where = {
        "project": "my-project-123",
        "location": "europe-west4",
        "pipeline_root": "gs://kfp-spot-send-once/r",  # a new bucket: see the first test
        "service_account": "runner@my-project-123.iam.gserviceaccount.com",
        "parameter_values": {"source": "gs://kfp-spot-test/src.tar.gz"},
        "image_records": PUSHED,
    }
    shown: list[str] = []
    with _opens(template) as dry_reads:
        request = vertex.dry_run(template, **where, warn=shown.append)
    assert shown, "the default gate's warning, at least"
    sent: list[str] = []
    with RecordingServer() as server, _opens(template) as submit_reads:
        name = vertex.submit(
            template,
            **where,
            api_endpoint=server.endpoint,
            credentials=AnonymousCredentials(),
            warn=sent.append,
        )
    assert sent == shown  # each once, none lost
    assert len(submit_reads) == len(dry_reads), (submit_reads, dry_reads)
    (post,) = [r for r in server.requests if r["method"] == "POST"]
    assert post["body"]["runtimeConfig"] == request["body"]["runtimeConfig"]
    assert name.startswith("projects/my-project-123/locations/europe-west4/pipelineJobs/")


_HUGE = "x" * 100_000  # a value pasted whole, or a file's content given where its path goes


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--param", f"{_HUGE}=1"], "the pipeline has no parameter 'xxx"),
        (["--param", _HUGE], "Invalid value for --param: 'xxx"),
        (["--param", f"source=gs://b/{_HUGE}", "--param", "source=gs://b/s"], "given twice"),
        (["--label", f"{_HUGE}=a"], "labels.'xxx"),
        (["--label", _HUGE], "Invalid value for --label: 'xxx"),
        (["--api-endpoint", f"https://{_HUGE}"], "which is not a host name"),
        (["--param", f"source=/{_HUGE}"], "prepare_package input 'source': '/xxx"),
        (["--param", "source=gs://b/s", "--param", f'thresholds={{"a": "{_HUGE}"}}'], "bound"),
        # evaluate_checkpoint's imported checkpoint, a path of this machine
        (["--param", f"checkpoint_uri=/{_HUGE}"], "input 'checkpoint'"),
    ],
)
def test_a_huge_value_is_shown_cut_short_in_the_one_error_line(args, needle, no_credentials):
    """A 100 KB argument came back whole in the error line (or several times in one)."""
    name = "evaluate_checkpoint" if "checkpoint_uri" in args[-1] else "spot_training"
    extra = ["--param", "source=gs://b/s"] if name == "evaluate_checkpoint" else []
    path = catalog.pipeline_path(name)
    result = _cli(["submit", str(path), "--dry-run", "--project", "my-proj", *extra, *args])
    assert result.exit_code == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "error:" in line]
    assert needle in line and "..." in line, line
    assert max(len(line) for line in result.stderr.splitlines()) < 1000


def test_the_python_submission_shows_a_huge_value_cut_short(no_credentials):
    from kfp_spot.pipelines import vertex

    path = catalog.pipeline_path("spot_training")
    where = {"project": "my-proj", "pipeline_root": "gs://bkt/r", "warn": None}
    for given, needle in [
        ({_HUGE: 1}, "parameter 'xxx"),
        ({"source": f"/{_HUGE}"}, "prepare_package input 'source': '/xxx"),
    ]:
        with pytest.raises(vertex.SubmissionError) as refused:
            vertex.dry_run(path, **where, parameter_values=given)
        assert needle in str(refused.value) and len(str(refused.value)) < 1000
    with pytest.raises(vertex.SubmissionError) as refused:
        vertex.dry_run([_HUGE], **where)
    assert str(refused.value).startswith("pipeline: ['xxx") and len(str(refused.value)) < 200


def test_a_huge_machine_type_is_cut_short_in_its_warning(no_credentials):
    path = catalog.pipeline_path("spot_training")
    args = ["--param", "source=gs://b/s", "--param", f"machine_type=n1-{_HUGE}"]
    result = _cli(["submit", str(path), "--dry-run", "--project", "my-proj", *args])
    assert result.exit_code == 0, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "machine table" in line]
    assert "'n1-xxx" in line and len(line) < 1000, len(line)


def test_a_huge_template_path_is_cut_short():
    result = _cli(["submit", f"/{_HUGE}.yaml", "--dry-run", "--project", "my-proj"])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "'TEMPLATE': File '/xxx" in line and "does not exist" in line and len(line) < 1000


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        # truthy text: every task was cached, prepare-package and the launch too
        ({"enable_caching": "no"}, "enable_caching: expected True, False or None"),
        # the SDK's ValueError (or an AttributeError) came out as a traceback
        ({"display_name": "d" * 129}, "display_name: is 129 characters long; at most 128"),
        ({"labels": [("team", "ml")]}, "labels: expected a mapping of KEY to VALUE"),
        ({"parameter_values": 5}, "parameter_values: expected a mapping"),
        ({"location": 5}, "location: expected a Vertex AI region's name, got 5"),
        # a TypeError, "'str' object is not callable", once the first warning came
        ({"warn": "stderr"}, "warn: expected a function taking one line of text, or None"),
        ({"check_images": "no"}, "check_images: expected True or False, got 'no'"),
    ],
)
def test_the_python_submission_names_an_argument_of_the_wrong_type(given, needle, no_credentials):
    from kfp_spot.pipelines import vertex

    path = catalog.pipeline_path("evaluate_checkpoint")
    args = {
        "project": "my-proj",
        "pipeline_root": "gs://bkt/r",
        "parameter_values": {"source": "gs://bkt/s.tar.gz", "checkpoint_uri": "gs://bkt/ckpt"},
        "warn": None,
    }
    for call in (vertex.dry_run, vertex.submit):  # refused before any sign-in
        with pytest.raises(vertex.SubmissionError) as refused:
            call(path, **{**args, **given})
        (line,) = str(refused.value).splitlines()
        assert line.startswith(needle), line
    request = vertex.dry_run(path, **{**args, "display_name": "d" * 128})  # the limit itself
    assert request["body"]["displayName"] == "d" * 128


def test_a_launch_setting_idle_with_one_region_is_a_warning_of_the_submission(no_credentials):
    """The launch prints it on its console once it runs; the submission said nothing before."""
    path = catalog.pipeline_path("spot_training")
    args = [
        "submit",
        str(path),
        "--dry-run",
        "--project",
        "my-proj",
        "--pipeline-root",
        "gs://bkt/r",
    ]
    args += ["--param", "source=gs://bkt/s.tar.gz", "--param", "thresholds={}"]
    result = _cli([*args, "--param", "region_policy=EAGER"])
    assert result.exit_code == 0, result.stderr
    assert (
        "warning: task 'launch-spot-job' (launch_spot_job): launch_spot_job input "
        "'region_policy': EAGER has no effect: the launch has one region (us-central1; "
    ) in result.stderr
    listed = _cli(
        [
            *args,
            "--param",
            "region_policy=EAGER",
            "--param",
            'regions=["us-central1", "europe-west4"]',
        ]
    )
    assert listed.exit_code == 0 and "has no effect" not in listed.stderr, listed.stderr
