"""A platform team's own pipelines: single kfp-spot components, Python or vendored YAML."""

from pathlib import Path

import pytest
from kfp import dsl
from kfp.dsl import Artifact

from kfp_spot.pipelines import local_arguments
from tests.shared import COMMITTED_COMPONENTS

ROOT = Path(__file__).resolve().parents[1]
VENDORED = COMMITTED_COMPONENTS  # the committed YAMLs, as a team vendoring them loads them


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


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"run_dir": ""}, "run_dir: '' is empty: give a directory, or None for the default"),
        ({"run_dir": " "}, "run_dir: ' ' is empty"),
        ({"run_dir": 5}, "run_dir: expected a directory's path, got int 5"),
        ({"arguments": "epochs=3"}, "arguments: expected a mapping of parameter name to value"),
        ({"arguments": [("epochs", 3)]}, "arguments: expected a mapping"),
    ],
)
def test_a_run_dir_or_arguments_a_python_caller_got_wrong_are_refused_first(
    tmp_path, monkeypatch, given, message
):
    """`run_dir=""` (an unset variable's value) ran the pipeline in the working directory, the
    team's project folder, writing its emulator, logs and pipeline root there; text arguments were
    a ValueError from inside dict(), and a list of pairs ran."""
    from kfp_spot.pipelines import local

    @dsl.pipeline
    def baked(epochs: int = 1):
        VENDORED["launch_spot_job"](container_image_uri="us-docker.pkg.dev/p/r/t:1")

    monkeypatch.chdir(tmp_path)
    call = {"arguments": {}, "run_dir": tmp_path / "run"} | given
    with pytest.raises(local.LocalRunError) as info:
        local.run(baked, call["arguments"], run_dir=call["run_dir"], progress=None)
    assert str(info.value).startswith(message), info.value
    assert list(tmp_path.iterdir()) == []


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
            package = dsl.importer(
                artifact_uri="gs://team-bucket/t.tar.gz", artifact_class=Artifact
            )
            EvaluateCheckpointOp(
                checkpoint=train.outputs["checkpoint"],
                package=package.output,
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
    # none given: the gate has none, which the summary says beside "passed"
    assert gate_thresholds(shipped, {"thresholds": {}}) == {}

    @dsl.pipeline
    def computed():
        EvaluateCheckpointOp(
            checkpoint=LaunchSpotJobOp(container_image_uri=IMAGE).outputs["checkpoint"],
            package=dsl.importer(
                artifact_uri="gs://team-bucket/t.tar.gz", artifact_class=Artifact
            ).output,
            thresholds=_bounds().output,
        )

    # another task's output gives them: not known before the run, and not taken for "none"
    assert gate_thresholds(computed, {}) is None

    @dsl.pipeline
    def two_gates(thresholds: dict = {}):  # noqa: B006 (a KFP default)
        train = LaunchSpotJobOp(container_image_uri=IMAGE)
        package = dsl.importer(artifact_uri="gs://team-bucket/t.tar.gz", artifact_class=Artifact)
        for bound in (">=0.8", ">=0.9"):
            EvaluateCheckpointOp(
                checkpoint=train.outputs["checkpoint"],
                package=package.output,
                thresholds={"f1": bound},
            )

    # several gates of their own beside an empty parameter: not "none" either
    assert gate_thresholds(two_gates, {}) is None


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


def _team_sweep():
    """A team's sweep over regions of its own name, the vendored launch beside GCPC's op."""
    from google_cloud_pipeline_components.v1.custom_job import CustomTrainingJobOp

    @dsl.pipeline(name="team-sweep", pipeline_root="gs://team-bucket/root")
    def team(gcp_project: str, spot_regions: list = ["us-central1"]):  # noqa: B006
        train = VENDORED["launch_spot_job"](
            project=gcp_project,
            container_image_uri=IMAGE,
            regions=spot_regions,
            base_output_directory="gs://team-bucket/out",
        ).set_caching_options(False)
        with dsl.If(train.outputs["Output"] != "SUCCEEDED"):
            CustomTrainingJobOp(
                project=gcp_project,
                display_name="on-demand",
                worker_pool_specs=[{"machine_spec": {"machine_type": "n1-standard-4"}}],
            )

    return team


def test_the_python_submission_checks_the_teams_tasks_as_kfp_spot_submit_does(no_google_login):
    """`kfp_spot.vertex.pipeline_job.dry_run` sent a launch's misspelt region list on; only the
    command line checked each task. `kfp_spot.pipelines.vertex` is the Python `kfp-spot submit`."""
    from kfp_spot.pipelines import vertex

    where = {"project": "team-proj-1", "check_images": False, "warn": None}
    given = {"gcp_project": "team-proj-1", "spot_regions": ["us-central1", "us-central1"]}
    with pytest.raises(vertex.SubmissionError) as info:
        vertex.dry_run(_team_sweep(), **where, parameter_values=given)
    # A Python caller typed no --param: the parameter is named as parameter_values names it.
    refusal = (
        "task 'launch-spot-job': launch_spot_job input 'regions' (from the pipeline parameter "
        "spot_regions): names us-central1 more than once; list each region once"
    )
    assert str(info.value) == refusal
    with pytest.raises(vertex.SubmissionError) as info:  # before any sign-in
        vertex.submit(_team_sweep(), **where, parameter_values=given)
    assert str(info.value) == refusal


def test_the_python_submission_compiles_a_pipeline_function_and_hands_over_its_warnings(
    no_google_login,
):
    from kfp_spot.pipelines import vertex

    warnings: list[str] = []
    request = vertex.dry_run(
        _team_sweep(),
        project="team-proj-1",
        parameter_values={"spot_regions": ["europe-west4", "us-central1"]},
        check_images=False,
        warn=warnings.append,
    )
    # The template's own root; the region is the default's, the submission's project is the
    # PipelineJob's, and gcp_project, a required parameter of another name, is named.
    assert request["body"]["runtimeConfig"]["gcsOutputDirectory"] == "gs://team-bucket/root"
    assert request["url"].startswith(
        "https://us-central1-aiplatform.googleapis.com/v1/projects/team-proj-1/locations/"
    )
    assert request["body"]["pipelineSpec"]["taskCaching"]["launch-spot-job"] is False
    # not the temporary file it was compiled into, gone by now
    assert (
        request["body"]["pipelineSpec"]["inline"] == "compiled from the @dsl.pipeline 'team-sweep'"
    )
    assert any("needs gcp_project" in w for w in warnings), warnings
    with pytest.raises(vertex.SubmissionError, match="neither a compiled template's path"):
        vertex.dry_run(_team_sweep, project="team-proj-1")  # not the pipeline it makes


def test_the_launchs_executor_image_notice_is_a_warning_of_its_task_each_time(
    no_google_login, capfd
):
    """The launch's note on its executor image (here past its end of availability) went to
    stderr, once per process, past the caller's `warn` and without the task it is about: a
    notebook's second dry run, or a `warn` that collects, never had it."""
    from kfp_spot.pipelines import vertex

    old = "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-11.py310:latest"  # ended 2024-11-15

    @dsl.pipeline(name="team-old-image", pipeline_root="gs://team-bucket/root")
    def team(code: str = "gs://team-bucket/src/t-0.1.tar.gz"):
        package = VENDORED["prepare_package"](source=code)
        package.set_caching_options(False)
        launch = VENDORED["launch_spot_job"](
            package=package.outputs["package"], executor_image_uri=old
        )
        launch.set_caching_options(False)

    for _ in range(2):
        warnings: list[str] = []
        vertex.dry_run(
            team,
            project="team-proj-1",
            parameter_values={},
            check_images=False,
            warn=warnings.append,
        )
        assert [w for w in warnings if "end of availability" in w] == [
            "task 'launch-spot-job' (launch_spot_job): executor image tf-cpu.2-11.py310 reached "
            "its documented end of availability on 2024-11-15: Vertex AI may refuse it or stop "
            "updating it; pick a current image from https://cloud.google.com/vertex-ai/docs/"
            "training/pre-built-containers (one kfp-spot does not list is accepted with a warning)"
        ], warnings
    assert "end of availability" not in capfd.readouterr().err


@dsl.component(base_image="python:3.11")
def _bounds() -> dict:
    """A team's task that works out the gate's thresholds."""
    return {"f1": ">=0.8"}


@dsl.component(base_image="python:3.11")
def team_step(model: dsl.Input[dsl.Model], out: dsl.Output[dsl.Artifact]):
    """A component of the team's own: what it makes of its input is not kfp-spot's to judge."""


def _wired(pipeline):
    """The refusals of a submission and of a local run, each a list of lines (empty: none)."""
    from kfp_spot.jobs.template import TemplateTaskError
    from kfp_spot.pipelines import vertex

    refused = []
    try:
        vertex.dry_run(pipeline, project="team-proj-1", check_images=False, warn=None)
        refused.append([])
    except vertex.SubmissionError as exc:
        refused.append(str(exc).splitlines())
    try:
        local_arguments.check_tasks(pipeline, {"api_endpoint": "http://127.0.0.1:8080"})
        refused.append([])
    except (local_arguments.LocalRunError, TemplateTaskError) as exc:
        refused.append(str(exc).splitlines())
    return refused


def test_a_kfp_spot_output_wired_to_the_wrong_kfp_spot_input_is_refused_before_the_run():
    """KFP passes any artifact to an Input[Artifact]: `checkpoint=train.outputs["model"]`
    compiled, was submitted and failed in the evaluation, after the training it waited for."""

    @dsl.pipeline(name="team-wiring", pipeline_root="gs://team-bucket/root")
    def team(api_endpoint: str = ""):
        package = VENDORED["prepare_package"](source="gs://team-bucket/src/t.tar.gz")
        first = VENDORED["launch_spot_job"](
            package=package.outputs["package"], api_endpoint=api_endpoint
        ).set_caching_options(False)
        with dsl.If(first.outputs["Output"] == "SUCCEEDED"):
            VENDORED["launch_spot_job"](
                package=package.outputs["package"],
                resume_from=first.outputs["model"],
                api_endpoint=api_endpoint,
            ).set_caching_options(False)
            VENDORED["evaluate_checkpoint"](
                checkpoint=first.outputs["job_report"], package=package.outputs["package"]
            )
            VENDORED["evaluate_checkpoint"](  # as it is: the checkpoint, never the package
                checkpoint=first.outputs["checkpoint"],
                package=first.outputs["model"],
                allow_foreign_layout=True,
            )

    submitted, local = _wired(team)  # each task a line, in the order of the spec's maps
    assert sorted(submitted) == sorted(local), (submitted, local)
    assert sorted(local) == [
        "task 'condition-1/evaluate-checkpoint': evaluate_checkpoint input 'checkpoint': is "
        "the 'job_report' output of task 'launch-spot-job' (launch_spot_job), the job's report "
        "(Metrics); give it that task's 'checkpoint' output (.outputs['checkpoint'])",
        "task 'condition-1/evaluate-checkpoint-2': evaluate_checkpoint input 'package': is the "
        "'model' output of task 'launch-spot-job' (launch_spot_job), the job's model directory "
        "(AIP_MODEL_DIR); give it the 'package' output of a prepare_package task "
        "(.outputs['package'])",
        "task 'condition-1/launch-spot-job-2': launch_spot_job input 'resume_from': is the "
        "'model' output of task 'launch-spot-job' (launch_spot_job), the job's model directory "
        "(AIP_MODEL_DIR); give it that task's 'checkpoint' output (.outputs['checkpoint'])",
    ]


def test_outputs_wired_as_meant_in_loops_and_conditions_pass():
    """The launch's checkpoint into a second launch and the evaluation through a dsl.If in a
    dsl.ParallelFor; the model directory evaluated as it is; a team's own step in between."""

    @dsl.pipeline(name="team-wiring", pipeline_root="gs://team-bucket/root")
    def team(api_endpoint: str = ""):
        package = VENDORED["prepare_package"](source="gs://team-bucket/src/t.tar.gz")
        with dsl.ParallelFor(["0.1", "0.01"]) as lr:
            first = VENDORED["launch_spot_job"](
                package=package.outputs["package"], args=["--lr", lr], api_endpoint=api_endpoint
            ).set_caching_options(False)
            with dsl.If(first.outputs["Output"] == "SUCCEEDED"):
                second = VENDORED["launch_spot_job"](
                    package=package.outputs["package"],
                    resume_from=first.outputs["checkpoint"],
                    api_endpoint=api_endpoint,
                ).set_caching_options(False)
                VENDORED["evaluate_checkpoint"](
                    checkpoint=second.outputs["checkpoint"], package=package.outputs["package"]
                )
                VENDORED["evaluate_checkpoint"](
                    checkpoint=second.outputs["model"],
                    package=package.outputs["package"],
                    allow_foreign_layout=True,
                )
                own = team_step(model=second.outputs["model"])
                VENDORED["evaluate_checkpoint"](
                    checkpoint=own.outputs["out"], package=package.outputs["package"]
                )

    assert _wired(team) == [[], []]


def test_the_run_tells_each_launch_of_a_sweep_by_the_jobs_its_task_lists(tmp_path):
    """Read from each task's gcp_resources: a launch's jobs (a failover's too) are its own;
    a deploy's, listing other resources, and a file being written are passed over."""
    from kfp_spot.jobs import gcp_resources
    from kfp_spot.pipelines.local_result import launches_in

    def job(region, n):
        return f"projects/1/locations/{region}/customJobs/{n}"

    def uri(name):
        return f"https://us-central1-aiplatform.googleapis.com/v1/{name}"

    root = tmp_path / "pipeline_root"
    for task, names in {
        "run/for-loop-1-iteration-0/launch-spot-job": [job("us-central1", 1)],
        "run/for-loop-1-iteration-1/launch-spot-job": [job("us-east1", 2), job("us-west1", 3)],
    }.items():
        (root / task).mkdir(parents=True)
        gcp_resources.write(str(root / task / "gcp_resources"), [uri(n) for n in names])
    (root / "run/deploy-spot-endpoint").mkdir(parents=True)
    (root / "run/deploy-spot-endpoint/gcp_resources").write_text(
        '{"resources": [{"resourceType": "VertexEndpoint", "resourceUri": "x"}]}'
    )
    (root / "run/launch-spot-job").mkdir(parents=True)
    (root / "run/launch-spot-job/gcp_resources").write_text("")
    assert launches_in(root) == {
        job("us-central1", 1): "run/for-loop-1-iteration-0/launch-spot-job",
        job("us-east1", 2): "run/for-loop-1-iteration-1/launch-spot-job",
        job("us-west1", 3): "run/for-loop-1-iteration-1/launch-spot-job",
    }


def test_a_sweep_given_no_items_is_said_to_launch_nothing(no_google_login):
    """`--param spot_regions='[]'` for a dsl.ParallelFor over regions: the submission said the
    launch was "not checked before the run: ... known only at run time"; it never runs."""
    from kfp_spot.pipelines import vertex

    @dsl.pipeline(name="team-regions", pipeline_root="gs://team-bucket/root")
    def team(spot_regions: list = ["us-central1"]):  # noqa: B006
        with dsl.ParallelFor(spot_regions) as region:
            VENDORED["launch_spot_job"](
                container_image_uri=IMAGE, location=region
            ).set_caching_options(False)

    warnings: list[str] = []
    where = {"project": "team-proj-1", "check_images": False, "warn": warnings.append}
    vertex.dry_run(team, **where, parameter_values={"spot_regions": []})
    [warning] = warnings
    loop = warning.split("'")[1].split("/")[0]  # KFP's name of the loop: for-loop-N
    assert warning == (
        f"task '{loop}/launch-spot-job' (launch_spot_job) runs in no iteration: the items of "
        f"its dsl.ParallelFor '{loop}' are an empty list"
    )
    warnings.clear()
    vertex.dry_run(team, **where, parameter_values={"spot_regions": ["europe-west4"]})
    assert not [w for w in warnings if "iteration" in w or "not checked" in w], warnings
