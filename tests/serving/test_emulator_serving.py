"""The emulated Model, Endpoint and Prediction APIs, through the real GAPIC clients.

Most tests share one emulator (``shared``) and the ones that only read a scikit-learn Spot
deployment share that too (``spot_pair``): each replica that loads a scikit-learn model costs
about a CPU-second. A test that changes a deployment (preempts, undeploys) makes its own, of
``light_model_dir``; one that needs other emulator settings starts its own emulator.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import joblib
import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1.types import DeployedModel, Endpoint, Model

from kfp_spot.emulator import Emulator
from tests.serving.conftest import PARENT, Serving, X, make_serving, wait_for


def catalog_id(store, dm_id: str) -> str:
    """The ID of the model deployment ``dm_id`` serves."""
    dm = DeployedModel.pb()()
    dm.ParseFromString(store.deployment(dm_id).spec)
    return dm.model.rsplit("/", 1)[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:
        stat = handle.read()
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, env_cache: Path) -> Iterator[Serving]:
    """One emulator (1 s grace period) for this module's tests that need no setting of their own;
    each makes its own models and endpoints on it."""
    state = tmp_path_factory.mktemp("shared-emulator") / "emu"
    with Emulator(state, grace_period=1.0, env_cache_dir=env_cache) as emu:
        yield make_serving(emu)


@dataclass
class SpotPair:
    """A scikit-learn model deployed on two Spot replicas of ``shared``; no test changes it."""

    serving: Serving
    model: str
    endpoint: str
    dm_id: str


@pytest.fixture(scope="module")
def spot_pair(shared: Serving, sklearn_model_dir: Path) -> SpotPair:
    model = shared.upload(sklearn_model_dir)
    endpoint = shared.endpoint()
    return SpotPair(shared, model, endpoint, shared.deploy(model, endpoint, replicas=2))


def test_a_spot_deployment_answers_what_the_model_predicts(spot_pair, sklearn_model_dir):
    serving, model, endpoint, dm_id = (
        spot_pair.serving,
        spot_pair.model,
        spot_pair.endpoint,
        spot_pair.dm_id,
    )

    got = serving.predictions.predict(endpoint=endpoint, instances=X[:10].tolist())
    expected = joblib.load(sklearn_model_dir / "model.joblib").predict(X[:10])
    assert [int(p) for p in got.predictions] == expected.tolist()
    assert got.deployed_model_id == dm_id
    assert got.model == model

    described = serving.endpoints.get_endpoint(name=endpoint)
    (deployed,) = described.deployed_models
    assert deployed.dedicated_resources.spot is True
    assert deployed.status.available_replica_count == 2
    assert dict(described.traffic_split) == {dm_id: 100}
    assert serving.models.get_model(name=f"{model}@1").deployed_models[0].deployed_model_id == dm_id

    ledger = serving.emu.serving_ledger(endpoint)
    lives = sorted((r["replica"], r["life"], r["strategy"]) for r in ledger["lives"])
    assert lives == [(0, 1, "SPOT"), (1, 1, "SPOT")]
    assert 0 < ledger["total"]["spotCost"] < ledger["total"]["onDemandCost"]


def test_raw_predict_passes_the_body_and_names_the_deployed_model(spot_pair):
    endpoint, dm_id = spot_pair.endpoint, spot_pair.dm_id
    request = urllib.request.Request(
        f"{spot_pair.serving.emu.endpoint}/v1/{endpoint}:rawPredict",
        data=json.dumps({"instances": X[:3].tolist()}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        body = json.loads(response.read())
        assert response.headers["X-Vertex-AI-Deployed-Model-Id"] == dm_id
    assert set(body) == {"predictions"}  # the replica's own answer, untouched
    assert len(body["predictions"]) == 3


def test_a_preempted_replica_is_routed_around_unbilled_and_comes_back(shared, light_model_dir):
    serving = shared
    endpoint = serving.endpoint()
    dm_id = serving.deploy(serving.upload(light_model_dir), endpoint, replicas=2)
    before = {r["replica"]: r["pid"] for r in serving.emu.serving_replicas(endpoint, dm_id)}

    hit = serving.emu.preempt_replica(endpoint, dm_id, replica=0)
    assert hit == {"deployedModelId": dm_id, "replica": 0, "life": 1}
    answered = 0
    while serving.states(endpoint, dm_id)[0] != ("READY", 2):
        # Every request is answered while replica 0 stops and restarts: replica 1 serves.
        serving.predictions.predict(endpoint=endpoint, instances=X[:2].tolist())
        answered += 1
        assert answered < 5000, "replica 0 never came back"
    assert not _alive(before[0])  # the preempted process is gone (SIGTERM, grace, SIGKILL)

    lives = {(r["replica"], r["life"]): r for r in serving.emu.serving_ledger(endpoint)["lives"]}
    preempted = lives[(0, 1)]
    assert preempted["endReason"] == "PREEMPTED"
    assert lives[(0, 2)]["endReason"] is None  # its next life runs
    # Billing stopped at the preemption: the dead life's time is fixed, not still growing.
    again = serving.emu.serving_ledger(endpoint)["lives"]
    assert next(r for r in again if (r["replica"], r["life"]) == (0, 1)) == preempted


def test_one_replica_means_an_outage_while_it_is_preempted(tmp_path, env_cache, light_model_dir):
    with Emulator(
        tmp_path / "emu", grace_period=1.0, env_cache_dir=env_cache, serving_restart_delay=2.0
    ) as emu:
        serving = make_serving(emu)
        endpoint = serving.endpoint()
        dm_id = serving.deploy(serving.upload(light_model_dir), endpoint, replicas=1)
        serving.emu.preempt_replica(endpoint, dm_id)
        with pytest.raises(exceptions.ServiceUnavailable, match="minReplicaCount >= 2"):
            serving.predictions.predict(endpoint=endpoint, instances=X[:1].tolist())
        wait_for(lambda: serving.states(endpoint, dm_id) == [("READY", 2)], what="replica back")
        assert serving.predictions.predict(endpoint=endpoint, instances=X[:1].tolist())


def test_the_preemption_policy_reaches_spot_replicas_only(tmp_path, env_cache, light_model_dir):
    with Emulator(
        tmp_path / "emu", grace_period=1.0, env_cache_dir=env_cache, preempt_at=(0.3,)
    ) as emu:
        serving = make_serving(emu)
        model = serving.upload(light_model_dir)
        spot_ep, standard_ep = serving.endpoint(), serving.endpoint()
        spot = serving.deploy(model, spot_ep, replicas=1, spot=True)
        standard = serving.deploy(model, standard_ep, replicas=1, spot=False)
        # Life 1 of the Spot replica is preempted 0.3 s after it is ready; life 2 is not.
        wait_for(lambda: serving.states(spot_ep, spot) == [("READY", 2)], what="second life")
        reasons = [r["endReason"] for r in emu.serving_ledger(spot_ep)["lives"]]
        assert reasons == ["PREEMPTED", None]
        assert serving.states(standard_ep, standard) == [("READY", 1)]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(
                urllib.request.Request(
                    f"{emu.endpoint}/emulator/v1/{standard_ep}/deployedModels/{standard}:preempt",
                    data=b"{}",
                    method="POST",
                )
            )
        assert refused.value.code == 400
        assert "does not run on Spot" in refused.value.read().decode()


def test_undeploy_stops_the_replicas_and_frees_the_endpoint(shared, light_model_dir):
    serving = shared
    model = serving.upload(light_model_dir)
    endpoint = serving.endpoint()
    dm_id = serving.deploy(model, endpoint, replicas=2)
    pids = [r["pid"] for r in serving.emu.serving_replicas(endpoint, dm_id)]
    with pytest.raises(exceptions.BadRequest, match="undeploy"):
        serving.endpoints.delete_endpoint(name=endpoint)
    with pytest.raises(exceptions.BadRequest, match="undeploy it before deleting"):
        serving.models.delete_model(name=model)

    serving.endpoints.undeploy_model(endpoint=endpoint, deployed_model_id=dm_id).result(timeout=60)
    assert not any(_alive(pid) for pid in pids)
    described = serving.endpoints.get_endpoint(name=endpoint)
    assert not described.deployed_models and not described.traffic_split
    assert {r["endReason"] for r in serving.emu.serving_ledger(endpoint)["lives"]} == {"UNDEPLOYED"}
    with pytest.raises(exceptions.BadRequest, match="no deployed model"):
        serving.predictions.predict(endpoint=endpoint, instances=X[:1].tolist())
    serving.endpoints.delete_endpoint(name=endpoint).result(timeout=30)
    serving.models.delete_model(name=model).result(timeout=30)
    with pytest.raises(exceptions.NotFound):
        serving.endpoints.get_endpoint(name=endpoint)


def test_a_cancelled_deploy_leaves_no_replica(shared, slow_model_dir):
    serving = shared
    endpoint = serving.endpoint()
    op = serving.deploy_op(serving.upload(slow_model_dir), endpoint, replicas=1)
    wait_for(lambda: serving.emu.serving_ledger(endpoint)["lives"], what="a replica starting")
    # google-api-core's Operation.cancel() cannot build a REST cancel for aiplatform's URLs
    # (KeyError 'body'); the client's own cancel_operation is what callers use.
    serving.endpoints.cancel_operation(request={"name": op.operation.name})
    with pytest.raises(exceptions.GoogleAPICallError, match="CANCELLED"):
        op.result(timeout=60)
    assert not serving.endpoints.get_endpoint(name=endpoint).deployed_models
    (life,) = serving.emu.serving_ledger(endpoint)["lives"]
    assert life["endReason"] == "CANCELLED"


def test_a_model_being_deployed_cannot_be_deleted(shared, slow_model_dir):
    # Its delete was accepted: the deploy went on serving a model that was gone, and after an
    # emulator restart the deployment's thread died on the missing model.
    serving = shared
    model = serving.upload(slow_model_dir)
    endpoint = serving.endpoint()
    op = serving.deploy_op(model, endpoint, replicas=1)
    with pytest.raises(exceptions.BadRequest, match=r"being deployed to .*endpoints/"):
        serving.models.delete_model(name=model)
    serving.endpoints.cancel_operation(request={"name": op.operation.name})
    with pytest.raises(exceptions.GoogleAPICallError, match="CANCELLED"):
        op.result(timeout=60)
    serving.models.delete_model(name=model).result(timeout=30)  # nothing deploys it now


def test_a_model_that_cannot_load_fails_the_deploy_with_its_log(shared, tmp_path):
    serving = shared
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "model.joblib").write_bytes(b"not a model")
    endpoint = serving.endpoint()
    op = serving.deploy_op(serving.upload(tmp_path / "bad"), endpoint, replicas=1)
    with pytest.raises(exceptions.GoogleAPICallError, match="cannot load the model"):
        op.result(timeout=60)
    assert not serving.endpoints.get_endpoint(name=endpoint).deployed_models


def test_a_stored_model_the_upload_now_refuses_fails_its_deploy_naming_the_field(
    shared, light_model_dir
):
    # A model stored by an older emulator, before a NUL in an env value was refused on upload:
    # its replica's start raised in the pool's thread and the deploy never ended.
    serving = shared
    model = serving.upload(light_model_dir)
    store = serving.emu.service.serving.store
    model_id = model.rsplit("/", 1)[1]
    old = Model.pb()()
    old.ParseFromString(store.get("models", model_id).spec)
    old.container_spec.env.add(name="OLD", value="a\x00b")
    store.update_spec("models", model_id, old.SerializeToString())
    endpoint = serving.endpoint()
    op = serving.deploy_op(model, endpoint, replicas=1)
    with pytest.raises(exceptions.BadRequest, match=r"model\.containerSpec\.env\[0\]\.value"):
        op.result(timeout=60)
    assert not serving.endpoints.get_endpoint(name=endpoint).deployed_models
    assert not serving.emu.serving_ledger(endpoint)["lives"]  # no replica was started


def test_deployments_come_back_when_the_emulator_restarts(tmp_path, env_cache, light_model_dir):
    with Emulator(tmp_path / "emu", grace_period=1.0, env_cache_dir=env_cache) as emu:
        serving = make_serving(emu)
        endpoint = serving.endpoint()
        dm_id = serving.deploy(serving.upload(light_model_dir), endpoint, replicas=1)
    with Emulator(tmp_path / "emu", grace_period=1.0, env_cache_dir=env_cache) as emu:
        serving = make_serving(emu)
        wait_for(lambda: serving.states(endpoint, dm_id) == [("READY", 2)], what="back")
        assert serving.predictions.predict(endpoint=endpoint, instances=X[:1].tolist())
        reasons = [r["endReason"] for r in emu.serving_ledger(endpoint)["lives"]]
        assert reasons == ["EMULATOR_RESTARTED", None]


def test_a_deployed_model_that_cannot_come_back_stays_deployed_until_undeployed(
    tmp_path, env_cache, light_model_dir
):
    # It was ended instead: the endpoint's traffic split named a model it no longer had, and
    # its successful deploy operation was rewritten into an error.
    with Emulator(tmp_path / "emu", grace_period=1.0, env_cache_dir=env_cache) as emu:
        serving = make_serving(emu)
        model = serving.upload(light_model_dir)
        endpoint = serving.endpoint()
        dm_id = serving.deploy(model, endpoint, replicas=1)
        store = emu.service.serving.store
        model_id = model.rsplit("/", 1)[1]
        stored = Model.pb()()
        stored.ParseFromString(store.get("models", model_id).spec)
        stored.container_spec.env.add(name="OLD", value="a\x00b")  # as an older emulator kept it
        store.update_spec("models", model_id, stored.SerializeToString())
        other = serving.deploy(serving.upload(light_model_dir), serving.endpoint(), replicas=1)
        other_endpoint = f"{PARENT}/endpoints/{store.deployment(other).endpoint_id}"
        # Deleted under it (an older emulator accepted deleting a model being deployed).
        store.mark_deleted("models", catalog_id(store, other))
    with Emulator(tmp_path / "emu", grace_period=1.0, env_cache_dir=env_cache) as emu:
        serving = make_serving(emu)
        (replica,) = wait_for(
            lambda: [r for r in emu.serving_replicas(endpoint, dm_id) if r["state"] == "FAILED"],
            what="the replica reported FAILED",
        )
        assert "model.containerSpec.env[0].value" in replica["error"]
        (gone,) = wait_for(
            lambda: [
                r for r in emu.serving_replicas(other_endpoint, other) if r["state"] == "FAILED"
            ],
            what="the replica of the model deleted under it reported FAILED",
        )
        assert "model is missing" in gone["error"] and "does not exist" in gone["error"]
        got = serving.endpoints.get_endpoint(name=endpoint)
        assert [d.id for d in got.deployed_models] == [dm_id]
        assert dict(got.traffic_split) == {dm_id: 100}
        with pytest.raises(exceptions.ServiceUnavailable, match="could not be brought back"):
            serving.predictions.predict(endpoint=endpoint, instances=X[:1].tolist())
        serving.endpoints.undeploy_model(endpoint=endpoint, deployed_model_id=dm_id).result(30)
        assert not serving.endpoints.get_endpoint(name=endpoint).deployed_models


@pytest.mark.parametrize(
    ("change", "status", "field"),
    [
        ({"min_replica_count": 0}, exceptions.BadRequest, "min_replica_count"),
        ({"max_replica_count": 1, "min_replica_count": 2}, exceptions.BadRequest, "max_replica"),
        (
            {
                "machine_spec": {
                    "machine_type": "cloud-tpu",
                    "accelerator_type": "TPU_V3",
                    "accelerator_count": 32,
                }
            },
            exceptions.BadRequest,
            "TPU Pods",
        ),
        ({"machine_spec": {"machine_type": "n1-weird-7"}}, exceptions.BadRequest, "n1-weird-7"),
    ],
)
def test_deploy_requests_vertex_refuses_are_refused(
    shared, sklearn_model_dir, change, status, field
):
    serving = shared
    resources = {
        "machine_spec": {"machine_type": "n1-standard-4"},
        "min_replica_count": 1,
        "spot": True,
        **change,
    }
    with pytest.raises(status, match=field):
        serving.endpoints.deploy_model(
            endpoint=serving.endpoint(),
            deployed_model=DeployedModel(
                model=serving.upload(sklearn_model_dir), dedicated_resources=resources
            ),
            traffic_split={"0": 100},
        )


def test_upload_and_traffic_rules(shared, spot_pair, sklearn_model_dir, tmp_path):
    serving = shared
    with pytest.raises(exceptions.BadRequest, match="not a prebuilt prediction image"):
        serving.upload(
            sklearn_model_dir, "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.7-7:latest"
        )
    (tmp_path / "empty").mkdir()
    with pytest.raises(exceptions.GoogleAPICallError, match="exactly one of"):
        serving.upload(tmp_path / "empty")
    endpoint = serving.endpoint()
    with pytest.raises(exceptions.BadRequest, match="adds up to 60, not 100"):
        serving.endpoints.deploy_model(
            endpoint=endpoint,
            deployed_model=DeployedModel(
                model=serving.upload(sklearn_model_dir),
                dedicated_resources={
                    "machine_spec": {"machine_type": "n1-standard-4"},
                    "min_replica_count": 1,
                },
            ),
            traffic_split={"0": 60},
        )
    # A deployed scikit-learn model: the emulator refuses no instances, the replica 1 of 3 features.
    with pytest.raises(exceptions.BadRequest, match="non-empty list"):
        serving.predictions.predict(endpoint=spot_pair.endpoint, instances=[])
    with pytest.raises(exceptions.BadRequest, match="answered 400"):
        serving.predictions.predict(endpoint=spot_pair.endpoint, instances=[[1.0]])


def test_list_filters_by_label(shared):
    serving = shared
    for key in ("a", "b"):
        serving.endpoints.create_endpoint(
            parent=PARENT, endpoint=Endpoint(display_name=key, labels={"team": key})
        ).result(timeout=30)
    found = serving.endpoints.list_endpoints(
        request={"parent": PARENT, "filter": 'labels.team="b"'}
    )
    assert [e.display_name for e in found] == ["b"]
    with pytest.raises(exceptions.NotFound):
        serving.models.get_model(name=f"{PARENT}/models/123")
