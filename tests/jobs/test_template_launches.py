"""`kfp-spot submit` checks a user pipeline's launch and deploy tasks before the run starts.

A team's own pipeline (GCPC's ops beside ours) bakes launch and deploy inputs in as constants or
wires them to pipeline parameters; a value the launcher or the deployer would refuse inside the
running pipeline is refused at submission, naming the task and the input, with or without
``--dry-run``.
"""

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from kfp import compiler, dsl

from kfp_spot.cli import main
from kfp_spot.components.evaluate_checkpoint import EvaluateCheckpointOp
from kfp_spot.components.launch_spot_job import LaunchSpotJobOp
from kfp_spot.jobs.template import TemplateTaskError, check_template_launches
from kfp_spot.vertex import pipeline_job
from tests.shared import COMMITTED_COMPONENTS

IMAGE = "us-docker.pkg.dev/my-proj-123/repo/trainer:1"
ROOT = Path(__file__).resolve().parents[2]
# The committed YAMLs, as a team loads them without installing kfp-spot: KFP gives each task its
# compiler's default caching (on), where kfp_spot.components' tasks start with it off.
YAMLS = COMMITTED_COMPONENTS


def _compile(tmp_path, name, evaluate=None, prepare=None, **launch):
    @dsl.pipeline(name="user-pipeline")
    def user_pipeline(
        source: str = "gs://my-bucket/src.tar.gz",
        labels: dict = {"team": "ml"},  # noqa: B006 (a KFP default)
        go: str = "yes",
        machines: list = ["n1-standard-4"],  # noqa: B006
    ):
        package = YAMLS["prepare_package"](source=source, **(prepare or {}))
        with dsl.If(go == "yes"):
            train = YAMLS["launch_spot_job"](
                package=package.outputs["package"], labels=labels, **launch
            )
            EvaluateCheckpointOp(
                checkpoint=train.outputs["checkpoint"],
                package=package.outputs["package"],
                **(evaluate or {"thresholds": {"accuracy": ">=0.9"}, "step": "best:loss:min"}),
            )
            with dsl.ParallelFor(machines) as machine:
                LaunchSpotJobOp(
                    container_image_uri=IMAGE, machine_type=machine
                ).set_caching_options(False)

    path = tmp_path / f"{name}.yaml"
    compiler.Compiler().compile(user_pipeline, str(path))
    return path


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("user")
    return {
        "good": _compile(tmp, "good", timeout="2h"),
        "bad_timeout": _compile(tmp, "bad_timeout", timeout="-5s"),
        "emulator": _compile(tmp, "emulator", api_endpoint="http://127.0.0.1:8080"),
        "elsewhere": _compile(tmp, "elsewhere", project="hardcoded-proj", location="us-east1"),
        "bad_gate": _compile(tmp, "bad_gate", evaluate={"thresholds": {"accuracy": ">>0.9"}}),
        "bad_requirement": _compile(tmp, "bad_req", prepare={"requirements": ["numpy>=>1"]}),
        "bad_step": _compile(tmp, "bad_step", evaluate={"step": "last"}),
        "unlisted_machine": _compile(tmp, "unlisted_machine", machine_type="n1-standar-4"),
    }


def _submit(path, *extra):
    args = ["submit", str(path), "--project", "my-proj-123", "--pipeline-root", "gs://bkt/root"]
    return CliRunner().invoke(main, [*args, "--skip-image-check", *extra])


def _error_lines(result):
    """The refusal's lines: the first after `kfp-spot: error: `, one per refused task."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()  # a refused submission shows no warnings
    assert lines and lines[0].startswith("kfp-spot: error: "), lines
    assert result.stdout == ""
    return lines


def _one_error_line(result):
    lines = _error_lines(result)
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("dry", [["--dry-run"], []])
def test_a_constant_the_launcher_would_refuse_is_refused_at_submission(templates, dry):
    line = _one_error_line(_submit(templates["bad_timeout"], *dry))
    assert "task 'condition-1/launch-spot-job': launch_spot_job input 'timeout'" in line
    assert "'-5s'" in line


def test_a_parameter_value_flowing_into_a_launch_is_checked(templates):
    result = _submit(templates["good"], "--dry-run", "--param", 'labels={"Team": "x"}')
    line = _one_error_line(result)
    assert "task 'condition-1/launch-spot-job': launch_spot_job input 'labels'" in line
    assert "label key 'Team' is invalid" in line


def test_every_task_a_submission_would_refuse_is_named_at_once(templates):
    """Before, submit stopped at the first refused task: each fix cost another round trip."""
    result = _submit(
        templates["good"],
        "--dry-run",
        "--param",
        "source=./my_project",
        "--param",
        'labels={"Team": "x"}',
    )
    lines = _error_lines(result)
    assert len(lines) == 2, lines
    tasks = [line.removeprefix("kfp-spot: error: ") for line in lines]
    (source,) = [t for t in tasks if t.startswith("task 'prepare-package': prepare_package input")]
    assert "'source': './my_project'" in source
    (labels,) = [t for t in tasks if t.startswith("task 'condition-1/launch-spot-job': launch_")]
    assert "input 'labels': label key 'Team' is invalid" in labels
    assert lines[1].endswith("(see `main submit --help`)")  # the hint once, at the end


def test_a_launch_or_deploy_given_a_machine_of_its_own_is_pointed_out(tmp_path):
    """A task's set_cpu_limit/set_accelerator_type sizes its own container on Vertex AI
    Pipelines: the training's and the serving replicas' machines are the task's inputs. An
    evaluation runs in its task, so its machine is the evaluation's: no warning."""

    @dsl.pipeline(name="team-machines")
    def machines():
        launch = LaunchSpotJobOp(
            container_image_uri=IMAGE, base_output_directory="gs://my-bucket/o"
        )
        launch.set_cpu_limit("16").set_caching_options(False)
        package = dsl.importer(artifact_uri="gs://my-bucket/t.tar.gz", artifact_class=dsl.Artifact)
        EvaluateCheckpointOp(
            checkpoint=launch.outputs["checkpoint"], package=package.output
        ).set_cpu_limit("16")
        YAMLS["deploy_spot_endpoint"](
            model=launch.outputs["model"], min_replica_count=1
        ).set_accelerator_type("NVIDIA_TESLA_T4").set_caching_options(False)

    path = tmp_path / "machines.yaml"
    compiler.Compiler().compile(machines, str(path))
    result = _submit(path, "--dry-run")
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if "own container's machine" in line]
    assert sorted(warned) == [
        "kfp-spot: warning: task 'deploy-spot-endpoint' (deploy_spot_endpoint) sets its own "
        "container's machine (accelerator NVIDIA_TESLA_T4 x1): on Vertex AI Pipelines that "
        "sizes the task that submits and watches the deployment, which uses none of it, not the "
        "serving replicas; set the task's machine_type, accelerator_type and accelerator_count "
        "inputs instead",
        "kfp-spot: warning: task 'launch-spot-job' (launch_spot_job) sets its own container's "
        "machine (CPU limit 16): on Vertex AI Pipelines that sizes the task that submits and "
        "watches the CustomJob, which uses none of it, not the training; set the task's "
        "machine_type, accelerator_type and accelerator_count inputs instead",
    ], result.stderr


def test_a_refused_input_names_the_teams_own_parameter_that_set_it(tmp_path):
    """A team passes its own parameters on (project=gcp_project): the refusal named only the
    component's input ('project'), not the --param the user had typed."""

    @dsl.pipeline(name="team-params")
    def team(gcp_project: str, code_uri: str, step_rule: str = "latest"):
        package = YAMLS["prepare_package"](source=code_uri).set_caching_options(False)
        train = YAMLS["launch_spot_job"](package=package.outputs["package"], project=gcp_project)
        train.set_caching_options(False)
        EvaluateCheckpointOp(
            checkpoint=train.outputs["checkpoint"],
            package=package.outputs["package"],
            step=step_rule,
        )

    path = tmp_path / "team.yaml"
    compiler.Compiler().compile(team, str(path))
    params = ["gcp_project=Bad_Proj", "code_uri=./src", "step_rule=last"]
    result = _submit(path, "--dry-run", *[a for p in params for a in ("--param", p)])
    lines = [line.removeprefix("kfp-spot: error: ") for line in _error_lines(result)]
    assert sorted(line.split(": ", 2)[1] for line in lines) == [
        "evaluate_checkpoint input step (from the pipeline parameter step_rule)",
        "launch_spot_job input 'project' (from the pipeline parameter gcp_project)",
        "prepare_package input 'source' (from the pipeline parameter code_uri)",
    ], lines


def test_a_launch_given_the_trainings_variables_on_its_own_container_is_pointed_out(tmp_path):
    """`.set_env_variable("WANDB_API_KEY", ...)` on a launch task reaches the task's process,
    never the CustomJob's replicas (the `env` input): the training ran without it in silence.
    What the task itself reads (KFP_SPOT_EXTRA_REGIONS, a proxy) is not warned of."""

    @dsl.pipeline(name="team-env")
    def team():
        launch = LaunchSpotJobOp(
            container_image_uri=IMAGE, base_output_directory="gs://my-bucket/o"
        )
        launch.set_env_variable("WANDB_API_KEY", "k").set_env_variable("DATA_DIR", "/d")
        launch.set_env_variable("KFP_SPOT_EXTRA_REGIONS", "xx-new1").set_env_variable(
            "HTTPS_PROXY", "http://proxy:3128"
        )

    path = tmp_path / "env.yaml"
    compiler.Compiler().compile(team, str(path))
    result = _submit(path, "--dry-run")
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if "on its own container" in line]
    assert warned == [
        "kfp-spot: warning: task 'launch-spot-job' (launch_spot_job) sets DATA_DIR, WANDB_API_KEY "
        "on its own container (set_env_variable): the task that submits and watches the "
        "CustomJob gets them, the training does not; pass the training's variables in the "
        "task's env input (env={'DATA_DIR': ...})"
    ], result.stderr


def test_the_local_emulator_baked_into_a_template_is_refused(templates):
    line = _one_error_line(_submit(templates["emulator"], "--dry-run"))
    assert "input 'api_endpoint': 'http://127.0.0.1:8080' is the local emulator" in line


def test_a_valid_user_pipeline_submits_with_warnings_for_what_waits_for_the_run(templates):
    result = _submit(templates["good"], "--dry-run")
    assert result.exit_code == 0, result.output
    # KFP caches a task unless told otherwise: a rerun would replay the launch without training,
    # and the package of a source re-uploaded to the same URI.
    assert "task 'condition-1/launch-spot-job' (launch_spot_job) is cached" in result.stderr
    assert (
        "task 'prepare-package' (prepare_package) is cached: a rerun with the same source URI "
        "replays the earlier package"
    ) in result.stderr
    # The loop's machine types are the template's: that launch is judged with each of them.
    assert "not checked before the run" not in result.stderr
    result = _submit(templates["good"], "--dry-run", "--disable-caching")
    assert result.exit_code == 0 and "is cached" not in result.stderr, result.stderr


def test_enable_caching_says_which_launches_it_would_replay(templates):
    """--enable-caching caches every task, those compiled with caching off too: a rerun replays
    the launch's outcome without training. Before, the flag silenced every cached-task warning."""
    result = _submit(templates["good"], "--dry-run", "--enable-caching")
    assert result.exit_code == 0, result.output
    for path, component in (
        ("prepare-package", "prepare_package"),
        ("condition-1/launch-spot-job", "launch_spot_job"),
        ("condition-1/for-loop-2/launch-spot-job-2", "launch_spot_job"),  # compiled uncached
    ):
        assert f"task {path!r} ({component}) is cached by --enable-caching: " in result.stderr
    assert "replays the earlier outcome without training; submit without --enable-caching" in (
        result.stderr
    )
    assert "evaluate-checkpoint" not in result.stderr  # a launch's checkpoint is new each run


@pytest.mark.parametrize(
    ("param", "value"),
    [("source", "./my_project"), ("source", "/Users/me/proj"), ("source", "src.tar.gz")],
)
def test_a_local_source_for_the_package_is_refused_at_submission(templates, param, value):
    # On Vertex AI Pipelines prepare_package runs in a container: the submitting machine's paths
    # are not there (kfp-spot run --vertex --source refuses them the same way).
    line = _one_error_line(_submit(templates["good"], "--dry-run", "--param", f"{param}={value}"))
    assert f"task 'prepare-package': prepare_package input '{param}': {value!r}" in line
    assert "gs://BUCKET/PATH" in line


def test_a_requirement_that_is_not_pep_508_is_refused_at_submission(templates):
    # prepare_package would refuse it at the run's first task, on Vertex AI.
    result = _submit(templates["bad_requirement"], "--dry-run")
    assert result.exit_code == 2 and result.stdout == "", result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("kfp-spot: error: ")]
    assert len(errors) == 1, result.stderr
    assert (
        "task 'prepare-package': prepare_package input requirements: 'numpy>=>1' is not a PEP 508 "
        "requirement"
    ) in errors[0]


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_source_for_the_package_is_refused_at_submission(templates, value):
    # prepare_package has nothing to build: the run would fail at its first task, on Vertex AI.
    line = _one_error_line(_submit(templates["good"], "--dry-run", "--param", f"source={value}"))
    assert f"task 'prepare-package': prepare_package input 'source': {value!r} is empty" in line
    assert "gs://BUCKET/PATH" in line


def test_an_empty_staging_uri_passes_it_means_next_to_the_outputs(templates):
    result = _submit(templates["good"], "--dry-run", "--param", "source=gs://b/src.tar.gz")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("value", ["gs://my-bucket/src", "/gcs/my-bucket/src.tar.gz"])
def test_a_cloud_storage_source_passes(templates, value):
    result = _submit(templates["good"], "--dry-run", "--param", f"source={value}")
    assert result.exit_code == 0, result.output


def test_the_pipeline_project_placeholder_is_the_submission_project(templates):
    spec = pipeline_job.read_template(templates["good"])
    check_template_launches(spec, project="my-proj-123", location="europe-west4", arguments={})
    with pytest.raises(TemplateTaskError, match="input 'project'"):
        check_template_launches(spec, project="X", location="europe-west4", arguments={})


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("bad_gate", "evaluate_checkpoint input thresholds['accuracy']: '>>0.9' is not a bound"),
        ("bad_step", "evaluate_checkpoint input step: 'last' is not valid; use \"latest\""),
    ],
)
def test_what_the_evaluation_reads_after_the_training_is_checked_before_it(
    templates, template, needle
):
    line = _one_error_line(_submit(templates[template], "--dry-run"))
    assert f"task 'condition-1/evaluate-checkpoint': {needle}" in line


def test_a_machine_type_missing_from_the_table_is_a_warning_naming_the_task(templates):
    # Vertex AI judges a machine type kfp-spot's table lacks; the submission still says which
    # task holds it, as every other warning does, since a pipeline may have many launches.
    result = _submit(templates["unlisted_machine"], "--dry-run", "--disable-caching")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "n1-standar-4" in line]
    assert lines == [
        "kfp-spot: warning: task 'condition-1/launch-spot-job' (launch_spot_job): "
        "jobSpec.workerPoolSpecs[0].machineSpec.machineType 'n1-standar-4' is not in kfp-spot's "
        "machine table; the service will judge it (and its accelerators)"
    ], result.stderr


def test_a_project_or_region_baked_into_a_launch_is_pointed_out(templates):
    result = _submit(templates["elsewhere"], "--dry-run", "--disable-caching")
    assert result.exit_code == 0, result.output
    assert (
        "task 'condition-1/launch-spot-job' (launch_spot_job) runs its CustomJob in project "
        "'hardcoded-proj', baked into the template, not the submission's 'my-proj-123'"
    ) in result.stderr
    assert (
        "in location 'us-east1', baked into the template, not the submission's 'us-central1'; "
        "leave the submission's location unset to follow the pipeline's, or submit the pipeline "
        "with location 'us-east1' where it runs"
    ) in result.stderr


def test_a_region_from_a_pipeline_parameter_is_named_with_the_parameter_to_pass(tmp_path):
    # A platform pipeline routes its own parameter into the launch (inside a condition, a
    # sub-DAG): the value is that parameter's default, not a constant baked into the task.
    @dsl.pipeline(name="platform")
    def platform(region: str = "europe-west4", go: str = "yes"):
        with dsl.If(go == "yes"):
            LaunchSpotJobOp(container_image_uri=IMAGE, location=region).set_caching_options(False)

    path = tmp_path / "platform.yaml"
    compiler.Compiler().compile(platform, str(path))
    result = _submit(path, "--dry-run", "--location", "us-central1")
    assert result.exit_code == 0, result.output
    assert (
        "task 'condition-1/launch-spot-job' (launch_spot_job) runs its CustomJob in location "
        "'europe-west4', from the pipeline parameter 'region', not the submission's "
        "'us-central1'; set the pipeline parameter region to 'us-central1' to run it there, or "
        "submit the pipeline with location 'europe-west4' where it runs"
    ) in result.stderr
    assert "baked into the template" not in result.stderr
    quiet = _submit(path, "--dry-run", "--location", "us-central1", "--param", "region=us-central1")
    assert quiet.exit_code == 0 and "region" not in quiet.stderr, quiet.stderr


def test_a_region_newer_than_kfp_spots_list_passes_with_the_tasks_own_setting(
    tmp_path, monkeypatch
):
    """`set_env_variable("KFP_SPOT_EXTRA_REGIONS", ...)` on the task is what the launcher reads."""

    def compiled(extra_regions):
        @dsl.pipeline(name="new-region")
        def new_region():
            task = LaunchSpotJobOp(container_image_uri=IMAGE, location="xx-new1")
            task.set_caching_options(False)
            if extra_regions:
                task.set_env_variable("KFP_SPOT_EXTRA_REGIONS", extra_regions)

        path = tmp_path / f"{bool(extra_regions)}.yaml"
        compiler.Compiler().compile(new_region, str(path))
        return pipeline_job.read_template(path)

    monkeypatch.delenv("KFP_SPOT_EXTRA_REGIONS", raising=False)
    args = {"project": "my-proj-123", "location": "us-central1", "arguments": {}}
    with pytest.raises(TemplateTaskError, match="'xx-new1' is not a Vertex AI region"):
        check_template_launches(compiled(""), **args)
    check_template_launches(compiled("xx-new1"), **args)
    assert "KFP_SPOT_EXTRA_REGIONS" not in os.environ  # put back after the check


def test_the_launch_component_alone_needs_its_code_as_a_parameter():
    """Its ``package`` artifact is an input of the run, which a submission cannot pass."""
    from kfp_spot.pipelines import catalog

    (entry,) = [e for e in catalog.COMPONENTS if e.name == "launch_spot_job"]
    line = _one_error_line(_submit(entry.default_path(), "--dry-run"))
    assert "launch_spot_job input 'package': no training code" in line
    result = _submit(entry.default_path(), "--dry-run", "--param", f"container_image_uri={IMAGE}")
    assert result.exit_code == 0, result.output


# --- deploy_spot_endpoint tasks: what the deployer checks before its first call ----------------


def _compile_serving(tmp_path, name, cached=False, **deploy):
    """A team's own train-and-serve pipeline from the components' YAMLs, a deploy task baked in."""

    @dsl.pipeline(name="user-serving")
    def user_serving(
        source: str = "gs://my-bucket/src.tar.gz",
        api_endpoint: str = "",
        serving_labels: dict = {"team": "ml"},  # noqa: B006 (a KFP default)
        machines: list = ["n1-standard-4"],  # noqa: B006
    ):
        package = YAMLS["prepare_package"](source=source)
        train = YAMLS["launch_spot_job"](
            package=package.outputs["package"], api_endpoint=api_endpoint
        ).set_caching_options(False)
        YAMLS["deploy_spot_endpoint"](
            model=train.outputs["model"], labels=serving_labels, **deploy
        ).set_caching_options(cached)
        with dsl.ParallelFor(machines) as machine:  # judged with each machine
            YAMLS["deploy_spot_endpoint"](
                model=train.outputs["model"], machine_type=machine
            ).set_caching_options(False)

    path = tmp_path / f"{name}.yaml"
    compiler.Compiler().compile(user_serving, str(path))
    return path


@pytest.fixture(scope="module")
def serving(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serving")
    return {
        "good": _compile_serving(tmp, "good", traffic_split={"0": 100}, min_replica_count=2),
        # Vertex AI has no limit of its own on serving replicas (the emulator's 16 is its own)
        "many": _compile_serving(tmp, "many", min_replica_count=17),
        "machine": _compile_serving(tmp, "machine", machine_type="N1-Standard-4"),
        "replicas": _compile_serving(tmp, "replicas", min_replica_count=0),
        "split": _compile_serving(tmp, "split", traffic_split={"0": 50}),
        "image": _compile_serving(
            tmp, "image", serving_container_image_uri="us-docker.pkg.dev/vertex-ai/prediction/x"
        ),
        "project": _compile_serving(tmp, "project", project="P_UP"),
        "emulator": _compile_serving(tmp, "emulator", api_endpoint="http://127.0.0.1:8080"),
        "cached_elsewhere": _compile_serving(tmp, "cached", cached=True, location="us-east1"),
    }


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("machine", "input 'machine_type': 'N1-Standard-4' is not a known machine type"),
        ("replicas", "input 'min_replica_count': is 0; it must be 1.."),
        ("split", "input 'traffic_split': {'0': 50} adds up to 50, not 100"),
        ("image", "input 'serving_container_image_uri': "),
        ("project", "input 'project': expected a Google Cloud project ID"),
        ("emulator", "input 'api_endpoint': 'http://127.0.0.1:8080' is the local emulator"),
    ],
)
def test_a_deploy_input_the_deployer_would_refuse_is_refused_before_the_training(
    serving, template, needle
):
    line = _one_error_line(_submit(serving[template], "--dry-run"))
    assert f"task 'deploy-spot-endpoint': deploy_spot_endpoint {needle}" in line


def test_a_parameter_value_flowing_into_a_deploy_is_checked(serving):
    result = _submit(serving["good"], "--dry-run", "--param", 'serving_labels={"Team": "x"}')
    line = _one_error_line(result)
    assert "task 'deploy-spot-endpoint': deploy_spot_endpoint input 'labels'" in line
    assert "label key 'Team' is invalid" in line


@pytest.mark.parametrize("template", ["good", "many"])
def test_a_valid_deploy_task_passes_without_its_model_directory_being_read(serving, template):
    # The model directory stands in under gs://pipeline-root: listing it would need Cloud Storage.
    result = _submit(serving[template], "--dry-run")
    assert result.exit_code == 0, result.output
    assert "not checked before the run" not in result.stderr  # the loop's, with each machine
    assert "could not be listed" not in result.stderr


def test_a_cached_deploy_or_one_baked_into_another_region_is_pointed_out(serving):
    result = _submit(serving["cached_elsewhere"], "--dry-run")
    assert result.exit_code == 0, result.output
    # a cached deploy replays an endpoint that may be gone by the rerun
    assert (
        "task 'deploy-spot-endpoint' (deploy_spot_endpoint) is cached: a rerun with the same "
        "inputs replays the endpoint of the earlier run"
    ) in result.stderr
    assert (
        "task 'deploy-spot-endpoint' (deploy_spot_endpoint) deploys its model in location "
        "'us-east1', baked into the template, not the submission's 'us-central1'"
    ) in result.stderr
    result = _submit(serving["cached_elsewhere"], "--dry-run", "--disable-caching")
    assert result.exit_code == 0 and "is cached" not in result.stderr, result.stderr


def test_a_deploy_of_a_model_from_the_registry_to_an_existing_endpoint_is_checked(tmp_path):
    """``uploaded_model``/``target_endpoint`` from other tasks stand in as resource names."""
    deploy = YAMLS["deploy_spot_endpoint"]

    def compiled(min_replica_count):
        @dsl.pipeline(name="registry-serving")
        def registry_serving():
            first = deploy(artifact_uri="gs://my-bucket/model").set_caching_options(False)
            deploy(
                uploaded_model=first.outputs["vertex_model"],
                target_endpoint=first.outputs["endpoint"],
                min_replica_count=min_replica_count,
            ).set_caching_options(False)

        path = tmp_path / f"registry-{min_replica_count}.yaml"
        compiler.Compiler().compile(registry_serving, str(path))
        return pipeline_job.read_template(path)

    args = {"project": "my-proj-123", "location": "europe-west4", "arguments": {}}
    assert check_template_launches(compiled(1), **args) == []
    with pytest.raises(TemplateTaskError) as info:
        check_template_launches(compiled(-1), **args)
    assert str(info.value).startswith(
        "task 'deploy-spot-endpoint-2': deploy_spot_endpoint input 'min_replica_count': is -1"
    )


def test_the_deploy_component_alone_needs_its_model_as_a_parameter():
    """Its ``model`` artifact is an input of the run, which a submission cannot pass."""
    from kfp_spot.pipelines import catalog

    (entry,) = [e for e in catalog.COMPONENTS if e.name == "deploy_spot_endpoint"]
    line = _one_error_line(_submit(entry.default_path(), "--dry-run"))
    assert "deploy_spot_endpoint input 'model': give exactly one of `model`" in line
    model = "artifact_uri=gs://my-bucket/model"
    result = _submit(entry.default_path(), "--dry-run", "--param", model)
    assert result.exit_code == 0, result.output


def _compile_sweep(tmp_path, name, **launch):
    """A team's learning-rate sweep: one launch per item, inside a condition in the loop."""

    @dsl.pipeline(name="sweep")
    def sweep(
        source: str = "gs://my-bucket/src.tar.gz",
        lrs: list = [0.1, 0.01],  # noqa: B006 (a KFP default)
        out: str = "gs://my-bucket/sweep",
        go: str = "yes",
    ):
        package = YAMLS["prepare_package"](source=source).set_caching_options(False)
        with dsl.ParallelFor(lrs) as lr, dsl.If(go == "yes"):
            forms = {"<out>": out, "<out>/fixed": f"{out}/fixed", "<out>/<lr>": f"{out}/lr-{lr}"}
            YAMLS["launch_spot_job"](
                package=package.outputs["package"],
                args=["--lr", lr],
                **{k: forms.get(v, v) for k, v in launch.items()},
            ).set_caching_options(False)

    path = tmp_path / f"{name}.yaml"
    compiler.Compiler().compile(sweep, str(path))
    return path


@pytest.mark.parametrize(
    ("launch", "shown"),
    [
        ({"base_output_directory": "gs://my-bucket/fixed"}, "'gs://my-bucket/fixed'"),
        ({"base_output_directory": "<out>"}, "'gs://my-bucket/sweep'"),  # a pipeline parameter
        ({"base_output_directory": "<out>/fixed"}, "'gs://my-bucket/sweep/fixed'"),  # f-string
    ],
)
def test_a_sweep_whose_launches_share_one_output_directory_is_refused_before_the_run(
    tmp_path, launch, shown
):
    """Every iteration would train in one checkpoint directory: side by side all but one are
    refused after the package was built; one after the other each resumes from the previous
    trial's weights. Before, submit let it through (the loop item makes `args` unknown, so the
    task was not checked at all)."""
    line = _one_error_line(_submit(_compile_sweep(tmp_path, "shared", **launch), "--dry-run"))
    assert (
        "task 'for-loop-1/condition-2/launch-spot-job': launch_spot_job input "
        f"'base_output_directory': {shown} is the same in every iteration of the dsl.ParallelFor "
        "'for-loop-1', so they would share one checkpoint directory"
    ) in line
    assert "leave it empty (each iteration then writes next to its own outputs)" in line
    # The same, left empty: each iteration writes next to its own outputs.
    result = _submit(_compile_sweep(tmp_path, "own"), "--dry-run")
    assert result.exit_code == 0, result.output
    assert "base_output_directory" not in result.stderr
    # One per iteration, built from the loop item (an f-string): each iteration's, checked.
    per_item = _compile_sweep(tmp_path, "per_item", base_output_directory="<out>/<lr>")
    result = _submit(per_item, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "not checked before the run" not in result.stderr


def test_a_launch_left_for_the_run_is_named_by_its_own_inputs_only(tmp_path):
    """`args=["--lr", lr]` compiles to `args` plus a KFP channel input the task is given: the
    warning named that channel (`pipelinechannel--lrs-loop-item`) as if it were a launch input."""

    @dsl.pipeline(name="sweep")
    def sweep(configs: list = [{"lr": 0.1}]):  # noqa: B006 (a KFP default); a field: run time
        with dsl.ParallelFor(configs) as config:
            YAMLS["launch_spot_job"](container_image_uri=IMAGE, args=["--lr", config.lr])

    compiler.Compiler().compile(sweep, str(tmp_path / "fields.yaml"))
    result = _submit(tmp_path / "fields.yaml", "--dry-run")
    assert result.exit_code == 0, result.output
    assert (
        "task 'for-loop-1/launch-spot-job' (launch_spot_job) not checked before the "
        "run: args known only at run time"
    ) in result.stderr
    assert "pipelinechannel" not in result.stderr


def _compile_imported_evaluation(tmp_path, name, cached=True, reimport=False):
    """A team evaluates a checkpoint directory of an earlier run, imported by its URI."""

    @dsl.pipeline(name="evaluate-imported")
    def evaluate_imported(
        checkpoints: str = "gs://my-bucket/runs/7/checkpoints",
        source: str = "gs://my-bucket/src.tar.gz",
        go: str = "yes",
    ):
        package = YAMLS["prepare_package"](source=source).set_caching_options(False)
        imported = dsl.importer(
            artifact_uri=checkpoints, artifact_class=dsl.Artifact, reimport=reimport
        )
        with dsl.If(go == "yes"):
            EvaluateCheckpointOp(
                checkpoint=imported.output, package=package.outputs["package"]
            ).set_caching_options(cached)

    path = tmp_path / f"{name}.yaml"
    compiler.Compiler().compile(evaluate_imported, str(path))
    return path


def test_a_cached_evaluation_of_an_imported_checkpoint_is_pointed_out(tmp_path):
    """The imported directory keeps its URI (the same artifact each run) as it gains steps: a
    cached evaluation replays the metrics of the steps it had then. Before, submit said nothing
    about a cacheable evaluate task."""
    result = _submit(_compile_imported_evaluation(tmp_path, "cached"), "--dry-run")
    assert result.exit_code == 0, result.output
    assert (
        "task 'condition-1/evaluate-checkpoint' (evaluate_checkpoint) is cached: its checkpoint "
        "comes from a dsl.importer (the same artifact each run, though the directory gains "
        "steps), so a rerun replays the earlier metrics"
    ) in result.stderr
    for quiet in (
        _compile_imported_evaluation(tmp_path, "off", cached=False),
        _compile_imported_evaluation(tmp_path, "reimport", reimport=True),  # a new artifact
    ):
        result = _submit(quiet, "--dry-run")
        assert result.exit_code == 0, result.output
        assert "is cached" not in result.stderr, result.stderr


def test_a_pipeline_without_parameters_submits_and_runs_locally(tmp_path):
    """A team bakes everything into its pipeline (no parameters at all, job-unique directories
    from KFP's placeholders): KFP leaves the spec's inputs None, and submit and a local run
    both ended in an AttributeError traceback."""
    from kfp_spot.pipelines import local

    @dsl.pipeline(name="everything-baked")
    def baked():
        YAMLS["launch_spot_job"](
            container_image_uri=IMAGE,
            base_output_directory=f"gs://my-bucket/runs/{dsl.PIPELINE_JOB_ID_PLACEHOLDER}",
        ).set_caching_options(False)

    path = tmp_path / "baked.yaml"
    compiler.Compiler().compile(baked, str(path))
    result = _submit(path, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    # Locally it is refused for what it is (no api_endpoint to point at the emulator), in one line.
    with pytest.raises(local.LocalRunError, match="the pipeline has no 'api_endpoint' parameter"):
        local.run(str(path), run_dir=tmp_path / "run", progress=None)


SHIPPED = {
    name: ROOT / "pipelines" / name / "pipeline.yaml"
    for name in ("evaluate_checkpoint", "continue_training")
}
IMPORTED_INPUT = {
    "evaluate_checkpoint": "task 'evaluate-checkpoint': evaluate_checkpoint input 'checkpoint'",
    "continue_training": "task 'launch-spot-job': launch_spot_job input 'resume_from'",
}


@pytest.mark.parametrize("pipeline", sorted(SHIPPED))
@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "is empty"),
        ("/Users/me/run/job/checkpoints", "a path on this machine"),
        # the same as a file:// URL: the task's container has no such directory (was accepted)
        ("file:///Users/me/run/job/checkpoints", "a path on this machine"),
        ("s3://bkt/checkpoints", "not a location a task can read checkpoints from"),
    ],
)
def test_an_imported_checkpoint_vertex_cannot_read_is_refused_at_submission(pipeline, value, why):
    # The checkpoint these pipelines import by its URI was read only in the task, after the
    # package was built: an empty URI or this machine's path failed there, on Vertex AI.
    line = _one_error_line(
        _submit(
            SHIPPED[pipeline],
            "--dry-run",
            "--param",
            "source=gs://bkt/src.tar.gz",
            "--param",
            f"checkpoint_uri={value}",
        )
    )
    assert (
        IMPORTED_INPUT[pipeline] in line and "from the pipeline parameter checkpoint_uri" in line
    ), line
    assert why in line, line
    # Vertex AI's tasks read Cloud Storage only: a local path is never what a refusal offers.
    if value.strip():
        assert "gs://BUCKET/PATH or /gcs/BUCKET/PATH" in line and "local path" not in line, line


@pytest.mark.parametrize("pipeline", sorted(SHIPPED))
@pytest.mark.parametrize(
    "uri", ["gs://bkt/run/checkpoints", "/gcs/bkt/run/checkpoints", "file:///gcs/bkt/run/ckpt"]
)
def test_an_imported_checkpoint_on_cloud_storage_is_accepted_at_submission(pipeline, uri):
    result = _submit(
        SHIPPED[pipeline],
        "--dry-run",
        "--param",
        "source=gs://bkt/src.tar.gz",
        "--param",
        f"checkpoint_uri={uri}",
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("pipeline", sorted(SHIPPED))
def test_a_local_run_refuses_an_imported_checkpoint_that_is_no_directory_here(pipeline, tmp_path):
    import yaml

    from kfp_spot.jobs.template import check_local_launches

    spec = yaml.safe_load(SHIPPED[pipeline].read_text())
    arguments = {"source": str(tmp_path), "api_endpoint": "http://127.0.0.1:1"}
    for value, why in (("", "is empty"), (str(tmp_path / "nope"), "is not a directory here")):
        with pytest.raises(TemplateTaskError, match=why) as refused:
            check_local_launches(spec, {**arguments, "checkpoint_uri": value})
        assert IMPORTED_INPUT[pipeline] in str(refused.value)
    check_local_launches(spec, {**arguments, "checkpoint_uri": str(tmp_path)})


def _compile_imported_package(tmp_path, name, uri, metadata=None):
    """A team imports a package built elsewhere by its URI, trains on it and evaluates it."""

    @dsl.pipeline(name="imported-package")
    def imported_package(sdist: str = uri):
        package = dsl.importer(
            artifact_uri=sdist, artifact_class=dsl.Artifact, metadata=metadata or {}
        )
        train = YAMLS["launch_spot_job"](package=package.output).set_caching_options(False)
        EvaluateCheckpointOp(checkpoint=train.outputs["checkpoint"], package=package.output)

    path = tmp_path / f"{name}.yaml"
    compiler.Compiler().compile(imported_package, str(path))
    return path


def test_a_package_imported_from_a_path_of_this_machine_is_refused_at_submission(tmp_path):
    """The launch (and the evaluation) read the imported package on Vertex AI, which cannot read
    this machine's files: before, submit let it through and the launch task failed in the run."""
    lines = _error_lines(
        _submit(
            _compile_imported_package(tmp_path, "local", "/home/me/dist/t-0.1.tar.gz"), "--dry-run"
        )
    )
    assert len(lines) == 2, lines  # both tasks that read it, named together
    for task, component in (
        ("launch-spot-job", "launch_spot_job"),
        ("evaluate-checkpoint", "evaluate_checkpoint"),
    ):
        assert any(
            re.search(
                rf"task '{task}': {component} input 'package' \(the dsl.importer's URI, from "
                r"the pipeline parameter sdist\): '/home/me/dist/t-0.1.tar.gz' is a local path: "
                r"Vertex AI reads packages from Cloud Storage only",
                line,
            )
            for line in lines
        ), lines
    for fine in (
        _compile_imported_package(tmp_path, "gcs", "gs://my-bucket/dist/t-0.1.tar.gz"),
        _compile_imported_package(tmp_path, "fuse", "/gcs/my-bucket/dist/t-0.1.tar.gz"),
        # the launcher installs the package_uris the artifact's metadata lists, not its URI
        _compile_imported_package(
            tmp_path,
            "listed",
            "/home/me/dist",
            metadata={"package_uris": ["gs://my-bucket/dist/t-0.1.tar.gz"]},
        ),
    ):
        result = _submit(fine, "--dry-run")
        assert result.exit_code == 0, result.output


def test_a_number_in_a_launch_input_is_checked_as_the_run_writes_it(tmp_path):
    """`labels={"epochs": f"{epochs}"}` with an int parameter: the run's label value is '3' (the
    KFP backend writes numbers so), but submit checked '3.0', whose '.' no label value may hold,
    and refused a template Vertex AI runs."""

    @dsl.pipeline(name="team-labels")
    def team(epochs: int = 3):
        YAMLS["launch_spot_job"](
            container_image_uri=IMAGE,
            args=["--epochs", epochs],
            labels={"epochs": f"{epochs}"},
            base_output_directory="gs://my-bucket/runs",
        ).set_caching_options(False)

    path = tmp_path / "labels.yaml"
    compiler.Compiler().compile(team, str(path))
    for given in ([], ["--param", "epochs=12"]):  # the default (3.0 in the spec) and a value
        result = _submit(path, "--dry-run", *given)
        assert result.exit_code == 0, result.output


def test_an_evaluate_task_with_several_bad_bounds_is_still_one_line_naming_each():
    from kfp_spot.jobs.template_steps import check_evaluate_task
    from kfp_spot.jobs.template_walk import TemplateTask

    task = TemplateTask(
        path="condition-1/evaluate-checkpoint",
        call="evaluate",
        parameters={"thresholds": {"accuracy": "=>0.9", "val_loss": 0.1}},
        artifacts=frozenset(),
        env={},
        cached=True,
    )
    with pytest.raises(TemplateTaskError) as info:
        check_evaluate_task(task)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(
        "task 'condition-1/evaluate-checkpoint': evaluate_checkpoint input thresholds: "
        "thresholds['accuracy']: '=>0.9' is not a bound; "
    ), text
    assert "; thresholds['val_loss']: 0.1 has no operator" in text


def _labels(count):
    return "labels=" + json.dumps({f"k{i}": "v" for i in range(count)})


def test_a_launchs_labels_count_the_runs_billing_label_and_kfp_spots_own(templates):
    """On Vertex AI the job also carries the run's billing label (VERTEX_AI_PIPELINES_RUN_LABELS)
    and kfp-spot's two: 62 labels passed the submission and failed the launch inside the run."""
    line = _one_error_line(_submit(templates["good"], "--dry-run", "--param", _labels(62)))
    assert "task 'condition-1/launch-spot-job': launch_spot_job input 'labels': the job " in line
    assert (
        "carry 65 labels (62 given, 1 of the pipeline run's VERTEX_AI_PIPELINES_RUN_LABELS, 2 "
        "kfp-spot's own); Google Cloud allows at most 64: give at most 61"
    ) in line
    result = _submit(templates["good"], "--dry-run", "--param", _labels(61))
    assert result.exit_code == 0, result.stderr


def test_a_deploys_labels_count_the_runs_billing_label(serving):
    """The Model also carries the run's billing label and kfp-spot's deployment label: 63 labels
    passed the submission and failed the deploy inside the run."""
    result = _submit(serving["good"], "--dry-run", "--param", "serving_" + _labels(63))
    line = _one_error_line(result)
    assert (
        "task 'deploy-spot-endpoint': deploy_spot_endpoint input 'labels' (from the pipeline "
        "parameter serving_labels): the Model would carry 65 labels (63 given, 1 of the pipeline "
        "run's VERTEX_AI_PIPELINES_RUN_LABELS, 1 kfp-spot's own); Google Cloud allows at most 64: "
        "give at most 62"
    ) in line
    result = _submit(serving["good"], "--dry-run", "--param", "serving_" + _labels(62))
    assert result.exit_code == 0, result.stderr


def test_a_deploys_prediction_image_past_its_end_is_a_warning_of_its_task(tmp_path):
    """The deploy says it on its console once the training was paid for; Vertex AI then creates
    no new endpoint with that image. The submission said nothing."""
    old = "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-0:latest"  # ended 2024-11-15
    path = _compile_serving(tmp_path, "old_image", serving_container_image_uri=old)
    result = _submit(path, "--dry-run")
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.stderr.splitlines() if "prediction image" in line]
    assert line == (
        "kfp-spot: warning: task 'deploy-spot-endpoint' (deploy_spot_endpoint): prediction image "
        "sklearn-cpu.1-0 reached its documented end of availability on 2024-11-15: Vertex AI "
        "creates no new endpoint with it and may delete endpoints that use it; pick a current "
        "image from https://cloud.google.com/vertex-ai/docs/predictions/pre-built-containers"
    )
