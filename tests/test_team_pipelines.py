"""A platform team's own pipelines: single kfp-spot components, Python or vendored YAML."""

from pathlib import Path

import pytest
from kfp import components, dsl

from kfp_spot.pipelines import local_arguments

ROOT = Path(__file__).resolve().parents[1]
VENDORED = {  # the committed YAMLs, as a team vendoring them loads them
    name: components.load_component_from_file(str(ROOT / "components" / name / "component.yaml"))
    for name in ("prepare_package", "launch_spot_job", "evaluate_checkpoint")
}


@pytest.fixture(name="sweep")
def _sweep():
    @dsl.pipeline
    def sweep(code: str, api_endpoint: str = "", base_output_directory: str = ""):
        package = VENDORED["prepare_package"](source=code)
        with dsl.ParallelFor([1, 2]) as seed:
            VENDORED["launch_spot_job"](
                package=package.outputs["package"],
                args=["--seed", seed],
                base_output_directory=base_output_directory,
                api_endpoint=api_endpoint,
            )

    return sweep


def test_a_local_run_leaves_a_sweeps_output_directory_to_each_iteration(sweep, tmp_path):
    """The run filled its one base_output_directory in, then refused the sweep for sharing it
    between iterations: the team had left it empty. It is now left to the pipeline's default."""
    arguments = local_arguments.run_arguments(sweep, {"code": "x"}, tmp_path, "http://e")
    assert "base_output_directory" not in arguments
    local_arguments.check_tasks(sweep, arguments)  # not refused


def test_a_sweeps_output_directory_given_by_hand_is_still_refused(sweep, tmp_path):
    given = {"code": "x", "base_output_directory": str(tmp_path / "all")}
    arguments = local_arguments.run_arguments(sweep, given, tmp_path, "http://e")
    with pytest.raises(local_arguments.LocalRunError, match="the same in every iteration"):
        local_arguments.check_tasks(sweep, arguments)


# GCPC's placeholders a team passes to run the job as, in and encrypted like the PipelineJob
# (google_cloud_pipeline_components._placeholders), which Vertex AI Pipelines fills in.
RUN_AS_PIPELINE = {
    "service_account": "{{$.pipeline_service_account}}",
    "network": "{{$.pipeline_network}}",
    "encryption_spec_key_name": "{{$.pipeline_encryption_key_name}}",
}
IMAGE = "us-docker.pkg.dev/my-proj-123/repo/trainer:1"


def test_gcpc_placeholders_of_the_pipeline_run_pass_a_submission(tmp_path):
    """The dry run refused `encryption_spec_key_name=ENCRYPTION_SPEC_KMS_KEY_NAME_PLACEHOLDER`
    as no key name (and would have the others), though Vertex AI Pipelines fills them in."""
    from google_cloud_pipeline_components import _placeholders

    from kfp_spot.jobs.template import check_template_launches
    from kfp_spot.vertex import pipeline_job

    assert RUN_AS_PIPELINE == {
        "service_account": _placeholders.SERVICE_ACCOUNT_PLACEHOLDER,
        "network": _placeholders.NETWORK_PLACEHOLDER,
        "encryption_spec_key_name": _placeholders.ENCRYPTION_SPEC_KMS_KEY_NAME_PLACEHOLDER,
    }

    @dsl.pipeline
    def team(gcp_project: str = _placeholders.PROJECT_ID_PLACEHOLDER):
        VENDORED["launch_spot_job"](
            project=gcp_project,
            container_image_uri=IMAGE,
            base_output_directory="gs://team-bucket/out",
            tensorboard="projects/1/locations/us-central1/tensorboards/2",  # needs an account
            **RUN_AS_PIPELINE,
        )

    from kfp import compiler

    path = tmp_path / "team.yaml"
    compiler.Compiler().compile(team, str(path))
    spec = pipeline_job.read_template(path)
    check_template_launches(spec, project="my-proj-123", location="us-central1", arguments={})


def _request(tmp_path, api_endpoint):
    from types import SimpleNamespace

    from kfp_spot.jobs.entry import build_request

    return build_request(
        project="my-proj-123",
        location="us-central1",
        container_image_uri=IMAGE,
        checkpoint=SimpleNamespace(uri=str(tmp_path / "checkpoint")),
        gcp_resources=str(tmp_path / "gcp_resources"),
        api_endpoint=api_endpoint,
        **RUN_AS_PIPELINE,
    )


def test_gcpc_placeholders_of_the_pipeline_run_mean_none_on_the_emulator(tmp_path):
    inputs = _request(tmp_path, "http://127.0.0.1:8080").inputs
    assert (inputs.service_account, inputs.network, inputs.encryption_spec_key_name) == ("",) * 3


def test_gcpc_placeholders_of_the_pipeline_run_unfilled_for_vertex_ai_are_refused(tmp_path):
    from kfp_spot.jobs.inputs import LaunchInputError

    with pytest.raises(LaunchInputError, match="only Vertex AI Pipelines fills in") as info:
        _request(tmp_path, "")
    assert info.value.field in RUN_AS_PIPELINE


def _deployer(tmp_path, api_endpoint):
    from kfp_spot.serving.deploy import Deployer
    from kfp_spot.serving.entry import build_request

    request = build_request(
        project="my-proj-123",
        location="us-central1",
        artifact_uri="gs://team-bucket/model",
        service_account=RUN_AS_PIPELINE["service_account"],
        encryption_spec_key_name=RUN_AS_PIPELINE["encryption_spec_key_name"],
        gcp_resources=str(tmp_path / "gcp_resources"),
        api_endpoint=api_endpoint,
    )
    return Deployer(request, check_files=False)


def test_a_deploy_given_the_pipeline_runs_account_and_key_settles_them_as_the_launch(tmp_path):
    from kfp_spot.serving.deploy import DeployInputError

    request = _deployer(tmp_path, "http://127.0.0.1:8080").request
    assert (request.service_account, request.encryption_spec_key_name) == ("", "")
    with pytest.raises(DeployInputError, match="only Vertex AI Pipelines fills in") as info:
        _deployer(tmp_path, "")
    assert info.value.field == "service_account"


def _machine_sweep(machines_default):
    @dsl.pipeline
    def sweep(machines: list = machines_default, api_endpoint: str = ""):
        with dsl.ParallelFor(["n1-standard-4", "n1-standrd-8"]) as written:
            VENDORED["launch_spot_job"](
                container_image_uri=IMAGE,
                machine_type=written,
                base_output_directory=f"gs://team-bucket/sweep/{written}",
                api_endpoint=api_endpoint,
            )
        with dsl.ParallelFor(machines) as given:
            VENDORED["launch_spot_job"](
                container_image_uri=IMAGE,
                machine_type=given,
                api_endpoint=api_endpoint,
            )

    return sweep


def _spec(pipeline):
    from google.protobuf import json_format

    return json_format.MessageToDict(pipeline.pipeline_spec)


def test_a_sweep_over_items_known_before_the_run_checks_each_iteration():
    """A launch in a dsl.ParallelFor over machine types was 'not checked before the run', so a
    misspelt one passed `kfp-spot submit` and the local run's checks, to fail in its iteration."""
    from kfp_spot.jobs.template import (
        TemplateTaskError,
        check_local_launches,
        check_template_launches,
    )

    spec = _spec(_machine_sweep(["n1-standard-4"]))
    where = {"project": "my-proj-123", "location": "us-central1"}
    warnings = check_template_launches(spec, **where, arguments={"machines": ["e2-standrd-2"]})
    assert [w for w in warnings if "not checked" in w] == []
    typos = [w for w in warnings if "not in kfp-spot's machine table" in w]
    shown = {(w.split("'")[1], w.split("machineType ")[1].split()[0]) for w in typos}
    assert shown == {
        ("for-loop-2/launch-spot-job", "'n1-standrd-8'"),  # the items written into the pipeline
        ("for-loop-3/launch-spot-job-2", "'e2-standrd-2'"),  # the submission's parameter
    }
    with pytest.raises(TemplateTaskError, match="n1-standrd-8"):  # the emulator runs none such
        check_local_launches(spec, {"api_endpoint": "http://127.0.0.1:8080"})


def test_a_local_run_names_every_refused_task_and_iteration_at_once():
    """Before, the check stopped at the first refusal: a team fixed one typo, ran again, and met
    the next; every task (and every iteration of a sweep) the run would fail at is one line."""
    from kfp_spot.jobs.template import TemplateTaskError, check_local_launches

    spec = _spec(_machine_sweep(["n1-standard-4"]))
    arguments = {
        "api_endpoint": "http://127.0.0.1:8080",
        "machines": ["e2-standrd-2", "n1-standard-4", "n2-standad-8"],
    }
    with pytest.raises(TemplateTaskError) as info:
        check_local_launches(spec, arguments)
    lines = str(info.value).splitlines()
    shown = {(line.split("'")[1], line.split("'machine_type': ")[1].split()[0]) for line in lines}
    assert len(lines) == 3 and shown == {
        ("for-loop-2/launch-spot-job", "'n1-standrd-8'"),
        ("for-loop-3/launch-spot-job-2", "'e2-standrd-2'"),
        ("for-loop-3/launch-spot-job-2", "'n2-standad-8'"),
    }, lines


def test_a_sweep_over_a_loop_items_field_is_still_left_to_the_run():
    from kfp_spot.jobs.template import check_template_launches

    @dsl.pipeline
    def sweep():
        with dsl.ParallelFor([{"machine": "n1-standard-4"}]) as config:
            VENDORED["launch_spot_job"](container_image_uri=IMAGE, machine_type=config.machine)

    warnings = check_template_launches(
        _spec(sweep), project="my-proj-123", location="us-central1", arguments={}
    )
    assert any("not checked before the run: machine_type known only" in w for w in warnings)


@pytest.mark.parametrize("given", [[], ["--param", "model=/runs/1/model"]])
def test_a_component_yaml_run_alone_is_refused_for_its_input_artifacts(tmp_path, capfd, given):
    """`kfp-spot run --template components/promote_model/component.yaml` answered "give each a
    value (--param metrics=VALUE)", and the --param it asked for was then "no parameter 'model';
    valid: " (an empty list): no run can be given an artifact, so say that, once."""
    from tests.cli_in_process import run_cli

    template = ROOT / "components" / "promote_model" / "component.yaml"
    run_dir = tmp_path / "run"
    args = ["run", "--template", str(template), "--run-dir", str(run_dir), *given]
    result = run_cli(args, capfd)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == (
        "kfp-spot: error: the pipeline takes input artifacts (metrics, model), which a run cannot "
        "be given: use it as a step of a pipeline of yours that makes them (its parameters: "
        "none) (see `kfp-spot run --help`)"
    )
    assert not run_dir.exists()


def test_an_unknown_parameter_of_a_pipeline_without_parameters_says_it_takes_none(tmp_path):
    from kfp_spot.pipelines import local

    @dsl.pipeline
    def baked():
        VENDORED["launch_spot_job"](container_image_uri="us-docker.pkg.dev/p/r/t:1")

    with pytest.raises(local.LocalRunError) as info:
        local.run(baked, {"epochs": 3}, run_dir=tmp_path / "run", progress=None)
    assert str(info.value) == "the pipeline has no parameter 'epochs'; valid: none: it takes none"


def test_the_summary_names_the_bounds_of_a_gate_the_team_wrote_into_its_evaluation():
    """A team's evaluate task with its own thresholds (written in, or from a parameter of
    another name): the summary said `quality gate: failed` without the bound its metric missed,
    as it read only a pipeline parameter named `thresholds`."""
    from kfp_spot.components import EvaluateCheckpointOp, LaunchSpotJobOp
    from kfp_spot.pipelines.local import load
    from kfp_spot.pipelines.local_result import gate_thresholds

    def team(gate):
        @dsl.pipeline
        def pipeline(min_f1: dict = {"f1": ">=0.8"}):  # noqa: B006 (a KFP default)
            train = LaunchSpotJobOp(container_image_uri=IMAGE)
            EvaluateCheckpointOp(
                checkpoint=train.outputs["checkpoint"],
                package=train.outputs["model"],
                thresholds=min_f1 if gate is None else gate,
            )

        return pipeline

    written = team({"val/rmse": "<=0.3"})
    assert gate_thresholds(written, {}) == {"val/rmse": "<=0.3"}
    assert gate_thresholds(team(None), {}) == {"f1": ">=0.8"}
    assert gate_thresholds(team(None), {"min_f1": {"f1": ">=0.9"}}) == {"f1": ">=0.9"}
    shipped = load(str(ROOT / "pipelines" / "spot_training" / "pipeline.yaml"))
    assert gate_thresholds(shipped, {}) == {"accuracy": ">=0.85"}
    assert gate_thresholds(shipped, {"thresholds": {"mse": "<=1"}}) == {"mse": "<=1"}


def test_a_local_run_keeps_the_region_and_project_the_team_pipeline_defaults_to(tmp_path):
    """`location: str = "europe-west4"` was replaced with us-central1 for a local run, which then
    refused the team's own region_buckets (and a CMEK key) of that region, valid on Vertex AI.
    A default left to GCPC's placeholder, or empty, is still filled in."""

    @dsl.pipeline
    def team(
        api_endpoint: str = "",
        project: str = "team-proj-1",
        location: str = "europe-west4",
    ):
        VENDORED["launch_spot_job"](
            container_image_uri=IMAGE,
            project=project,
            location=location,
            region_buckets={"europe-west4": "gs://team-eu-bucket"},
            api_endpoint=api_endpoint,
        )

    arguments = local_arguments.run_arguments(team, {}, tmp_path, "http://127.0.0.1:8080")
    assert "project" not in arguments and "location" not in arguments  # the defaults apply
    local_arguments.check_tasks(team, arguments)  # not refused
    given = local_arguments.run_arguments(team, {"location": "us-east1"}, tmp_path, "http://e")
    assert given["location"] == "us-east1"

    @dsl.pipeline
    def left_open(
        api_endpoint: str = "",
        project: str = "",
        location: str = "{{$.pipeline_google_cloud_location}}",
    ):
        VENDORED["launch_spot_job"](
            container_image_uri=IMAGE, project=project, location=location, api_endpoint=api_endpoint
        )

    filled = local_arguments.run_arguments(left_open, {}, tmp_path, "http://e")
    assert (filled["project"], filled["location"]) == ("local-project", "us-central1")
