"""The emulated Model, Endpoint and Prediction services of Vertex AI ``v1``, as one service.

:class:`ServingService` builds the parts and answers for them (the routes and the
``Emulator`` call it):

- ModelService (:mod:`.models`): ``models:upload`` (a long-running operation), get, list, delete.
- EndpointService (:mod:`.endpoints`): create (an operation), get, list, delete,
  ``:deployModel`` and ``:undeployModel`` (operations that finish once the replicas answer, or
  are gone: :mod:`.deployments`).
- PredictionService (:mod:`.prediction`): ``:predict`` and ``:rawPredict``, routed by the
  endpoint's traffic split to a deployed model and, in turn, to one of its ready replicas.
- Operations (here): ``GET .../operations/ID`` and ``:cancel`` (a cancelled deploy stops its
  replicas); the serving ledger (here): one row per replica life, with its cost.

Deployed models run as :class:`~kfp_spot.emulator.serving.pool.ReplicaPool` s; Spot replicas
are preempted on the emulator's policy and on request. Requests are refused with Vertex's status
codes as :class:`~kfp_spot.emulator.errors.ApiError`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.longrunning import operations_pb2

from kfp_spot.accounting import pricing
from kfp_spot.emulator import billing
from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.pagetokens import PageTokens
from kfp_spot.emulator.policy import PreemptionPolicy
from kfp_spot.emulator.serving import store as st
from kfp_spot.emulator.serving.catalog import Catalog, ListQuery, canonical
from kfp_spot.emulator.serving.deployments import Deployments
from kfp_spot.emulator.serving.endpoints import EndpointApi
from kfp_spot.emulator.serving.models import ModelApi
from kfp_spot.emulator.serving.pool import PoolSettings
from kfp_spot.emulator.serving.prediction import PredictionApi


class ServingService:
    """Models, endpoints, deployed models and their replicas (see the module docstring).

    Args:
        root: the serving part of the state dir (``serving.sqlite``, logs, model copies).
        policy: automatic preemptions of Spot replicas (the emulator's, shared with training).
        grace_period: SIGTERM -> SIGKILL for a preempted or undeployed replica.
        shutdown_grace: the same when the emulator stops.
        env_cache_dir: where the serving environments are cached.
        container_runtime: the container runtime probe (custom serving containers need one).
        page_tokens: signs list pages' tokens (the state dir's secret, as the CustomJob list's).
        restart_delay: seconds before a preempted replica comes back (a new Spot VM).
    """

    def __init__(
        self,
        root: Path,
        *,
        policy: PreemptionPolicy,
        grace_period: float,
        shutdown_grace: float,
        env_cache_dir: Path,
        container_runtime: Callable[[], str | None],
        page_tokens: PageTokens,
        restart_delay: float = 0.0,
    ) -> None:
        self.root = Path(root)
        self.store = st.ServingStore(self.root / "serving.sqlite")
        self.env_cache_dir = env_cache_dir
        self.container_runtime = container_runtime
        self.shutdown_grace = shutdown_grace
        self.settings = PoolSettings(
            store=self.store,
            policy=policy,
            grace_period=grace_period,
            shutdown_grace=shutdown_grace,
            restart_delay=restart_delay,
            log_dir=self.root / "logs",
        )
        self.catalog = Catalog(self.store, page_tokens)
        self.deployments = Deployments(
            self.catalog,
            self.settings,
            root=self.root,
            env_cache_dir=env_cache_dir,
            container_runtime=container_runtime,
        )
        self.models = ModelApi(self.catalog)
        self.endpoints = EndpointApi(self.catalog, self.deployments, container_runtime)
        self.predictions = PredictionApi(
            self.catalog, self.deployments.pool, self.deployments.failure
        )

    # lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Close lives a dead emulator left open, stop its orphans, bring deployments back."""
        self.deployments.start()

    def stop(self) -> None:
        """Stop every replica (lives end EMULATOR_RESTARTED); deployments resume next start."""
        self.deployments.stop()
        self.store.close()

    # ModelService -----------------------------------------------------------------------------

    def upload_model(self, parent: str, body: Any) -> Any:
        """``models:upload``: validate, store the Model; a done operation (or its error)."""
        return self.models.upload_model(parent, body)

    def get_model(self, name: str) -> Any:
        """The Model ``name`` (``@1`` or ``@`` one of its version aliases accepted)."""
        return self.models.get_model(name)

    def list_models(self, parent: str, query: ListQuery | None = None) -> tuple[list[Any], str]:
        """A page of the parent's models (newest first unless ordered) and the next page token."""
        return self.models.list_models(parent, query or ListQuery())

    def delete_model(self, name: str) -> Any:
        """Delete a model that no endpoint serves; a done operation."""
        return self.models.delete_model(name)

    # EndpointService --------------------------------------------------------------------------

    def create_endpoint(self, parent: str, body: Any, endpoint_id: str = "") -> Any:
        """Create an endpoint; a done operation whose response is the Endpoint."""
        return self.endpoints.create_endpoint(parent, body, endpoint_id)

    def get_endpoint(self, name: str) -> Any:
        """The Endpoint ``name`` with its deployed models and traffic split."""
        return self.endpoints.get_endpoint(name)

    def list_endpoints(self, parent: str, query: ListQuery | None = None) -> tuple[list[Any], str]:
        """A page of the parent's endpoints (newest first unless ordered) and the next token."""
        return self.endpoints.list_endpoints(parent, query or ListQuery())

    def delete_endpoint(self, name: str) -> Any:
        """Delete an endpoint without deployed models; a done operation."""
        return self.endpoints.delete_endpoint(name)

    def deploy_model(self, endpoint_name: str, body: Any) -> Any:
        """``:deployModel``: validate, start the replicas; an operation done once they answer."""
        return self.endpoints.deploy_model(endpoint_name, body)

    def undeploy_model(self, endpoint_name: str, body: Any) -> Any:
        """``:undeployModel``: an operation done once the deployed model's replicas are gone."""
        return self.endpoints.undeploy_model(endpoint_name, body)

    # operations -------------------------------------------------------------------------------

    def get_operation(self, name: str) -> Any:
        """The operation ``name`` (``.../operations/ID``)."""
        found = self.store.operation(canonical(name))
        if found is None:
            raise ApiError("NOT_FOUND", f"Operation {name} does not exist.", "name")
        op = operations_pb2.Operation()
        op.ParseFromString(found[0])
        return op

    def cancel_operation(self, name: str) -> dict[str, Any]:
        """Ask a running operation to stop: a deploy stops its replicas and ends CANCELLED."""
        name = canonical(name)
        self.get_operation(name)
        if not self.store.request_cancel(name):
            return {}  # done already: cancelling a finished operation is a no-op, as on Vertex
        for dep in self.store.deployments(states=(st.DEPLOYING,)):
            if dep.operation == name:
                threading.Thread(
                    target=self.deployments.cancel, args=(dep.id,), daemon=True
                ).start()
        return {}

    # PredictionService ------------------------------------------------------------------------

    def predict(self, endpoint_name: str, raw: bytes) -> dict[str, Any]:
        """``:predict``: ``{"instances": [...]}`` -> ``{"predictions": [...], ...}``."""
        return self.predictions.predict(endpoint_name, raw)

    def raw_predict(
        self, endpoint_name: str, raw: bytes, content_type: str
    ) -> tuple[int, bytes, dict[str, str]]:
        """``:rawPredict``: the body goes to a replica as is; its answer comes back as is."""
        return self.predictions.raw_predict(endpoint_name, raw, content_type)

    # emulator extensions ----------------------------------------------------------------------

    def preempt_replica(
        self, endpoint_name: str, dm_id: str, replica: int | None = None
    ) -> dict[str, Any]:
        """Preempt one replica of a Spot deployed model (the given one, else a ready one)."""
        return self.deployments.preempt_replica(endpoint_name, dm_id, replica)

    def replica_status(self, endpoint_name: str, dm_id: str) -> list[dict[str, Any]]:
        """The replicas of a deployed model right now (PREPARING before their processes)."""
        return self.deployments.replica_status(endpoint_name, dm_id)

    def endpoint_names(self) -> list[str]:
        """Every endpoint of every project, oldest first."""
        return [f"{r.parent}/endpoints/{r.id}" for r in reversed(self.store.rows("endpoints"))]

    def ledger(self, endpoint_name: str) -> dict[str, Any]:
        """The serving ledger of an endpoint: one row per replica life, and totals."""
        row = self.catalog.endpoint_row(endpoint_name)
        now = time.time()
        rows = [_life_row(lv, now) for lv in self.store.lives(row.id)]
        total = {
            key: round(sum(r[key] for r in rows), 6)
            for key in ("billableSeconds", "spotCost", "onDemandCost", "cost", "savings")
        }
        total["preemptions"] = sum(r["endReason"] == "PREEMPTED" for r in rows)
        return {"lives": rows, "total": total}


def _life_row(lv: st.LifeRow, now: float) -> dict[str, Any]:
    """One serving ledger line (camelCase): a replica life and what it cost."""
    stop = lv.end_time if lv.end_time is not None else now
    billable = max(0.0, stop - lv.start_time)
    rates = pricing.Rates(lv.spot_usd_per_hour, lv.on_demand_usd_per_hour)
    return {
        "deployedModelId": lv.deployed_model_id,
        "replica": lv.replica,
        "life": lv.life,
        "startTime": billing.rfc3339(lv.start_time),
        "readyTime": billing.rfc3339(lv.ready_time),
        "endTime": billing.rfc3339(lv.end_time),
        "endReason": lv.end_reason,
        "billableSeconds": round(billable, 3),
        "machineType": lv.machine_type,
        "strategy": lv.strategy,
        **pricing.attempt_cost(billable, rates, lv.strategy).to_ledger(),
    }
