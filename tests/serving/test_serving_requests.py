"""The serving APIs behind the emulator's hardened HTTP server: names, errors, limits, envs.

The models uploaded and deployed here are ``light_model_dir``'s (no scikit-learn import in a
replica): these tests read what the APIs answer, not what a model predicts.
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import joblib
import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1.types import DeployedModel, Endpoint, Model
from google.protobuf import field_mask_pb2

from kfp_spot import executors
from kfp_spot.emulator import Emulator, names
from kfp_spot.emulator.server import MAX_BODY
from kfp_spot.emulator.serving.catalog import (
    DEPLOYED_MODEL_OUTPUT_ONLY,
    ENDPOINT_OUTPUT_ONLY,
    MODEL_OUTPUT_ONLY,
)
from kfp_spot.emulator.serving.env import serving_python
from tests.serving.conftest import PARENT, SKLEARN_IMAGE, X, Y, make_serving, wait_for

NUMBER = names.project_number("local-project")
NUMBERED = f"projects/{NUMBER}/locations/us-central1"


def _call(emu: Any, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(f"{emu.endpoint}{path}", data=body, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        assert err.headers["Content-Type"].startswith("application/json")
        return err.code, json.loads(err.read())


def test_names_carry_the_project_number_and_either_spelling_reaches_them(serving, light_model_dir):
    model = serving.upload(light_model_dir)  # uploaded to projects/local-project/...
    endpoint = serving.endpoint()
    assert model.startswith(f"{NUMBERED}/models/") and endpoint.startswith(f"{NUMBERED}/endpoints/")
    by_id = model.replace(NUMBERED, PARENT)
    assert serving.models.get_model(name=by_id).name == model
    assert [m.name for m in serving.models.list_models(parent=NUMBERED)] == [model]
    assert [e.name for e in serving.endpoints.list_endpoints(parent=PARENT)] == [endpoint]
    # Deploy by the ID-written names; the operation and the DeployedModel answer with numbers.
    op = serving.endpoints.deploy_model(
        endpoint=endpoint.replace(NUMBERED, PARENT),
        deployed_model=DeployedModel(
            model=by_id,
            dedicated_resources={
                "machine_spec": {"machine_type": "n1-standard-4"},
                "min_replica_count": 1,
                "spot": True,
            },
        ),
        traffic_split={"0": 100},
    )
    assert op.operation.name.startswith(f"{endpoint}/operations/")
    deployed = op.result(timeout=120).deployed_model
    assert deployed.model == model
    assert int(deployed.id) <= names.INT64_MAX and len(deployed.id) == 19
    # The operation can be fetched by either spelling, also where the REST client looks (/ui/).
    by_id_op = op.operation.name.replace(NUMBERED, PARENT)
    status, fetched = _call(serving.emu, "GET", f"/ui/{by_id_op}")
    assert status == 200 and fetched["done"] is True and fetched["name"] == op.operation.name


def test_serving_requests_get_the_servers_json_errors(serving, light_model_dir):
    emu = serving.emu
    status, answer = _call(emu, "GET", f"/v1/{PARENT}/endpoints?colour=x")
    assert status == 400 and "colour" in answer["error"]["message"]
    assert (
        "accepted: filter, page_size, page_token, order_by, read_mask"
        in (answer["error"]["message"])
    )
    status, answer = _call(emu, "GET", f"/v1/{PARENT}/endpoints?pageSize=ten")
    assert status == 400 and answer["error"]["message"] == (
        "Invalid value at 'page_size' (TYPE_INT32), \"ten\""
    )
    endpoint = serving.endpoint()
    status, answer = _call(emu, "GET", f"/v1/{endpoint}:predict")
    assert status == 404 and "it takes POST" in answer["error"]["message"]
    status, answer = _call(emu, "GET", f"/v1/{PARENT}/nothing")
    assert status == 404 and "endpoints" in answer["error"]["message"]
    # A body the JSON mapping refuses names the exact field, as Vertex does.
    upload = {"model": {"displayName": "m", "containerSpec": {"imageUri": "x"}, "bogus": 1}}
    status, answer = _call(emu, "POST", f"/v1/{PARENT}/models:upload", json.dumps(upload).encode())
    assert status == 400
    assert answer["error"]["message"] == (
        "Invalid JSON payload received. Unknown name \"bogus\" at 'model': Cannot find field."
    )
    assert answer["error"]["details"][0]["fieldViolations"][0]["field"] == "model"
    # Several unknown names are each named, in the body's order; one at the top of a body that
    # is the whole request names no field (Google's front end answers so).
    upload = {
        "model": {"displayName": "m", "containerSpec": {"imageUri": "x", "colour": 2}, "bogus": 1},
        "extra": 3,
    }
    status, answer = _call(emu, "POST", f"/v1/{PARENT}/models:upload", json.dumps(upload).encode())
    unknown = "Invalid JSON payload received. Unknown name"
    assert status == 400 and answer["error"]["details"][0]["fieldViolations"] == [
        {
            "field": "model.container_spec",
            "description": f"{unknown} \"colour\" at 'model.container_spec': Cannot find field.",
        },
        {"field": "model", "description": f"{unknown} \"bogus\" at 'model': Cannot find field."},
        {"description": f'{unknown} "extra": Cannot find field.'},
    ]
    assert answer["error"]["message"].splitlines() == [
        v["description"] for v in answer["error"]["details"][0]["fieldViolations"]
    ]
    # A NUL in a local artifactUri was a 500: listing the directory raised ValueError.
    upload = {
        "model": {
            "displayName": "m",
            "artifactUri": "/tmp/mo\u0000del",
            "containerSpec": {"imageUri": SKLEARN_IMAGE},
        }
    }
    status, answer = _call(emu, "POST", f"/v1/{PARENT}/models:upload", json.dumps(upload).encode())
    assert status == 400 and "holds a NUL character" in answer["error"]["message"]
    assert answer["error"]["details"][0]["fieldViolations"][0]["field"] == "model.artifact_uri"
    # One in its container's env was taken, and its deploy never ended (the replica's start
    # raised in the deployment's thread).
    upload["model"].update(
        artifactUri="/tmp/model",
        containerSpec={"imageUri": SKLEARN_IMAGE, "env": [{"name": "A", "value": "\u0000"}]},
    )
    status, answer = _call(emu, "POST", f"/v1/{PARENT}/models:upload", json.dumps(upload).encode())
    assert status == 400 and "holds a NUL character" in answer["error"]["message"]
    assert answer["error"]["details"][0]["fieldViolations"][0]["field"] == (
        "model.container_spec.env[0].value"
    )
    status, answer = _call(emu, "POST", f"/v1/{endpoint}:predict", b'{"instances": [[1]], "x": 1}')
    assert status == 400 and 'Unknown name "x"' in answer["error"]["message"]
    status, answer = _call(emu, "POST", f"/v1/{endpoint}:predict", b'{"instances": NaN}')
    assert status == 400 and "NaN is not JSON" in answer["error"]["message"]


def test_a_body_over_the_limit_is_refused_before_it_is_read(serving):
    endpoint = serving.endpoint()
    address = urlsplit(serving.emu.endpoint)
    conn = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    try:
        conn.putrequest("POST", f"/v1/{endpoint}:rawPredict")
        conn.putheader("Content-Type", "application/octet-stream")
        conn.putheader("Content-Length", str(MAX_BODY + 1))
        conn.endheaders()  # nothing of the body is sent
        response = conn.getresponse()
        assert response.status == 400
        assert "accepts at most" in json.loads(response.read())["error"]["message"]
    finally:
        conn.close()


def test_a_tpu_pod_on_spot_names_the_deployed_models_spot_field(serving, light_model_dir):
    tpu_pod = {"machine_type": "cloud-tpu", "accelerator_type": "TPU_V3", "accelerator_count": 32}
    with pytest.raises(exceptions.BadRequest) as refused:
        serving.endpoints.deploy_model(
            endpoint=serving.endpoint(),
            deployed_model=DeployedModel(
                model=serving.upload(light_model_dir),
                dedicated_resources={"machine_spec": tpu_pod, "min_replica_count": 1, "spot": True},
            ),
            traffic_split={"0": 100},
        )
    assert "TPU Pods" in refused.value.message
    assert "deployedModel.dedicatedResources.spot false" in refused.value.message
    assert "scheduling.strategy" not in refused.value.message


def _importable(python: str, *modules: str) -> dict[str, bool]:
    """Which of ``modules`` ``python`` imports, tried in turn in one process per environment
    (a process each would import scikit-learn's dependencies again: a CPU-second each time)."""
    code = (
        "import importlib, json, sys\n"
        "found = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except BaseException:\n"
        "        found[name] = False\n"
        "    else:\n"
        "        found[name] = True\n"
        "print(json.dumps(found))\n"
    )
    # Run from / so that this checkout's own directory is not on the path.
    done = subprocess.run(
        [python, "-c", code, *modules], capture_output=True, text=True, cwd="/", check=True
    )
    found: dict[str, bool] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_a_serving_environment_holds_what_its_prediction_image_holds(env_cache):
    image = executors.prediction_image(executors.DEFAULT_PREDICTION_IMAGE)
    assert image is not None and image.name == "sklearn-cpu.1-6"
    sklearn = str(serving_python(image, env_cache))
    absent = ("xgboost", "kfp_spot", "kfp", "google.cloud.aiplatform")
    found = _importable(sklearn, "sklearn", "joblib", *absent)
    assert found["sklearn"] and found["joblib"]
    for name in absent:
        assert not found[name], name
    assert serving_python(image, env_cache) == Path(sklearn)  # made once, then reused
    pytest.importorskip("xgboost")  # installed with the dev extras
    xgb = str(serving_python(executors.PREDICTION_IMAGES["xgboost-cpu.2-1"], env_cache))
    found = _importable(xgb, "xgboost", "sklearn", "kfp_spot")
    assert found["xgboost"] and found["sklearn"]
    assert not found["kfp_spot"]


def test_a_model_needing_a_library_its_image_lacks_does_not_load(serving, tmp_path):
    xgboost = pytest.importorskip("xgboost")
    joblib.dump(xgboost.XGBClassifier(n_estimators=3).fit(X, Y), tmp_path / "model.joblib")
    endpoint = serving.endpoint()
    on_sklearn = serving.deploy_op(serving.upload(tmp_path), endpoint, replicas=1)
    with pytest.raises(exceptions.GoogleAPICallError, match="xgboost"):
        on_sklearn.result(timeout=120)
    xgb_image = executors.PREDICTION_IMAGES["xgboost-cpu.2-1"].uri
    serving.deploy(serving.upload(tmp_path, xgb_image), endpoint, replicas=1)
    got = serving.predictions.predict(endpoint=endpoint, instances=X[:5].tolist())
    assert len(got.predictions) == 5


def test_endpoint_ids_and_bodies_of_create_are_checked(serving):
    with pytest.raises(
        exceptions.BadRequest, match=r"endpoint\.display_name; Message: is required"
    ):
        serving.endpoints.create_endpoint(parent=PARENT, endpoint=Endpoint())
    created = serving.endpoints.create_endpoint(
        parent=PARENT, endpoint=Endpoint(display_name="mine"), endpoint_id="mine-1"
    ).result(timeout=30)
    assert created.name == f"{NUMBERED}/endpoints/mine-1"
    # Vertex AI: a numeric ID has at most 9 digits; a named one ends with a letter or digit.
    for bad in ("1234567890", "mine-", "0123", "e" * 64):
        with pytest.raises(exceptions.BadRequest, match=r"endpoint_id; Message: .*1-9 digits"):
            serving.endpoints.create_endpoint(
                parent=PARENT, endpoint=Endpoint(display_name="e"), endpoint_id=bad
            )
    numbered = serving.endpoints.create_endpoint(
        parent=PARENT, endpoint=Endpoint(display_name="e"), endpoint_id="123456789"
    ).result(timeout=30)
    assert numbered.name == f"{NUMBERED}/endpoints/123456789"
    with pytest.raises(exceptions.Conflict):
        serving.endpoints.create_endpoint(
            parent=PARENT, endpoint=Endpoint(display_name="again"), endpoint_id="mine-1"
        ).result(timeout=30)


def test_list_pages_carry_opaque_tokens_tied_to_their_query(serving, light_model_dir):
    """Model and Endpoint lists page as the CustomJob list does: signed tokens, one query each."""
    models = [serving.upload(light_model_dir) for _ in range(3)]
    serving.endpoint()  # the other collection is not empty either
    # The real client follows nextPageToken through every page.
    listed = [
        m.name for m in serving.models.list_models(request={"parent": PARENT, "page_size": 1})
    ]
    assert sorted(listed) == sorted(models)
    emu = serving.emu
    status, first = _call(emu, "GET", f"/v1/{PARENT}/models?pageSize=2")
    assert status == 200 and len(first["models"]) == 2
    token = first["nextPageToken"]
    status, rest = _call(emu, "GET", f"/v1/{PARENT}/models?pageSize=2&pageToken={token}")
    assert status == 200 and len(rest["models"]) == 1 and "nextPageToken" not in rest
    refusals = {
        "edited": f"/v1/{PARENT}/models?pageToken={token[:-2]}AA",
        "an offset built by hand": f"/v1/{PARENT}/models?pageToken=Mg==",  # base64 of "2"
        "of another collection": f"/v1/{PARENT}/endpoints?pageToken={token}",
        "of another filter": f'/v1/{PARENT}/models?filter=display_name="m"&pageToken={token}',
    }
    for what, path in refusals.items():
        status, answer = _call(emu, "GET", path.replace('"', "%22").replace(" ", "%20"))
        assert status == 400, (what, answer)
        assert answer["error"]["status"] == "INVALID_ARGUMENT", (what, answer)
        violations = answer["error"]["details"][0]["fieldViolations"]
        assert violations[0]["field"] == "page_token", (what, answer)


def test_a_model_id_vertex_refuses_is_refused_on_upload(serving, light_model_dir):
    """UploadModelRequest.modelId: up to 63 of [a-z0-9_-], not starting with a digit or '-'."""

    def upload(model_id: str) -> str:
        model = {
            "display_name": "m",
            "artifact_uri": str(light_model_dir),
            "container_spec": {"image_uri": SKLEARN_IMAGE},
        }
        request = {"parent": PARENT, "model": model, "model_id": model_id}
        return serving.models.upload_model(request=request).result(timeout=30).model

    for bad in ("Bad_ID", "1model", "-model", "my.model", "a/b", "m" * 64):
        with pytest.raises(exceptions.BadRequest, match=r"model_id; Message: .*\[a-z0-9_-\]"):
            upload(bad)
    assert upload("my_model-1") == f"{NUMBERED}/models/my_model-1"
    assert upload("_m" + "m" * 61).endswith("/models/_m" + "m" * 61)


def test_a_deployed_model_id_vertex_refuses_is_refused_on_deploy(serving, light_model_dir):
    """DeployedModel.id: "1-10 characters, and valid characters are /[0-9]/"."""
    model, endpoint = serving.upload(light_model_dir), serving.endpoint()
    for bad in ("abc", "12345678901", "-1"):
        with pytest.raises(exceptions.BadRequest, match=r"deployed_model\.id; Message: .*1-10"):
            serving.endpoints.deploy_model(
                endpoint=endpoint,
                deployed_model=DeployedModel(
                    id=bad,
                    model=model,
                    dedicated_resources={
                        "machine_spec": {"machine_type": "n1-standard-4"},
                        "min_replica_count": 1,
                    },
                ),
                traffic_split={"0": 100},
            )


def test_version_aliases_are_checked_and_kept_as_vertex_keeps_them(serving, light_model_dir):
    """Model.versionAliases: [a-z][a-zA-Z0-9-]{0,126}[a-z0-9]; the first version is ``default``."""

    def upload(aliases: list[str]) -> str:
        model = {
            "display_name": "m",
            "artifact_uri": str(light_model_dir),
            "container_spec": {"image_uri": SKLEARN_IMAGE},
            "version_aliases": aliases,
        }
        return serving.models.upload_model(parent=PARENT, model=model).result(timeout=30).model

    bad = ["Bad Alias", "Prod", "1abc", "a", "prod-", "prod_1", "-x", "v" * 129]
    for alias in bad:
        with pytest.raises(exceptions.BadRequest, match=r"version_aliases\[0\]; Message: .*a-z"):
            upload([alias])
    with pytest.raises(exceptions.BadRequest, match=r"version_aliases\[1\]; Message: 'x y'"):
        upload(["prod", "x y"])

    name = upload(["prod", "canary-B2", "v" + "X" * 126 + "1"])
    model = serving.models.get_model(name=name)
    assert list(model.version_aliases) == ["prod", "canary-B2", "v" + "X" * 126 + "1", "default"]
    for ref in ("prod", "canary-B2", "default", "1"):
        assert serving.models.get_model(name=f"{name}@{ref}").name == name
    with pytest.raises(exceptions.NotFound):
        serving.models.get_model(name=f"{name}@staging")
    # ``default`` may be sent (the SDK's is_default_version does): kept once.
    assert list(serving.models.get_model(name=upload(["default"])).version_aliases) == ["default"]
    assert list(serving.models.get_model(name=upload([])).version_aliases) == ["default"]


def test_autoscaling_metric_specs_are_checked_on_deploy(serving, light_model_dir):
    """A utilization target is a percentage 1..100 (0: the default); a metric is named, once."""
    model, endpoint = serving.upload(light_model_dir), serving.endpoint()
    cpu = "aiplatform.googleapis.com/prediction/online/cpu/utilization"
    duty = "aiplatform.googleapis.com/prediction/online/accelerator/duty_cycle"

    def deploy(specs: list[dict[str, Any]]) -> Any:
        return serving.endpoints.deploy_model(
            endpoint=endpoint,
            deployed_model=DeployedModel(
                model=model,
                dedicated_resources={
                    "machine_spec": {"machine_type": "n1-standard-4"},
                    "min_replica_count": 1,
                    "autoscaling_metric_specs": specs,
                },
            ),
            traffic_split={"0": 100},
        )

    specs = "deployed_model.dedicated_resources.autoscaling_metric_specs"
    for bad, where in (
        ([{"metric_name": cpu, "target": 150}], r"\[0\]\.target; Message: is 150.*1\.\.100"),
        ([{"metric_name": duty, "target": -5}], r"\[0\]\.target; Message: is -5.*1\.\.100"),
        ([{"target": 80}], r"\[0\]\.metric_name; Message: is required"),
        (
            [{"metric_name": cpu, "target": 70}, {"metric_name": cpu, "target": 80}],
            r"\[1\]\.metric_name; Message: .*twice",
        ),
    ):
        with pytest.raises(exceptions.BadRequest, match=rf"{specs}{where}"):
            deploy(bad)
    # A count (requests per minute, as the SDK sends it) is no percentage; 0 is the default.
    request_count = "aiplatform.googleapis.com/prediction/online/request_count"
    done = deploy([{"metric_name": cpu}, {"metric_name": request_count, "target": 600}])
    assert done.result(timeout=120).deployed_model.id


def test_an_emulator_on_a_relative_state_dir_serves_its_models(
    tmp_path, env_cache, light_model_dir, monkeypatch
):
    # `kfp-spot emulator start`'s default state dir is relative (kfp-spot-runs/emulator): the
    # replica, started in a working directory of its own, read AIP_STORAGE_URI relative to it
    # and every deploy of a prebuilt image failed ("the model directory ... contains nothing").
    monkeypatch.chdir(tmp_path)
    with Emulator("state", grace_period=1.0, env_cache_dir=env_cache) as emu:
        serving = make_serving(emu)
        endpoint = serving.endpoint()
        serving.deploy(serving.upload(light_model_dir), endpoint, replicas=1)
        got = serving.predictions.predict(endpoint=endpoint, instances=X[:2].tolist())
    assert list(got.predictions) == pytest.approx(X[:2].sum(axis=1).tolist())


# projects.locations.models.list and endpoints.list: each its own filter fields (no state, no
# create_time, no wildcard; the resource's ID), orderBy and readMask, as the API reference has
# them: https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.models/list,
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.endpoints/list


def test_the_sdks_model_list_orders_on_the_service_and_refuses_what_vertex_does(
    serving, light_model_dir
):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform

    for name in ("b", "c", "a"):
        serving.models.upload_model(
            parent=PARENT,
            model=Model(
                display_name=name,
                artifact_uri=str(light_model_dir),
                container_spec={"image_uri": SKLEARN_IMAGE},
            ),
        ).result(timeout=30)
    aiplatform.init(
        project="local-project",
        location="us-central1",
        api_endpoint=serving.emu.endpoint,
        api_transport="rest",
        credentials=AnonymousCredentials(),
    )
    # Model.list sends order_by to the service (it was "Unknown name orderBy").
    assert [m.display_name for m in aiplatform.Model.list(order_by="display_name")] == [
        "a",
        "b",
        "c",
    ]
    newest = [m.display_name for m in aiplatform.Model.list(order_by="create_time desc")]
    assert newest == ["a", "c", "b"]
    [model] = aiplatform.Model.list(filter='displayName="c"')
    assert [m.display_name for m in aiplatform.Model.list(filter=f"model={model.name}")] == ["c"]
    # customJobs.list's fields are not the Model list's: they were accepted (and matched nothing).
    for text, refused in [
        ('state="JOB_STATE_SUCCEEDED"', "cannot filter on 'state' in models.list"),
        ('create_time>"2020-01-01T00:00:00Z"', "cannot filter on 'create_time'"),
        ('display_name:"a*"', "display_name takes = or != in models.list"),
    ]:
        with pytest.raises(exceptions.BadRequest, match=re.escape(refused)):
            aiplatform.Model.list(filter=text)
    with pytest.raises(exceptions.BadRequest, match="not a field to order by"):
        aiplatform.Model.list(order_by="name")


def test_endpoint_lists_take_read_mask_order_by_and_the_endpoint_id(serving):
    made = [
        serving.endpoints.create_endpoint(
            parent=PARENT, endpoint=Endpoint(display_name=name, labels={"team": name})
        ).result(timeout=30)
        for name in ("y", "x", "z")
    ]
    listed = serving.endpoints.list_endpoints(
        request={
            "parent": PARENT,
            "order_by": "display_name desc",
            "read_mask": field_mask_pb2.FieldMask(paths=["display_name"]),
        }
    )
    assert [e.display_name for e in listed] == ["z", "y", "x"]
    assert all(not e.name and not e.labels for e in listed)  # only what the mask names
    endpoint_id = made[1].name.rsplit("/", 1)[1]
    found = serving.endpoints.list_endpoints(
        request={"parent": PARENT, "filter": f"endpoint={endpoint_id}"}
    )
    assert [e.display_name for e in found] == ["x"]
    status, answer = _call(serving.emu, "GET", f"/v1/{PARENT}/endpoints?readMask=jobSpec")
    assert status == 400 and "an Endpoint does not have" in answer["error"]["message"]
    assert answer["error"]["details"][0]["fieldViolations"][0]["field"] == "read_mask"
    # A token is tied to its order as to its filter: another order is another query.
    status, first = _call(
        serving.emu, "GET", f"/v1/{PARENT}/endpoints?pageSize=1&orderBy=create_time"
    )
    assert status == 200 and [e["displayName"] for e in first["endpoints"]] == ["y"]
    token = first["nextPageToken"]
    status, answer = _call(
        serving.emu, "GET", f"/v1/{PARENT}/endpoints?pageSize=1&pageToken={token}"
    )
    assert status == 400 and "another query" in answer["error"]["message"]
    status, second = _call(
        serving.emu,
        "GET",
        f"/v1/{PARENT}/endpoints?pageSize=1&orderBy=create_time&pageToken={token}",
    )
    assert status == 200 and [e["displayName"] for e in second["endpoints"]] == ["x"]


# Output-only fields are ignored in a request ("including the field in a request does nothing":
# OUTPUT_ONLY in google/api/field_behavior.proto; the API reference marks each one, e.g.
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.models#Model).


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        (Model, MODEL_OUTPUT_ONLY),
        (Endpoint, ENDPOINT_OUTPUT_ONLY),
        (DeployedModel, DEPLOYED_MODEL_OUTPUT_ONLY),
    ],
)
def test_the_output_only_lists_name_fields_of_their_messages(message, fields):
    for path in fields:
        descriptor = message.pb().DESCRIPTOR
        for name in path.split("."):
            assert name in descriptor.fields_by_name, path
            descriptor = descriptor.fields_by_name[name].message_type


def test_output_only_fields_of_a_request_are_not_stored_or_answered(serving, light_model_dir):
    emu = serving.emu
    upload = {
        "model": {
            "displayName": "m",
            "artifactUri": str(light_model_dir),
            "containerSpec": {"imageUri": SKLEARN_IMAGE},
            # a deployment that does not exist, and where the model came from
            "deployedModels": [{"endpoint": f"{PARENT}/endpoints/1", "deployedModelId": "2"}],
            "trainingPipeline": f"{PARENT}/trainingPipelines/3",
            "supportedExportFormats": [{"id": "tf-saved-model"}],
            "modelSourceInfo": {"sourceType": "CUSTOM"},
            "versionId": "7",
        }
    }
    status, op = _call(emu, "POST", f"/v1/{PARENT}/models:upload", json.dumps(upload).encode())
    assert status == 200 and op["done"] and "error" not in op
    model = serving.models.get_model(name=op["response"]["model"])
    assert not model.deployed_models and not model.training_pipeline
    assert not model.supported_export_formats and not model.model_source_info.source_type
    assert model.version_id == "1"
    body = {"displayName": "e", "dedicatedEndpointDns": "evil.example.com", "satisfiesPzs": True}
    status, op = _call(emu, "POST", f"/v1/{PARENT}/endpoints", json.dumps(body).encode())
    assert status == 200 and op["done"]
    endpoint = serving.endpoints.get_endpoint(name=op["response"]["name"])
    assert not endpoint.dedicated_endpoint_dns and not endpoint.satisfies_pzs
    psc = {
        "enablePrivateServiceConnect": True,
        "projectAllowlist": ["local-project"],
        "serviceAttachment": "projects/p/regions/us-central1/serviceAttachments/s",
    }
    body = {"displayName": "psc", "privateServiceConnectConfig": psc}
    status, op = _call(emu, "POST", f"/v1/{PARENT}/endpoints", json.dumps(body).encode())
    assert status == 200 and op["done"], op
    config = serving.endpoints.get_endpoint(name=op["response"]["name"])
    assert config.private_service_connect_config.enable_private_service_connect
    assert not config.private_service_connect_config.service_attachment
    deploy = {
        "deployedModel": {
            "model": model.name,
            "dedicatedResources": {
                "machineSpec": {"machineType": "n1-standard-4"},
                "minReplicaCount": 1,
            },
            "privateEndpoints": {"predictHttpUri": "http://elsewhere/predict"},
            "status": {"message": "sent by the client", "availableReplicaCount": 5},
        },
        "trafficSplit": {"0": 100},
    }
    status, op = _call(emu, "POST", f"/v1/{endpoint.name}:deployModel", json.dumps(deploy).encode())
    assert status == 200
    (deployed,) = wait_for(
        lambda: serving.endpoints.get_endpoint(name=endpoint.name).deployed_models,
        what="the deployed model",
    )
    assert not deployed.private_endpoints.predict_http_uri and not deployed.status.message
    assert deployed.status.available_replica_count <= 1
