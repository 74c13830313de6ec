"""Durable state of the emulated Model, Endpoint and Prediction services (``serving.sqlite``).

Models, endpoints, deployments (one row per DeployedModel, with its state), long-running
operations and the serving ledger (one row per life of a serving replica) live in one SQLite file
beside the CustomJob state; every change is committed before the emulator acts on it, so a new
emulator on the same state dir finds every endpoint and brings its deployed models back.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kfp_spot.emulator.sqlite import Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS models (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    parent TEXT NOT NULL,
    spec BLOB NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS endpoints (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    parent TEXT NOT NULL,
    spec BLOB NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS deployments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    endpoint_id TEXT NOT NULL,
    spec BLOB NOT NULL,
    state TEXT NOT NULL,
    operation TEXT NOT NULL,
    traffic_split TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS operations (
    name TEXT PRIMARY KEY,
    body BLOB NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS replica_lives (
    deployed_model_id TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    replica INTEGER NOT NULL,
    life INTEGER NOT NULL,
    start_time REAL NOT NULL,
    ready_time REAL,
    end_time REAL,
    last_seen REAL,
    end_reason TEXT,
    machine_type TEXT NOT NULL,
    strategy TEXT NOT NULL,
    spot_usd_per_hour REAL NOT NULL,
    on_demand_usd_per_hour REAL NOT NULL,
    pid INTEGER,
    token TEXT,
    PRIMARY KEY (deployed_model_id, replica, life)
);
"""

# States of a deployment (a DeployedModel and its replicas).
DEPLOYING = "DEPLOYING"  # the deploy operation runs: replicas start; not on the endpoint yet
DEPLOYED = "DEPLOYED"  # on the endpoint, serving
UNDEPLOYING = "UNDEPLOYING"  # the undeploy operation runs: replicas stop
GONE = "GONE"  # undeployed, cancelled or failed
LIVE_STATES = (DEPLOYING, DEPLOYED, UNDEPLOYING)


@dataclass
class Row:
    """A models or endpoints row: the resource's protobuf bytes and where it lives."""

    seq: int
    id: str
    parent: str
    spec: bytes
    deleted: int


@dataclass
class DeploymentRow:
    """One DeployedModel: its spec, state and the operation that deploys (or undeploys) it."""

    seq: int
    id: str
    endpoint_id: str
    spec: bytes
    state: str
    operation: str
    traffic_split: str


@dataclass
class LifeRow:
    """One life of a serving replica (process start to stop): a line of the serving ledger."""

    deployed_model_id: str
    endpoint_id: str
    replica: int
    life: int
    start_time: float
    ready_time: float | None
    end_time: float | None
    last_seen: float | None
    end_reason: str | None
    machine_type: str
    strategy: str
    spot_usd_per_hour: float
    on_demand_usd_per_hour: float
    pid: int | None
    token: str | None


class ServingStore(Database):
    """Thread-safe access to ``serving.sqlite``."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, SCHEMA)

    # models and endpoints ---------------------------------------------------------------------

    def insert(self, table: str, row_id: str, parent: str, spec: bytes) -> bool:
        """Insert a model or endpoint; False when the id is taken."""
        assert table in ("models", "endpoints")
        try:
            with self.transaction() as db:
                db.execute(
                    f"INSERT INTO {table} (id, parent, spec) VALUES (?, ?, ?)",
                    (row_id, parent, spec),
                )
        except sqlite3.IntegrityError:
            return False
        return True

    def get(self, table: str, row_id: str) -> Row | None:
        """The model or endpoint with this id (deleted ones too, marked)."""
        assert table in ("models", "endpoints")
        rows = self._all(f"SELECT * FROM {table} WHERE id = ?", (row_id,))
        return Row(**dict(rows[0])) if rows else None

    def rows(self, table: str, parent: str | None = None) -> list[Row]:
        """Models or endpoints not deleted, newest first (of ``parent`` when given)."""
        assert table in ("models", "endpoints")
        sql, args = f"SELECT * FROM {table} WHERE deleted = 0", tuple[str, ...]()
        if parent is not None:
            sql, args = sql + " AND parent = ?", (parent,)
        return [Row(**dict(r)) for r in self._all(sql + " ORDER BY seq DESC", args)]

    def update_spec(self, table: str, row_id: str, spec: bytes) -> None:
        """Replace the stored protobuf of a model or endpoint."""
        assert table in ("models", "endpoints")
        with self.transaction() as db:
            db.execute(f"UPDATE {table} SET spec = ? WHERE id = ?", (spec, row_id))

    def mark_deleted(self, table: str, row_id: str) -> None:
        """Delete a model or endpoint (kept, marked, so its name is never reused)."""
        assert table in ("models", "endpoints")
        with self.transaction() as db:
            db.execute(f"UPDATE {table} SET deleted = 1 WHERE id = ?", (row_id,))

    # deployments ------------------------------------------------------------------------------

    def insert_deployment(
        self, dm_id: str, endpoint_id: str, spec: bytes, operation: str, traffic_split: str
    ) -> DeploymentRow:
        """Record a new deployment in DEPLOYING."""
        with self.transaction() as db:
            db.execute(
                "INSERT INTO deployments (id, endpoint_id, spec, state, operation, traffic_split) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (dm_id, endpoint_id, spec, DEPLOYING, operation, traffic_split),
            )
        found = self.deployment(dm_id)
        assert found is not None
        return found

    def deployment(self, dm_id: str) -> DeploymentRow | None:
        """The deployment of DeployedModel ``dm_id``."""
        rows = self._all("SELECT * FROM deployments WHERE id = ?", (dm_id,))
        return DeploymentRow(**dict(rows[0])) if rows else None

    def deployments(
        self, endpoint_id: str | None = None, states: tuple[str, ...] = LIVE_STATES
    ) -> list[DeploymentRow]:
        """Deployments in ``states`` (of one endpoint when given), oldest first."""
        marks = ", ".join("?" for _ in states)
        sql, args = f"SELECT * FROM deployments WHERE state IN ({marks})", tuple(states)
        if endpoint_id is not None:
            sql, args = sql + " AND endpoint_id = ?", (*args, endpoint_id)
        return [DeploymentRow(**dict(r)) for r in self._all(sql + " ORDER BY seq", args)]

    def set_deployment(self, dm_id: str, **fields: Any) -> None:
        """Set columns of a deployment (state, operation, spec)."""
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as db:
            db.execute(f"UPDATE deployments SET {sets} WHERE id = ?", (*fields.values(), dm_id))

    # operations -------------------------------------------------------------------------------

    def put_operation(self, name: str, body: bytes, done: bool) -> None:
        """Insert or replace an operation (its ``google.longrunning.Operation`` bytes)."""
        with self.transaction() as db:
            db.execute(
                "INSERT INTO operations (name, body, done) VALUES (?, ?, ?) ON CONFLICT(name) "
                "DO UPDATE SET body = excluded.body, done = excluded.done",
                (name, body, int(done)),
            )

    def operation(self, name: str) -> tuple[bytes, bool, bool] | None:
        """(body, done, cancel_requested) of the operation ``name``."""
        rows = self._all("SELECT * FROM operations WHERE name = ?", (name,))
        if not rows:
            return None
        row = rows[0]
        return row["body"], bool(row["done"]), bool(row["cancel_requested"])

    def request_cancel(self, name: str) -> bool:
        """Mark a running operation as asked to cancel; False when it is done already."""
        with self.transaction() as db:
            cur = db.execute(
                "UPDATE operations SET cancel_requested = 1 WHERE name = ? AND done = 0", (name,)
            )
            return cur.rowcount > 0

    # the serving ledger -----------------------------------------------------------------------

    def start_life(self, row: dict[str, Any]) -> None:
        """Record a replica process that just started."""
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self.transaction() as db:
            db.execute(f"INSERT INTO replica_lives ({cols}) VALUES ({marks})", tuple(row.values()))

    def update_life(self, dm_id: str, replica: int, life: int, **fields: Any) -> None:
        """Set columns of one replica life (ready_time, end_time, end_reason)."""
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as db:
            db.execute(
                f"UPDATE replica_lives SET {sets} "
                "WHERE deployed_model_id = ? AND replica = ? AND life = ?",
                (*fields.values(), dm_id, replica, life),
            )

    def heartbeat(self, dm_id: str, now: float) -> None:
        """The open lives of a deployment still run at ``now``."""
        with self.transaction() as db:
            db.execute(
                "UPDATE replica_lives SET last_seen = ? "
                "WHERE deployed_model_id = ? AND end_time IS NULL",
                (now, dm_id),
            )

    def lives(self, endpoint_id: str | None = None, dm_id: str | None = None) -> list[LifeRow]:
        """Replica lives, in start order (of one endpoint or deployment when given)."""
        sql, args = "SELECT * FROM replica_lives WHERE 1 = 1", tuple[str, ...]()
        if endpoint_id is not None:
            sql, args = sql + " AND endpoint_id = ?", (*args, endpoint_id)
        if dm_id is not None:
            sql, args = sql + " AND deployed_model_id = ?", (*args, dm_id)
        rows = self._all(sql + " ORDER BY start_time, replica", args)
        return [LifeRow(**dict(r)) for r in rows]

    def open_lives(self) -> list[LifeRow]:
        """Lives without an end (their emulator stopped or died)."""
        rows = self._all("SELECT * FROM replica_lives WHERE end_time IS NULL")
        return [LifeRow(**dict(r)) for r in rows]
