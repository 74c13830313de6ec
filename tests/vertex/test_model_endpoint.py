"""The floor's Model/Endpoint/DeployedModel rules: each refusal names the request field."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from google.cloud.aiplatform_v1.types import DedicatedResources, DeployedModel, Endpoint, Model

from kfp_spot.vertex import EMULATOR, VERTEX_AI
from kfp_spot.vertex import model_endpoint as rules
from kfp_spot.vertex.values import INT32_MAX, InvalidFieldError

SKLEARN = "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-6:latest"


def _refused(check, *args, **kwargs) -> InvalidFieldError:
    with pytest.raises(InvalidFieldError) as refused:
        check(*args, **kwargs)
    assert "\n" not in str(refused.value)
    return refused.value


@pytest.mark.parametrize(
    ("low", "high", "field", "says"),
    [
        (0, 0, rules.MIN_REPLICA_COUNT, "1..16"),
        (-1, 0, rules.MIN_REPLICA_COUNT, "1..16"),
        (17, 0, rules.MIN_REPLICA_COUNT, "as a process on this machine"),
        (True, 0, rules.MIN_REPLICA_COUNT, "1..16"),  # a bool is not a count
        (3, 2, rules.MAX_REPLICA_COUNT, "less than"),
        (2, -1, rules.MAX_REPLICA_COUNT, "0 (="),
        (2, INT32_MAX + 1, rules.MAX_REPLICA_COUNT, str(INT32_MAX)),
    ],
)
def test_replica_counts_on_the_emulator(low, high, field, says):
    refused = _refused(rules.check_replica_counts, low, high, EMULATOR)
    assert refused.field == field and says in refused.reason


def test_the_emulator_caps_replicas_below_vertex_and_says_why():
    assert EMULATOR.max_serving_replicas < VERTEX_AI.max_serving_replicas == INT32_MAX
    rules.check_replica_counts(17, 0, VERTEX_AI)  # Vertex AI: the project's quota judges it
    rules.check_replica_counts(16, 100, EMULATOR)  # max is recorded, min is what runs
    refused = _refused(rules.check_replica_counts, INT32_MAX + 1, 0, VERTEX_AI)
    assert refused.field == rules.MIN_REPLICA_COUNT


@pytest.mark.parametrize(
    ("split", "ids", "deploying", "says"),
    [
        ({"0": 99}, None, True, "adds up to 99"),
        ({"0": 101, "1": -1}, None, True, "not a percentage"),
        ({"0": 50, "x": 50}, None, True, "not a deployed model id"),
        ({"0": 50.0, "1": 50}, None, True, "not a percentage"),
        ({"0": True, "1": 99}, None, True, "not a percentage"),
        ({"0": 50, "7": 50}, {"8"}, True, "not a deployed model of this endpoint"),
        ({"0": 100}, {"8"}, False, "not a deployed model of this endpoint"),  # undeploy: no "0"
    ],
)
def test_traffic_splits(split, ids, deploying, says):
    refused = _refused(rules.check_traffic_split, split, ids, deploying=deploying)
    assert refused.field == "trafficSplit" and says in refused.reason


def test_good_traffic_splits_pass():
    rules.check_traffic_split({})  # leaves the endpoint's split as it is
    rules.check_traffic_split({"0": 100})
    rules.check_traffic_split({"0": 30, "1234567890123456789": 70})
    rules.check_traffic_split({"8": 100}, {"8", "9"}, deploying=False)


def _deployed(**resources) -> DeployedModel:
    res = {"machine_spec": {"machine_type": "n1-standard-4"}, "min_replica_count": 2}
    return DeployedModel(
        model="projects/local-project/locations/us-central1/models/1",
        dedicated_resources={**res, **resources},
    )


def test_deployed_models_name_the_field_of_the_request():
    rules.check_deployed_model(_deployed(), EMULATOR)
    tpu_pod = {"machine_type": "cloud-tpu", "accelerator_type": "TPU_V3", "accelerator_count": 32}
    refused = _refused(
        rules.check_deployed_model, _deployed(machine_spec=tpu_pod, spot=True), EMULATOR
    )
    assert refused.field == f"{rules.DEDICATED_RESOURCES}.machineSpec"
    assert f"{rules.DEDICATED_RESOURCES}.spot false" in refused.reason
    refused = _refused(
        rules.check_deployed_model, _deployed(machine_spec={"machine_type": "n9-huge"}), EMULATOR
    )
    assert refused.field == f"{rules.DEDICATED_RESOURCES}.machineSpec.machineType"
    # A machine type missing from kfp-spot's table is Vertex AI's to judge.
    rules.check_deployed_model(_deployed(machine_spec={"machine_type": "n9-huge"}), VERTEX_AI)
    automatic = DeployedModel(
        model="projects/local-project/locations/l/models/1", automatic_resources={}
    )
    assert _refused(rules.check_deployed_model, automatic, EMULATOR).field == (
        rules.DEDICATED_RESOURCES
    )
    assert _refused(rules.check_deployed_model, DeployedModel(), EMULATOR).field == (
        "deployedModel.model"
    )
    raw = DedicatedResources.pb(_deployed(min_replica_count=0).dedicated_resources)
    assert _refused(rules.check_dedicated_resources, raw, EMULATOR).field == rules.MIN_REPLICA_COUNT


def test_models_and_endpoints():
    good = Model(
        display_name="m", artifact_uri="gs://bucket/model", container_spec={"image_uri": SKLEARN}
    )
    assert rules.check_model(good, VERTEX_AI).name == "sklearn-cpu.1-6"
    local = Model(
        display_name="m", artifact_uri="/abs/model", container_spec={"image_uri": SKLEARN}
    )
    rules.check_model(local, EMULATOR)
    assert _refused(rules.check_model, local, VERTEX_AI).field == "model.artifactUri"
    cases = {
        "model.displayName": Model(display_name="x" * 129, container_spec={"image_uri": "c"}),
        "model.containerSpec.imageUri": Model(display_name="m"),
        "model.artifactUri": Model(display_name="m", container_spec={"image_uri": SKLEARN}),
        "model.labels.Team": Model(
            display_name="m", labels={"Team": "a"}, container_spec={"image_uri": "c"}
        ),
        # No process can be given a NUL: the replica's start raised and the deploy never ended.
        "model.containerSpec.env[1].value": Model(
            display_name="m",
            artifact_uri="/abs/model",
            container_spec={
                "image_uri": SKLEARN,
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "\x00"}],
            },
        ),
        "model.containerSpec.args[0]": Model(
            display_name="m",
            artifact_uri="/abs/model",
            container_spec={"image_uri": SKLEARN, "args": ["a\x00"]},
        ),
        "model.containerSpec.command[1]": Model(
            display_name="m",
            container_spec={"image_uri": "us-docker.pkg.dev/p/r/i:1", "command": ["s", "\x00"]},
        ),
        "model.containerSpec.predictRoute": Model(  # the replica's AIP_PREDICT_ROUTE
            display_name="m",
            artifact_uri="/abs/model",
            container_spec={"image_uri": SKLEARN, "predict_route": "/p\x00"},
        ),
    }
    for field, model in cases.items():
        assert _refused(rules.check_model, model, EMULATOR).field == field
    assert _refused(rules.check_endpoint, Endpoint()).field == "endpoint.displayName"
    assert _refused(rules.check_endpoint_id, "0abc").field == "endpointId"
    rules.check_endpoint_id("mine-1")
    rules.check_endpoint_id("123456789")
    for bad in ("1234567890", "mine-", "e" * 64):
        assert _refused(rules.check_endpoint_id, bad).field == "endpointId"


def test_a_model_directory_holds_exactly_one_file_its_image_loads():
    from kfp_spot import executors

    image = executors.prediction_image(SKLEARN)
    rules.check_artifact_files("gs://b/m", ["model.joblib", "README"], image)
    rules.check_artifact_files("gs://b/m", [], None)  # a custom container loads what it likes
    both = _refused(rules.check_artifact_files, "gs://b/m", ["model.joblib", "model.pkl"], image)
    assert both.field == "model.artifactUri" and "exactly one of" in both.reason
    many = _refused(rules.check_artifact_files, "gs://b/m", [f"f{i:03}" for i in range(500)], image)
    assert "and 490 more" in many.reason and len(many.reason) < 400


def test_the_rules_import_no_gapic_module_of_their_own():
    # What the floor's shared imports load is the floor's concern; this module adds no GAPIC import.
    tree = ast.parse(Path(rules.__file__).read_text())
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    ]
    assert imported and not [m for m in imported if m and m.startswith("google.")]


def test_a_model_id_takes_the_form_the_api_reference_states():
    for good in ("", "m", "_m", "my_model-1", "m" * 63):
        rules.check_model_id(good)
    for bad in ("M", "1m", "-m", "m.m", "m/m", "m" * 64):
        err = _refused(rules.check_model_id, bad)
        assert err.field == "modelId" and "[a-z0-9_-]" in err.reason


def test_a_deployed_model_id_is_digits():
    from kfp_spot.vertex.resource_ids import check_deployed_model_id

    for good in ("", "1", "0123456789"):
        check_deployed_model_id(good)
    for bad in ("abc", "12345678901", "-1"):
        assert _refused(check_deployed_model_id, bad).field == "deployedModel.id"
