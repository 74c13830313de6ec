"""deploy_spot_endpoint's runtime against the emulator: outputs, reattach, cancel, bad inputs.

The deployments serve ``light_model_dir`` (no scikit-learn import in each replica): these tests
are about the component's requests and outputs, not about what a model predicts.
"""

import inspect
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import compiler, components, dsl

from kfp_spot.components.deploy_spot_endpoint import component as deploy_component
from kfp_spot.pipelines import catalog
from kfp_spot.serving.deploy import DeployInputError
from kfp_spot.serving.entry import deploy_spot_endpoint, input_defaults
from tests.jobs.artifacts import FakeArtifact
from tests.serving.conftest import X, wait_for
from tests.trainer.faultproxy import FaultProxy

ROOT = Path(__file__).resolve().parents[2]


def _deploy(serving, model_dir, out: Path, **extra):
    endpoint, vertex_model = FakeArtifact(uri=str(out / "endpoint")), FakeArtifact()
    deployed = deploy_spot_endpoint(
        model=FakeArtifact(uri=str(model_dir)),
        endpoint=endpoint,
        vertex_model=vertex_model,
        gcp_resources=str(out / "gcp_resources"),
        api_endpoint=serving.emu.endpoint,
        **{"project": "test-proj", **extra},
    )
    return deployed, endpoint, vertex_model


def test_outputs_are_gcpc_artifacts_and_the_endpoint_serves_on_spot(
    serving, light_model_dir, tmp_path
):
    deployed, endpoint, vertex_model = _deploy(serving, light_model_dir, tmp_path)
    name = endpoint.metadata["resourceName"]
    assert endpoint.uri == f"{serving.emu.endpoint}/v1/{name}"
    assert vertex_model.metadata["resourceName"].endswith("@1")  # as GCPC's ModelUploadOp
    assert endpoint.metadata["deployedModelId"] == deployed
    (dm,) = serving.endpoints.get_endpoint(name=name).deployed_models
    assert dm.dedicated_resources.spot and dm.dedicated_resources.min_replica_count == 2
    resources = json.loads((tmp_path / "gcp_resources").read_text())["resources"]
    assert [r["resourceType"] for r in resources] == ["VertexLro", "VertexEndpoint", "VertexLro"]
    assert serving.predictions.predict(endpoint=name, instances=X[:1].tolist()).predictions


def test_a_retried_task_reattaches_instead_of_deploying_twice(serving, light_model_dir, tmp_path):
    first, endpoint, _ = _deploy(serving, light_model_dir, tmp_path)
    again, endpoint_again, _ = _deploy(serving, light_model_dir, tmp_path)  # same output paths
    assert again == first
    assert endpoint_again.metadata["resourceName"] == endpoint.metadata["resourceName"]
    parent = "projects/test-proj/locations/us-central1"
    assert len(list(serving.endpoints.list_endpoints(parent=parent))) == 1
    assert len(list(serving.models.list_models(parent=parent))) == 1


def test_sigterm_cancels_the_deploy_and_leaves_no_replica(serving, slow_model_dir, tmp_path):
    # The service answers the first two cancels 503: the deployer asks again (a cancel lost to
    # one transient error used to leave the deploy, and its Spot VM, going on after the task
    # ended). A cancel that goes through at once is the same path, one request shorter.
    unavailable_cancels = 2
    proxy = FaultProxy(serving.emu.endpoint, rate=0.0)
    proxy.unavailable(r":cancel$", unavailable_cancels)
    inputs = {
        "project": "test-proj",
        "model_uri": str(slow_model_dir),
        "endpoint_uri": str(tmp_path / "endpoint"),
        "gcp_resources": str(tmp_path / "gcp_resources"),
        "api_endpoint": proxy.url,
        "min_replica_count": 1,
    }
    with proxy:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.serving.deploy_process", json.dumps(inputs)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stderr=subprocess.PIPE,
            text=True,
        )
        _sigterm_the_deploy(serving, proc, tmp_path)
    assert proxy.counts["unavailable"] == unavailable_cancels


def test_a_sigterm_before_the_wait_on_the_deploy_still_cancels_it(
    serving, slow_model_dir, tmp_path
):
    # The task records the deploy's operation, then waits on it: a pipeline cancelled between
    # the two used to end the task ("its operation was cancelled") with the deploy, and its Spot
    # replica, going on.
    inputs = {
        "project": "test-proj",
        "model_uri": str(slow_model_dir),
        "endpoint_uri": str(tmp_path / "endpoint"),
        "gcp_resources": str(tmp_path / "gcp_resources"),
        "api_endpoint": serving.emu.endpoint,
        "min_replica_count": 1,
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.serving.deploy_process",
            json.dumps(inputs),
            "sigterm-once-the-deploy-is-recorded",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "interrupted: cancelling" in done.stderr
    gcp = json.loads((tmp_path / "gcp_resources").read_text())
    operation = gcp["resources"][-1]["resourceUri"].split("/v1/")[1]
    name = operation.split("/operations/")[0]
    # The signal may come before the deploy started its replica, or after: either way the deploy
    # ends cancelled, and every replica it started ends with it.
    done_op = wait_for(
        lambda: (op := serving.endpoints.get_operation({"name": operation})).done and op,
        what="the cancelled deploy's end",
    )
    assert done_op.error.code == 1, done_op  # google.rpc.Code.CANCELLED
    assert not serving.endpoints.get_endpoint(name=name).deployed_models

    def every_replica_ended() -> tuple[list[dict[str, Any]]] | None:
        lives = serving.emu.serving_ledger(name)["lives"]
        return (lives,) if all(r["endReason"] for r in lives) else None

    (lives,) = wait_for(every_replica_ended, what="the end of every replica the deploy started")
    assert {r["endReason"] for r in lives} <= {"CANCELLED"}, lives


def _sigterm_the_deploy(serving: Any, proc: subprocess.Popen[str], tmp_path: Path) -> None:
    try:
        gcp = tmp_path / "gcp_resources"
        wait_for(lambda: gcp.exists() and gcp.read_text().count("VertexLro") == 2, what="deploy")
        name = json.loads(gcp.read_text())["resources"][1]["resourceUri"].split("/v1/")[1]
        wait_for(lambda: serving.emu.serving_ledger(name)["lives"], what="a replica starting")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "cancelled" in err
    assert not serving.endpoints.get_endpoint(name=name).deployed_models
    # The task may exit once the cancel is sent (as GCPC's do); the replica stops with the cancel.
    try:
        lives = wait_for(
            lambda: [r for r in serving.emu.serving_ledger(name)["lives"] if r["endReason"]],
            what="the cancelled replica's end",
        )
    except TimeoutError as exc:  # seen under load: say where the cancel stopped
        ledger = serving.emu.serving_ledger(name)
        models = {life["deployedModelId"] for life in ledger["lives"]}
        status: dict[str, Any] = {}
        for model in models:
            try:
                status[model] = serving.emu.serving_replicas(name, model)
            except LookupError as gone:  # the deployed model is no longer on the endpoint
                status[model] = repr(gone)
        raise AssertionError(
            f"{exc}; ledger {ledger}; replicas {status}; task stderr {err}"
        ) from exc
    assert [r["endReason"] for r in lives] == ["CANCELLED"]
    assert len(serving.emu.serving_ledger(name)["lives"]) == 1


@pytest.mark.parametrize(
    ("inputs", "field", "says"),
    [
        ({"min_replica_count": 0}, "min_replica_count", "must be 1..16 on the local emulator"),
        ({"min_replica_count": 17}, "min_replica_count", "as a process on this machine"),
        ({"min_replica_count": 3, "max_replica_count": 2}, "max_replica_count", "less than min_"),
        ({"max_replica_count": 2**31}, "max_replica_count", "a count up to 2147483647"),
        ({"model_display_name": "m" * 129}, "model_display_name", "129 characters"),
        ({"endpoint_display_name": "x" * 129}, "endpoint_display_name", "at most 128"),
        ({"traffic_split": {"0": 50, "x": 50}}, "traffic_split", "not a deployed model id"),
        (
            {"machine_type": "cloud-tpu", "accelerator_type": "TPU_V3", "accelerator_count": 32},
            "machine_type",
            "Spot VMs cannot be used with TPU Pods",
        ),
        (
            {"serving_container_image_uri": "europe-docker.pkg.dev/vertex-ai/prediction/x:latest"},
            "serving_container_image_uri",
            "not a prebuilt prediction image",
        ),
        ({"traffic_split": {"0": 99}}, "traffic_split", "not 100"),
        ({"project": ""}, "project", "required"),
        ({"project": "My Project"}, "project", "project ID"),
        ({"location": ""}, "location", "required"),
        ({"labels": {"Team": "a"}}, "labels", "label key 'Team' is invalid"),
        ({"machine_type": "n9-huge"}, "machine_type", "not a known machine type"),
        ({"accelerator_type": "FOO"}, "accelerator_type", "not an accelerator type"),
        ({"accelerator_count": 2**40}, "accelerator_count", "0..2147483647"),
        # What a careless or hostile pipeline author can pass: typed errors, never a traceback.
        ({"traffic_split": "[" * 100_000}, "traffic_split", "levels deep"),
        ({"serving_container_args": "[" * 50_000 + "]" * 50_000}, "serving_container_args", "deep"),
        ({"traffic_split": {"0": float("inf")}}, "traffic_split", "finite number"),
        ({"traffic_split": {"0": 99.5, "1": 0.5}}, "traffic_split", "whole percentage"),
        ({"machine_type": 5}, "machine_type", "expected a string"),
        ({"serving_container_env": {"A": 1}}, "serving_container_env", "strings to strings"),
        ({"serving_container_command": ["python", 3]}, "serving_container_command", "strings"),
        ({"serving_container_ports": "[8080.5]"}, "serving_container_ports", "integer"),
        ({"spot": "yes"}, "spot", "true or false"),
        ({"min_replica_count": "1e400"}, "min_replica_count", "finite number"),
        ({"timeout_seconds": -1}, "timeout_seconds", "more than 0"),
        # 0 would time out the first operation at once, leaving an empty endpoint behind.
        ({"timeout_seconds": 0}, "timeout_seconds", r"more than 0 .*got 0"),
        # No process can be given a NUL: the emulator's deploy of such a model never ended.
        ({"serving_container_env": {"A": "\x00"}}, "serving_container_env", "NUL character"),
        ({"serving_container_args": ["\x00"]}, "serving_container_args", "NUL character"),
    ],
)
def test_bad_inputs_are_refused_before_any_call(light_model_dir, tmp_path, inputs, field, says):
    kwargs = {
        "project": "test-proj",
        "model": FakeArtifact(uri=str(light_model_dir)),
        "endpoint": FakeArtifact(uri=str(tmp_path / "e")),
        "vertex_model": FakeArtifact(),
        "gcp_resources": str(tmp_path / "gcp_resources"),
        "api_endpoint": "http://127.0.0.1:9",  # nothing listens: any call would fail differently
        **inputs,
    }
    with pytest.raises(DeployInputError, match=says) as refused:
        deploy_spot_endpoint(**kwargs)
    assert refused.value.field == field
    assert not (tmp_path / "gcp_resources").exists()


def test_a_model_directory_the_image_cannot_serve_is_named(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.npz").write_bytes(b"x")
    with pytest.raises(DeployInputError, match=r"exactly one of: \[model\.joblib, model\.pkl\]"):
        deploy_spot_endpoint(
            project="test-proj",
            model=FakeArtifact(uri=str(tmp_path / "model")),
            endpoint=FakeArtifact(uri=str(tmp_path / "e")),
            vertex_model=FakeArtifact(),
            gcp_resources=str(tmp_path / "gcp"),
            api_endpoint="http://127.0.0.1:9",
        )


def test_a_model_that_is_a_file_not_its_directory_is_named(tmp_path, light_model_dir):
    # fsspec lists a file as itself, so the model file passed as a directory holding one file
    # of its name ("exactly one of: [model.joblib, model.pkl]; it holds ['model.pkl']").
    with pytest.raises(DeployInputError, match="is a file: give the directory that holds it"):
        deploy_spot_endpoint(
            project="test-proj",
            model=FakeArtifact(uri=str(light_model_dir / "model.pkl")),
            endpoint=FakeArtifact(uri=str(tmp_path / "e")),
            vertex_model=FakeArtifact(),
            gcp_resources=str(tmp_path / "gcp"),
            api_endpoint="http://127.0.0.1:9",
        )


def test_the_component_plugs_into_gcpc_ops_without_type_errors(tmp_path):
    from google_cloud_pipeline_components.v1.endpoint import ModelDeployOp, ModelUndeployOp
    from google_cloud_pipeline_components.v1.model import ModelUploadOp

    deploy = components.load_component_from_file(
        str(ROOT / "components" / "deploy_spot_endpoint" / "component.yaml")
    )

    @dsl.pipeline(name="gcpc-and-spot")
    def gcpc_and_spot(project: str, artifact_uri: str):
        uploaded = ModelUploadOp(project=project, display_name="m")
        spot = deploy(project=project, uploaded_model=uploaded.outputs["model"])
        # Our outputs feed GCPC's ops: a second (standard) deployment on our endpoint, then off.
        standard = ModelDeployOp(
            model=spot.outputs["vertex_model"],
            endpoint=spot.outputs["endpoint"],
            dedicated_resources_machine_type="n1-standard-4",
            dedicated_resources_min_replica_count=1,
        )
        ModelUndeployOp(
            model=spot.outputs["vertex_model"], endpoint=spot.outputs["endpoint"]
        ).after(standard)
        # and GCPC's endpoint into ours
        deploy(project=project, artifact_uri=artifact_uri, target_endpoint=spot.outputs["endpoint"])

    out = tmp_path / "pipeline.yaml"
    compiler.Compiler().compile(gcpc_and_spot, str(out))
    text = out.read_text()
    assert "google.VertexEndpoint" in text and "google.VertexModel" in text


def _deploy_tasks(node: object):
    """Every task of a compiled pipeline that runs the deploy_spot_endpoint component."""
    if isinstance(node, dict):
        if node.get("componentRef", {}).get("name", "").startswith("comp-deploy-spot-endpoint"):
            yield node
        for value in node.values():
            yield from _deploy_tasks(value)
    elif isinstance(node, list):
        for value in node:
            yield from _deploy_tasks(value)


def _runtime_default(name: str) -> object:
    value = input_defaults()[name]
    return list(value) if isinstance(value, tuple) else value  # KFP spells sequences as lists


def test_the_component_and_the_pipeline_repeat_the_runtime_defaults():
    python_func = deploy_component.deploy_spot_endpoint.python_func
    signature = {
        name: p.default
        for name, p in inspect.signature(python_func).parameters.items()
        if p.default is not inspect.Parameter.empty and p.default is not None  # None: artifacts
    }
    assert set(signature) <= set(input_defaults())
    for name, value in signature.items():
        assert value == _runtime_default(name), name
        assert type(value) is type(_runtime_default(name)), name
    spec = yaml.safe_load(catalog.pipeline_path("spot_training_and_serving").read_text())
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    forwarded = 0
    for task in _deploy_tasks(spec):
        for name, source in task["inputs"].get("parameters", {}).items():
            # inside the quality gate's sub-DAG the pipeline's inputs are pipeline channels
            outer = str(source.get("componentInputParameter")).removeprefix("pipelinechannel--")
            if outer in parameters and "defaultValue" in parameters[outer]:
                assert parameters[outer]["defaultValue"] == _runtime_default(name), outer
                forwarded += 1
    assert forwarded >= 5  # image, machine type, replica counts, spot, endpoint name


def test_under_kfp_local_a_bad_input_fails_the_task_in_one_line(tmp_path, capfd):
    from kfp import local

    local.init(local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    op = components.load_component_from_file(
        str(ROOT / "components" / "deploy_spot_endpoint" / "component.yaml")
    )
    with pytest.raises(RuntimeError):
        op(
            project="test-proj",
            artifact_uri=str(tmp_path),
            min_replica_count=0,
            api_endpoint="http://127.0.0.1:9",  # never contacted
        )
    out = "".join(capfd.readouterr())
    assert "deploy_spot_endpoint input 'min_replica_count': is 0; it must be 1..16 on" in out
    assert "Traceback" not in out


def test_gcpc_placeholders_are_settled_per_target(serving, light_model_dir, tmp_path):
    from kfp_spot.emulator import names
    from kfp_spot.vertex.pipeline_context import LOCATION_PLACEHOLDER, PROJECT_ID_PLACEHOLDER

    # Nothing filled them in (no Vertex AI Pipelines): on the emulator, local-project/us-central1.
    deployed, endpoint, _ = _deploy(
        serving,
        light_model_dir,
        tmp_path,
        project=PROJECT_ID_PLACEHOLDER,
        location=LOCATION_PLACEHOLDER,
    )
    number = names.project_number("local-project")
    assert endpoint.metadata["resourceName"].startswith(f"projects/{number}/locations/us-central1/")
    assert endpoint.metadata["deployedModelId"] == deployed
    # Bound for Vertex AI, a placeholder is refused: only Vertex AI Pipelines knows its value.
    with pytest.raises(DeployInputError, match="only Vertex AI") as refused:
        deploy_spot_endpoint(
            location="europe-west4",
            model=FakeArtifact(uri=str(light_model_dir)),
            endpoint=FakeArtifact(uri=str(tmp_path / "e")),
            vertex_model=FakeArtifact(),
            gcp_resources=str(tmp_path / "vertex-gcp_resources"),
        )
    assert refused.value.field == "project"


def test_an_api_endpoint_that_does_not_answer_is_named(light_model_dir, tmp_path, monkeypatch):
    # After the reads' retries ran out the task ended with api_core's RetryError: the retry's
    # own message, the request URL with its query string and urllib3's connection pool.
    from kfp_spot.serving import deploy
    from kfp_spot.serving.entry import build_request
    from tests.conftest import free_port

    monkeypatch.setattr(deploy, "READ_RETRY_SECONDS", 0.5)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    request = build_request(
        model=FakeArtifact(uri=str(light_model_dir)),
        endpoint=FakeArtifact(uri=str(tmp_path / "endpoint")),
        vertex_model=FakeArtifact(),
        gcp_resources=str(tmp_path / "gcp_resources"),
        api_endpoint=url,
        project="my-project",
    )
    with pytest.raises(deploy.DeployFailedError) as info:
        deploy.Deployer(request, sleep=lambda _s: None).run()
    message = str(info.value)
    assert f"no answer from {url} within 0.5 s" in message and "is it running?" in message
    assert "\n" not in message


def test_a_model_saved_one_level_down_names_the_directory_to_give(tmp_path):
    # The hint was always the same joblib line, whatever the directory held.
    (tmp_path / "job" / "model").mkdir(parents=True)
    (tmp_path / "job" / "model" / "model.pkl").write_bytes(b"x")
    with pytest.raises(DeployInputError) as info:
        deploy_spot_endpoint(
            project="test-proj",
            model=FakeArtifact(uri=str(tmp_path / "job")),
            endpoint=FakeArtifact(uri=str(tmp_path / "e")),
            vertex_model=FakeArtifact(),
            gcp_resources=str(tmp_path / "gcp"),
            api_endpoint="http://127.0.0.1:9",
        )
    assert f"model.pkl is in model/: give that directory, {tmp_path / 'job' / 'model'}" in str(
        info.value
    )


def test_a_model_directory_with_two_loadable_files_says_to_keep_one(tmp_path):
    (tmp_path / "model").mkdir()
    for name in ("model.joblib", "model.pkl"):
        (tmp_path / "model" / name).write_bytes(b"x")
    with pytest.raises(DeployInputError, match=r"keep one of model\.joblib and model\.pkl"):
        deploy_spot_endpoint(
            project="test-proj",
            model=FakeArtifact(uri=str(tmp_path / "model")),
            endpoint=FakeArtifact(uri=str(tmp_path / "e")),
            vertex_model=FakeArtifact(),
            gcp_resources=str(tmp_path / "gcp"),
            api_endpoint="http://127.0.0.1:9",
        )


def test_a_model_uploaded_with_an_expired_prebuilt_image_is_warned_about(
    light_model_dir, tmp_path, monkeypatch, capsys
):
    # After its documented end of availability Vertex AI creates no new endpoint with the image:
    # the deploy says so on the task's console before its first call.
    from kfp_spot import executors
    from kfp_spot.serving import deploy
    from kfp_spot.serving.entry import build_request
    from tests.conftest import free_port

    reviewed = executors.table_reviewed(executors.PREDICTION_TABLE)
    expired = next(
        i
        for i in executors.PREDICTION_IMAGES.values()
        if i.framework == "sklearn" and i.end_of_availability < reviewed
    )
    monkeypatch.setattr(deploy, "READ_RETRY_SECONDS", 0.5)
    monkeypatch.setattr(executors, "_WARNED", set())
    request = build_request(
        model=FakeArtifact(uri=str(light_model_dir)),
        endpoint=FakeArtifact(uri=str(tmp_path / "endpoint")),
        vertex_model=FakeArtifact(),
        gcp_resources=str(tmp_path / "gcp_resources"),
        api_endpoint=f"http://127.0.0.1:{free_port()}",  # nothing listens there
        project="my-project",
        serving_container_image_uri=expired.uri,
    )
    with pytest.raises(deploy.DeployFailedError):
        deploy.Deployer(request, sleep=lambda _s: None).run()
    err = capsys.readouterr().err
    assert (
        f"kfp-spot: warning: prediction image {expired.name} reached its documented end of "
        f"availability on {expired.end_of_availability}"
    ) in err
