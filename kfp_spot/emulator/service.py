"""The emulator's service: the CustomJob API wired to its state dir, scheduler and lifecycle.

This module only assembles the parts (one concern each) and starts and stops them:

- ``statedir``: the state dir's lock and layout;   - ``store``: the SQLite state;
- ``lifecycle``: every job and attempt transition;  - ``scheduler``: capacity and admission;
- ``runner``: one attempt's replicas;               - ``billing``: rates and the ledger rows;
- ``policy``: automatic preemptions;                - ``containers``: the container runtime probe;
- ``jobs``: the API methods;                        - ``errors``: API errors and HTTP statuses;
- ``names``: project numbers and ids;               - ``alarms``: FLEX_START wait deadlines;
- ``spot_capacity``: Spot VMs per region and machine type;
- ``serving``: the Model, Endpoint and Prediction APIs and their serving replicas.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kfp_spot.emulator.alarms import Alarms
from kfp_spot.emulator.containers import RuntimeProbe
from kfp_spot.emulator.jobs import CustomJobApi
from kfp_spot.emulator.lifecycle import Lifecycle
from kfp_spot.emulator.pagetokens import PageTokens
from kfp_spot.emulator.policy import PreemptionPolicy
from kfp_spot.emulator.scheduler import DEFAULT_STOCKOUT_SECONDS, Capacity, Scheduler
from kfp_spot.emulator.serving.api import ServingService
from kfp_spot.emulator.spot_capacity import SpotCapacity
from kfp_spot.emulator.statedir import StateDir
from kfp_spot.emulator.store import Store


class Service(CustomJobApi):
    """The CustomJob API (Vertex AI's JobService) plus its scheduler, running attempts, recovery.

    Args:
        state_dir: where the SQLite state, logs and working directories live.
        grace_period: seconds between SIGTERM and SIGKILL when an attempt is stopped.
        policy: automatic preemptions of Spot attempts.
        capacity: simulated VMs per machine type (an int for every type, or a mapping with an
            optional ``"*"`` default); None for unlimited.
        env_cache_dir: where package environments are cached (default ``state_dir/envs``).
        shutdown_grace: the grace period used when the emulator itself stops (at most
            ``grace_period``).
        serving_restart_delay: seconds before a preempted serving replica comes back.
        spot_capacity: which regions and machine types have Spot VMs (default: all, always).
        stockout_seconds: how long a Spot job waits for Spot VMs its region has none of before
            it FAILS with code 8.

    Raises:
        StateDirBusyError: another emulator uses ``state_dir``.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        grace_period: float = 30.0,
        policy: PreemptionPolicy | None = None,
        capacity: int | Mapping[str, int] | None = None,
        env_cache_dir: Path | None = None,
        shutdown_grace: float = 10.0,
        serving_restart_delay: float = 0.0,
        spot_capacity: SpotCapacity | None = None,
        stockout_seconds: float = DEFAULT_STOCKOUT_SECONDS,
    ) -> None:
        state = StateDir(Path(state_dir))
        try:
            state.forget_endpoint()  # until this emulator serves, no endpoint is its
            store = Store(state.database)
        except BaseException:
            state.release()
            raise
        self.grace_period = grace_period
        self.shutdown_grace = min(shutdown_grace, grace_period)
        self.policy = policy or PreemptionPolicy()
        self.env_cache_dir = Path(env_cache_dir) if env_cache_dir else state.path / "envs"
        lifecycle = Lifecycle(store, shutdown_grace=self.shutdown_grace)
        self.probe = probe = RuntimeProbe()
        limits = Capacity(capacity, spot_capacity)
        self.scheduler = Scheduler(
            lifecycle,
            limits,
            self.policy,
            state_dir=state,
            env_cache_dir=self.env_cache_dir,
            grace_period=grace_period,
            shutdown_grace=self.shutdown_grace,
            container_runtime=probe,
            stockout_seconds=stockout_seconds,
        )
        self.alarms = Alarms(self.scheduler.poke)
        super().__init__(
            store, lifecycle, limits, state, probe, self.scheduler.poke, alarm=self.alarms.at
        )
        self.serving = ServingService(
            state.path / "serving",
            policy=self.policy,
            grace_period=grace_period,
            shutdown_grace=self.shutdown_grace,
            env_cache_dir=self.env_cache_dir,
            container_runtime=probe,
            page_tokens=PageTokens(store.secret()),
            restart_delay=serving_restart_delay,
        )

    def start(self) -> None:
        """Recover jobs a previous emulator left running, then start scheduling."""
        self.probe.start()  # before any job asks for it: see RuntimeProbe
        self.lifecycle.recover()
        for when, job_id in self.flex_start_deadlines():  # waits that outlived the last run
            self.alarms.at(when, job_id)
        self.alarms.start()
        self.scheduler.start()
        self.serving.start()

    def stop(self) -> None:
        """Stop scheduling; running attempts end as EMULATOR_RESTARTED and resume next start."""
        self.alarms.stop()
        self.scheduler.stop()
        self.serving.stop()
        self.store.close()
        self.state_dir.release()
