"""Deployed models as running replica pools: deploy, undeploy, cancel, recover, preempt.

:class:`Deployments` owns the :class:`~kfp_spot.emulator.serving.pool.ReplicaPool` of every
deployed model and moves a deployment through its states (``DEPLOYING`` -> ``DEPLOYED`` ->
``UNDEPLOYING`` -> ``GONE``), finishing the deploy or undeploy operation in the same
transaction as the endpoint's new traffic split. The API modules validate requests and call it.

A deployed model whose replicas cannot be brought back after an emulator restart (its stored
model now refused, its model server failing to start) stays on its endpoint, as a DeployedModel
stays until it is undeployed, with no replica: its deploy operation keeps its answer, its
replicas are reported ``FAILED`` with the reason (:meth:`Deployments.failure`), and it can be
undeployed. Ending it instead left the endpoint's traffic split naming a model it no longer
had, which no undeploy of the others could then satisfy.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.cloud.aiplatform_v1.types.endpoint import Endpoint
from google.cloud.aiplatform_v1.types.endpoint_service import (
    DeployModelResponse,
    UndeployModelResponse,
)
from google.longrunning import operations_pb2

from kfp_spot.accounting import pricing
from kfp_spot.emulator import billing, orphans
from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.serving import store as st
from kfp_spot.emulator.serving.catalog import (
    CODE_CANCELLED,
    CODE_INVALID_ARGUMENT,
    Catalog,
    stamp,
)
from kfp_spot.emulator.serving.launch import replica_launch
from kfp_spot.emulator.serving.pool import PoolIdentity, PoolSettings, ReplicaPool
from kfp_spot.vertex.values import InvalidFieldError

log = logging.getLogger(__name__)


class Deployments:
    """The replica pools of the deployed models (see the module docstring).

    Args:
        catalog: the serving resources (store, lookups and views).
        settings: what every pool shares (store, preemption policy, grace periods, log dir).
        root: the serving part of the state dir (model copies go under ``models/``).
        env_cache_dir: where the serving environments are cached.
        container_runtime: the container runtime probe (custom serving containers need one).
    """

    def __init__(
        self,
        catalog: Catalog,
        settings: PoolSettings,
        *,
        root: Path,
        env_cache_dir: Path,
        container_runtime: Callable[[], str | None],
    ) -> None:
        self.catalog = catalog
        self.store = catalog.store
        self.settings = settings
        self.root = root
        self.env_cache_dir = env_cache_dir
        self.container_runtime = container_runtime
        self._pools: dict[str, ReplicaPool] = {}
        self._cancelling: set[str] = set()  # deploys whose cancel is stopping their replicas
        self._failures: dict[str, str] = {}  # deployed models that could not be brought back
        self._lock = threading.RLock()
        self._stopping = False

    # lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Close lives a dead emulator left open, stop its orphans, bring deployments back."""
        open_lives = self.store.open_lives()
        orphans.stop_orphans(
            [{"pid": lv.pid, "token": lv.token} for lv in open_lives if lv.pid and lv.token],
            self.settings.shutdown_grace,
        )
        for lv in open_lives:
            self.store.update_life(
                lv.deployed_model_id,
                lv.replica,
                lv.life,
                end_time=lv.last_seen or lv.start_time,
                end_reason="EMULATOR_RESTARTED",
            )
        for dep in self.store.deployments():
            if dep.state == st.UNDEPLOYING:
                self.finish_undeploy(dep.id)
            else:
                self.launch(dep.id)

    def stop(self) -> None:
        """Stop every replica (lives end EMULATOR_RESTARTED); deployments resume next start."""
        with self._lock:
            self._stopping = True
            pools = list(self._pools.values())
        for pool in pools:
            pool.stop("EMULATOR_RESTARTED", self.settings.shutdown_grace)

    def pool(self, dm_id: str) -> ReplicaPool | None:
        """The replicas of deployed model ``dm_id`` (None while they are being prepared)."""
        return self._pools.get(dm_id)

    def failure(self, dm_id: str) -> str | None:
        """Why deployed model ``dm_id`` has no replica since the emulator started (None: it has)."""
        return self._failures.get(dm_id)

    def ready_count(self, dm_id: str) -> int:
        """How many replicas of ``dm_id`` answer now."""
        pool = self._pools.get(dm_id)
        return pool.ready_count() if pool else 0

    # deploy and undeploy ----------------------------------------------------------------------

    def launch(self, dm_id: str) -> None:
        """Start (or restart) the replicas of a deployment, in the background."""
        threading.Thread(target=self._launch_now, args=(dm_id,), name=f"deploy-{dm_id}").start()

    def _launch_now(self, dm_id: str) -> None:
        dep = self.store.deployment(dm_id)
        assert dep is not None
        dm = self.catalog.dm_pb(dep)
        try:
            model = self.catalog.model_pb(self.catalog.model_row(dm.model))
        except ApiError as err:  # gone from the store (deleting a deployed model is refused)
            self._deploy_failed(dm_id, f"The deployed model's model is missing: {err.message}")
            return
        try:
            launch = replica_launch(
                dep,
                dm,
                model,
                local_copy=self.root / "models" / dep.id,
                env_cache_dir=self.env_cache_dir,
                container_runtime=self.container_runtime,
            )
        except InvalidFieldError as err:  # stored by an older emulator, refused on upload now
            self._deploy_failed(
                dm_id,
                f"The model {dm.model} breaks a rule of its upload: {err}; upload it again with "
                "that field corrected and deploy the new model",
            )
            return
        except (OSError, ValueError, RuntimeError) as err:
            self._deploy_failed(dm_id, f"The deployed model could not be prepared: {err}")
            return
        res = dm.dedicated_resources
        ms = res.machine_spec
        # Each replica is one VM of the machine spec, billed for its own lives.
        rates = pricing.hourly_rates(
            [
                pricing.Pool(
                    ms.machine_type,
                    billing.accelerator_name(ms.accelerator_type),
                    ms.accelerator_count,
                )
            ]
        )
        identity = PoolIdentity(
            deployed_model_id=dm_id,
            endpoint_id=dep.endpoint_id,
            seq=dep.seq,
            replica_count=res.min_replica_count,
            machine_type=ms.machine_type,
            spot=res.spot,
            spot_usd_per_hour=rates.spot_usd_per_hour,
            on_demand_usd_per_hour=rates.on_demand_usd_per_hour,
        )
        settings = dataclasses.replace(self.settings, log_dir=self.settings.log_dir / dm_id)
        pool = ReplicaPool(
            settings,
            identity,
            launch,
            on_ready=lambda: self._deploy_ready(dm_id),
            on_failed=lambda message: self._deploy_failed(dm_id, message),
        )
        with self._lock:
            if self._stopping or dm_id in self._cancelling:
                return
            now = self.store.deployment(dm_id)
            if now is None or now.state == st.GONE:  # cancelled while it was being prepared
                return
            self._pools[dm_id] = pool
        pool.start()

    def _deploy_ready(self, dm_id: str) -> None:
        dep = self.store.deployment(dm_id)
        assert dep is not None
        if dep.state != st.DEPLOYING:
            return  # brought back after an emulator restart: already on its endpoint
        body, _done, cancel = self.store.operation(dep.operation) or (b"", True, False)
        if cancel:
            # Called back on the pool's own thread, which must go on to stop the replicas: the
            # cancel waits for them on a thread of its own, then ends the operation.
            threading.Thread(target=self.cancel, args=(dm_id,), daemon=True).start()
            return
        row = self.store.get("endpoints", dep.endpoint_id)
        assert row is not None
        endpoint = Endpoint.pb()()
        endpoint.ParseFromString(row.spec)
        split = json.loads(dep.traffic_split)
        if split:
            endpoint.traffic_split.clear()
            endpoint.traffic_split.update({k: int(v) for k, v in split.items()})
        stamp(endpoint.update_time, time.time())
        op = operations_pb2.Operation()
        op.ParseFromString(body)
        op.done = True
        op.response.Pack(DeployModelResponse.pb()(deployed_model=self.catalog.dm_pb(dep)))
        self._settle(dm_id, st.DEPLOYED, op, endpoint, row.id)
        log.info("deployed model %s is serving on endpoint %s", dm_id, dep.endpoint_id)

    def _deploy_failed(self, dm_id: str, message: str, code: int = CODE_INVALID_ARGUMENT) -> None:
        dep = self.store.deployment(dm_id)
        assert dep is not None
        with self._lock:
            pool = self._pools.pop(dm_id, None)
            if dep.state == st.DEPLOYED:  # brought back after a restart: it stays deployed
                self._failures[dm_id] = message
        if pool is not None:
            threading.Thread(target=pool.stop, args=("FAILED", 0.0), daemon=True).start()
        if dep.state == st.DEPLOYED:
            log.warning(
                "deployed model %s could not be brought back (it has no replica until it is "
                "undeployed): %s",
                dm_id,
                message,
            )
            return
        op = self._operation(dep)
        op.done = True
        op.error.code = code
        op.error.message = message
        self._settle(dm_id, st.GONE, op)
        log.warning("deploying model %s failed: %s", dm_id, message)

    def cancel(self, dm_id: str) -> None:
        """Stop a deploy in progress: its replicas stop, then its operation ends CANCELLED.

        The operation is done only once no replica runs, so a caller waiting on it never sees
        a cancelled deploy with a replica (and its bill) still going. A second cancel of the
        same deploy (the API's and the ready callback's) leaves the ending to the first.
        """
        with self._lock:
            if dm_id in self._cancelling:
                return
            self._cancelling.add(dm_id)
            pool = self._pools.pop(dm_id, None)
        try:
            if pool is not None:
                pool.stop("CANCELLED")
            self._deploy_failed(dm_id, "CANCELLED", CODE_CANCELLED)
        finally:
            with self._lock:
                self._cancelling.discard(dm_id)

    def finish_undeploy(self, dm_id: str) -> None:
        """Stop an undeploying model's replicas, then apply its endpoint's remaining split."""
        with self._lock:
            pool = self._pools.pop(dm_id, None)
            self._failures.pop(dm_id, None)
        if pool is not None:
            pool.stop("UNDEPLOYED")
        dep = self.store.deployment(dm_id)
        assert dep is not None
        row = self.store.get("endpoints", dep.endpoint_id)
        assert row is not None
        endpoint = Endpoint.pb()()
        endpoint.ParseFromString(row.spec)
        endpoint.traffic_split.clear()
        endpoint.traffic_split.update({k: int(v) for k, v in json.loads(dep.traffic_split).items()})
        stamp(endpoint.update_time, time.time())
        op = self._operation(dep)
        op.done = True
        op.response.Pack(UndeployModelResponse.pb()())
        self._settle(dm_id, st.GONE, op, endpoint, row.id)

    def _operation(self, dep: st.DeploymentRow) -> Any:
        """The stored operation of ``dep``'s deploy or undeploy (empty if it is gone)."""
        found = self.store.operation(dep.operation)
        op = operations_pb2.Operation()
        if found:
            op.ParseFromString(found[0])
        return op

    def _settle(
        self, dm_id: str, state: str, op: Any, endpoint: Any = None, endpoint_id: str = ""
    ) -> None:
        """In one transaction: the endpoint's new spec (if any), the deployment's state, op done."""
        with self.store.transaction() as db:
            if endpoint is not None:
                db.execute(
                    "UPDATE endpoints SET spec = ? WHERE id = ?",
                    (endpoint.SerializeToString(), endpoint_id),
                )
            db.execute("UPDATE deployments SET state = ? WHERE id = ?", (state, dm_id))
            db.execute(
                "UPDATE operations SET body = ?, done = 1 WHERE name = ?",
                (op.SerializeToString(), op.name),
            )

    # emulator extensions ----------------------------------------------------------------------

    def _live(self, endpoint_name: str, dm_id: str) -> tuple[st.DeploymentRow, ReplicaPool | None]:
        row = self.catalog.endpoint_row(endpoint_name)
        dep = self.store.deployment(dm_id)
        if dep is None or dep.endpoint_id != row.id or dep.state == st.GONE:
            raise ApiError(
                "NOT_FOUND", f"Endpoint {endpoint_name} has no deployed model {dm_id!r}", "name"
            )
        return dep, self._pools.get(dm_id)

    def preempt_replica(
        self, endpoint_name: str, dm_id: str, replica: int | None = None
    ) -> dict[str, Any]:
        """Preempt one replica of a Spot deployed model (the given one, else a ready one)."""
        dep, pool = self._live(endpoint_name, dm_id)
        if not self.catalog.dm_pb(dep).dedicated_resources.spot:
            raise ApiError(
                "FAILED_PRECONDITION",
                f"deployed model {dm_id} does not run on Spot VMs (dedicatedResources.spot is "
                "false); only Spot replicas are preempted",
                "dedicated_resources.spot",
            )
        if pool is None:
            raise ApiError(
                "FAILED_PRECONDITION", f"the replicas of {dm_id} are being prepared", "replica"
            )
        try:
            which = pool.preempt(replica)
        except LookupError as err:
            raise ApiError("FAILED_PRECONDITION", str(err), "replica") from None
        return {"deployedModelId": dm_id, **which}

    def replica_status(self, endpoint_name: str, dm_id: str) -> list[dict[str, Any]]:
        """The replicas of a deployed model right now.

        PREPARING before their processes; FAILED, with an ``error``, when they could not be
        brought back after an emulator restart.
        """
        dep, pool = self._live(endpoint_name, dm_id)
        if pool is not None:
            return pool.status()
        count = self.catalog.dm_pb(dep).dedicated_resources.min_replica_count
        failure = self._failures.get(dm_id)
        state = {"state": "FAILED", "error": failure} if failure else {"state": "PREPARING"}
        return [{"replica": i, "life": 0, **state, "port": None, "pid": None} for i in range(count)]
