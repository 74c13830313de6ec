"""One rulebook: a bad deployment is refused by deploy_spot_endpoint and by the emulator's REST
API alike, both naming the same request field (the floor's, kfp_spot.vertex.model_endpoint); a
field the deployer has no input for is named alike by the floor's functions it checks with."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1.types import DeployedModel, Endpoint, Model

from kfp_spot.serving.deploy import DeployInputError
from kfp_spot.serving.entry import deploy_spot_endpoint
from kfp_spot.vertex import model_endpoint as rules
from kfp_spot.vertex.custom_job import EMULATOR
from kfp_spot.vertex.values import InvalidFieldError
from tests.jobs.artifacts import FakeArtifact
from tests.serving.conftest import PARENT, SKLEARN_IMAGE

DEPLOY = {
    "machine_type": "n1-standard-4",
    "accelerator_type": "",
    "accelerator_count": 0,
    "min_replica_count": 2,
    "max_replica_count": 0,
    "spot": True,
    "traffic_split": {"0": 100},
}
TPU_POD = {"machine_type": "cloud-tpu", "accelerator_type": "TPU_V3", "accelerator_count": 32}
RES = "deployedModel.dedicatedResources"

# (the deployment's inputs, the request field the floor names, its snake_case form in the
# emulator's 400, the input deploy_spot_endpoint names)
BAD = [
    (
        {"min_replica_count": 3, "max_replica_count": 2},
        f"{RES}.maxReplicaCount",
        "deployed_model.dedicated_resources.max_replica_count",
        "max_replica_count",
    ),
    (
        {"traffic_split": {"0": 99}},
        "trafficSplit",
        "traffic_split",
        "traffic_split",
    ),
    (
        {"traffic_split": {"0": 50, "x": 50}},  # x is no deployed model (nor an id)
        "trafficSplit",
        "traffic_split",
        "traffic_split",
    ),
    (  # more replicas than the emulator runs as local processes
        {"min_replica_count": 17},
        f"{RES}.minReplicaCount",
        "deployed_model.dedicated_resources.min_replica_count",
        "min_replica_count",
    ),
    (
        {"min_replica_count": 0},
        f"{RES}.minReplicaCount",
        "deployed_model.dedicated_resources.min_replica_count",
        "min_replica_count",
    ),
    (
        {"machine_type": "n9-huge"},
        f"{RES}.machineSpec.machineType",
        "deployed_model.dedicated_resources.machine_spec.machine_type",
        "machine_type",
    ),
    (
        TPU_POD,  # Spot on a TPU Pod
        f"{RES}.machineSpec",
        "deployed_model.dedicated_resources.machine_spec",
        "machine_type",
    ),
    (
        {"accelerator_count": 1},
        f"{RES}.machineSpec.acceleratorType",
        "deployed_model.dedicated_resources.machine_spec.accelerator_type",
        "accelerator_type",
    ),
    (
        {"model_display_name": "m" * 129},
        "model.displayName",
        "model.display_name",
        "model_display_name",
    ),
    (
        {"labels": {"Team": "a"}},
        "model.labels.Team",
        "model.labels.Team",
        "labels",
    ),
    (  # a custom container whose reference no registry serves
        {"serving_container_image_uri": "my image:1"},
        "model.containerSpec.imageUri",
        "model.container_spec.image_uri",
        "serving_container_image_uri",
    ),
    (
        {"serving_container_env": {"MY VAR": "1"}},
        "model.containerSpec.env",
        "model.container_spec.env",
        "serving_container_env",
    ),
    (
        {"serving_container_ports": [0]},
        "model.containerSpec.ports",
        "model.container_spec.ports",
        "serving_container_ports",
    ),
    (
        {"service_account": "trainer"},  # no email: the container could run as no one
        "deployedModel.serviceAccount",
        "deployed_model.service_account",
        "service_account",
    ),
    (
        {"endpoint_display_name": "e" * 129},
        "endpoint.displayName",
        "endpoint.display_name",
        "endpoint_display_name",
    ),
]


def _through_the_api(serving: Any, model_dir: Any, inputs: dict[str, Any]) -> Any:
    """The same deployment as the GAPIC requests deploy_spot_endpoint sends, sent directly."""
    if any(name in inputs for name in ("model_display_name", "labels")) or any(
        name.startswith("serving_container_") for name in inputs
    ):
        return serving.models.upload_model(
            parent=PARENT,
            model=Model(
                display_name=inputs.get("model_display_name", "m"),
                artifact_uri=str(model_dir),
                labels=inputs.get("labels", {}),
                container_spec={
                    "image_uri": inputs.get("serving_container_image_uri", SKLEARN_IMAGE),
                    "env": [
                        {"name": k, "value": v}
                        for k, v in inputs.get("serving_container_env", {}).items()
                    ],
                    "ports": [
                        {"container_port": p} for p in inputs.get("serving_container_ports", [])
                    ],
                },
            ),
        )
    if "endpoint_display_name" in inputs:
        return serving.endpoints.create_endpoint(
            parent=PARENT, endpoint=Endpoint(display_name=inputs["endpoint_display_name"])
        )
    deploy = {**DEPLOY, **inputs}
    return serving.endpoints.deploy_model(
        endpoint=serving.endpoint(),
        deployed_model=DeployedModel(
            model=serving.upload(model_dir),
            service_account=inputs.get("service_account", ""),
            dedicated_resources={
                "machine_spec": {
                    "machine_type": deploy["machine_type"],
                    "accelerator_type": deploy["accelerator_type"] or 0,
                    "accelerator_count": deploy["accelerator_count"],
                },
                "min_replica_count": deploy["min_replica_count"],
                "max_replica_count": deploy["max_replica_count"],
                "spot": deploy["spot"],
            },
        ),
        traffic_split=deploy["traffic_split"],
    )


@pytest.mark.parametrize(("inputs", "request_field", "api_field", "input_name"), BAD)
def test_the_deployer_and_the_emulator_refuse_a_bad_deployment_naming_the_same_field(
    serving, sklearn_model_dir, tmp_path, inputs, request_field, api_field, input_name
):
    with pytest.raises(DeployInputError) as by_deployer:
        deploy_spot_endpoint(
            project="test-proj",
            model=FakeArtifact(uri=str(sklearn_model_dir)),
            endpoint=FakeArtifact(uri=str(tmp_path / "endpoint")),
            vertex_model=FakeArtifact(),
            gcp_resources=str(tmp_path / "gcp_resources"),
            api_endpoint=serving.emu.endpoint,
            **inputs,
        )
    assert by_deployer.value.field == input_name
    assert by_deployer.value.request_field == request_field
    assert not (tmp_path / "gcp_resources").exists()  # refused before any call

    with pytest.raises(exceptions.BadRequest) as by_api:
        _through_the_api(serving, sklearn_model_dir, inputs)
    [details] = by_api.value.details
    [violation] = details["fieldViolations"]
    assert violation["field"] == api_field
    assert f"List of found errors:\t1.Field: {api_field}; Message: " in by_api.value.message


CPU = "aiplatform.googleapis.com/prediction/online/cpu/utilization"
# Fields deploy_spot_endpoint has no input for, checked by the same floor functions it checks its
# requests with (check_model, check_deployed_model): (the Model or DeployedModel fields, the
# request field the floor names, its snake_case form in the emulator's 400)
RULE_ONLY = [
    (
        {"version_aliases": ["Bad Alias"]},
        "model.versionAliases[0]",
        "model.version_aliases[0]",
    ),
    (
        {"autoscaling_metric_specs": [{"metric_name": CPU, "target": 150}]},
        f"{RES}.autoscalingMetricSpecs[0].target",
        "deployed_model.dedicated_resources.autoscaling_metric_specs[0].target",
    ),
    (
        {"autoscaling_metric_specs": [{"target": 80}]},
        f"{RES}.autoscalingMetricSpecs[0].metricName",
        "deployed_model.dedicated_resources.autoscaling_metric_specs[0].metric_name",
    ),
]


@pytest.mark.parametrize(("fields", "request_field", "api_field"), RULE_ONLY)
def test_the_floor_and_the_emulator_name_the_same_field_for_rules_without_an_input(
    serving, sklearn_model_dir, fields, request_field, api_field
):
    model = Model(
        display_name="m",
        artifact_uri=str(sklearn_model_dir),
        container_spec={"image_uri": SKLEARN_IMAGE},
        version_aliases=fields.get("version_aliases", []),
    )
    if "version_aliases" in fields:
        with pytest.raises(InvalidFieldError) as by_floor:
            rules.check_model(model, EMULATOR)
        send = partial(serving.models.upload_model, parent=PARENT, model=model)
    else:
        deployed = DeployedModel(
            model=f"{PARENT}/models/1",
            dedicated_resources={
                "machine_spec": {"machine_type": "n1-standard-4"},
                "min_replica_count": 1,
                **fields,
            },
        )
        with pytest.raises(InvalidFieldError) as by_floor:
            rules.check_deployed_model(deployed, EMULATOR)
        deployed.model = serving.upload(sklearn_model_dir)
        send = partial(
            serving.endpoints.deploy_model,
            endpoint=serving.endpoint(),
            deployed_model=deployed,
            traffic_split={"0": 100},
        )
    assert by_floor.value.field == request_field

    with pytest.raises(exceptions.BadRequest) as by_api:
        send()
    [details] = by_api.value.details
    [violation] = details["fieldViolations"]
    assert violation["field"] == api_field


VPC = "projects/12345/global/networks/my-vpc"
PSC = {"enable_private_service_connect": True, "project_allowlist": ["test-proj"]}


@pytest.mark.parametrize(
    ("endpoint", "fragment"),
    [
        ({"network": "my-vpc"}, "projects/PROJECT_NUMBER/global/networks/NETWORK"),
        ({"network": VPC, "private_service_connect_config": PSC}, "not both"),
    ],
    ids=["network not a full name", "network and private service connect"],
)
def test_an_endpoint_vertex_refuses_is_refused_naming_the_network(serving, endpoint, fragment):
    new = Endpoint(display_name="e", **endpoint)
    with pytest.raises(InvalidFieldError) as by_floor:
        rules.check_endpoint(new)
    assert by_floor.value.field == "endpoint.network"

    with pytest.raises(exceptions.BadRequest) as by_api:
        serving.endpoints.create_endpoint(parent=PARENT, endpoint=new)
    [details] = by_api.value.details
    [violation] = details["fieldViolations"]
    assert violation["field"] == "endpoint.network" and fragment in by_api.value.message


@pytest.mark.parametrize(
    "endpoint", [{"network": VPC}, {"private_service_connect_config": PSC}], ids=["vpc", "psc"]
)
def test_an_endpoint_on_one_network_path_is_created(serving, endpoint):
    created = serving.endpoints.create_endpoint(
        parent=PARENT, endpoint=Endpoint(display_name="e", **endpoint)
    ).result(timeout=30)
    assert created.name.startswith("projects/")


@pytest.mark.parametrize(
    ("container", "api_field", "fragment"),
    [
        ({"grpc_ports": [{"container_port": 0}]}, "grpc_ports", "1 to 65535"),
        ({"grpc_ports": [{"container_port": 70000}]}, "grpc_ports", "1 to 65535"),
        ({"deployment_timeout": "7201s"}, "deployment_timeout", "at most 2 hours"),
        ({"deployment_timeout": "-1s"}, "deployment_timeout", "never negative"),
    ],
    ids=["grpc port 0", "grpc port 70000", "deployment timeout over 2 h", "negative timeout"],
)
def test_a_serving_container_vertex_refuses_is_refused_naming_the_field(
    serving, sklearn_model_dir, container, api_field, fragment
):
    model = Model(
        display_name="m",
        artifact_uri=str(sklearn_model_dir),
        container_spec={"image_uri": SKLEARN_IMAGE, **container},
    )
    with pytest.raises(InvalidFieldError) as by_floor:
        rules.check_model(model, EMULATOR)
    assert by_floor.value.field.startswith("model.containerSpec.")

    with pytest.raises(exceptions.BadRequest) as by_api:
        serving.models.upload_model(parent=PARENT, model=model)
    [details] = by_api.value.details
    [violation] = details["fieldViolations"]
    assert violation["field"] == f"model.container_spec.{api_field}"
    assert fragment in by_api.value.message


def test_a_two_hour_deployment_timeout_and_a_grpc_port_are_accepted(serving, sklearn_model_dir):
    op = serving.models.upload_model(
        parent=PARENT,
        model=Model(
            display_name="m",
            artifact_uri=str(sklearn_model_dir),
            container_spec={
                "image_uri": SKLEARN_IMAGE,
                "deployment_timeout": "7200s",
                "grpc_ports": [{"container_port": 8500}],
            },
        ),
    )
    # Accepted and kept: the model read back has both values (the edges Vertex AI allows).
    stored = serving.models.get_model(name=op.result(timeout=30).model)
    assert stored.container_spec.deployment_timeout.total_seconds() == 7200
    assert [p.container_port for p in stored.container_spec.grpc_ports] == [8500]
