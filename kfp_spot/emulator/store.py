"""The emulator's durable state: jobs, attempts (the billing ledger), replica processes, operations.

Everything lives in one SQLite file under the state dir and every change is committed before the
emulator acts on it, so killing the emulator (even with SIGKILL) loses nothing: a new emulator on
the same state dir finds every job and the attempt that was running.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from kfp_spot.emulator import names
from kfp_spot.emulator.sqlite import Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    parent TEXT NOT NULL,
    display_name TEXT NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    create_time REAL NOT NULL,
    start_time REAL,
    end_time REAL,
    update_time REAL NOT NULL,
    queued_since REAL,
    error_code INTEGER,
    error_message TEXT,
    preemptions INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    preempt_requested INTEGER NOT NULL DEFAULT 0,
    deleted INTEGER NOT NULL DEFAULT 0,
    project_id TEXT
);
CREATE TABLE IF NOT EXISTS attempts (
    job_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    queued_seconds REAL NOT NULL DEFAULT 0,
    admit_time REAL NOT NULL,
    start_time REAL,
    end_time REAL,
    last_seen REAL,
    end_reason TEXT,
    machine_type TEXT NOT NULL,
    replica_count INTEGER NOT NULL,
    strategy TEXT NOT NULL,
    spot_usd_per_hour REAL NOT NULL,
    on_demand_usd_per_hour REAL NOT NULL,
    processes TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (job_id, attempt)
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state);
CREATE TABLE IF NOT EXISTS operations (
    id TEXT PRIMARY KEY,
    parent TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    create_time REAL NOT NULL,
    update_time REAL NOT NULL,
    done INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

TERMINAL_STATES = frozenset({"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"})


@dataclass
class JobRow:
    """One row of the ``jobs`` table."""

    seq: int
    id: str
    parent: str
    display_name: str
    spec: str
    state: str
    create_time: float
    start_time: float | None
    end_time: float | None
    update_time: float
    queued_since: float | None
    error_code: int | None
    error_message: str | None
    preemptions: int
    cancel_requested: int
    preempt_requested: int
    deleted: int
    project_id: str | None = None

    @property
    def name(self) -> str:
        """The resource name ``projects/NUMBER/locations/L/customJobs/ID``."""
        return f"{self.parent}/customJobs/{self.id}"

    @property
    def project(self) -> str:
        """The project as its creator named it (an ID, or the number when created by number)."""
        return self.project_id or self.parent.split("/")[1]

    @property
    def terminal(self) -> bool:
        """Whether the job has reached a final state."""
        return self.state in TERMINAL_STATES


class JobBrief(NamedTuple):
    """What a list's filter reads of a job's row."""

    seq: int
    id: str
    state: str
    display_name: str
    create_time: float


@dataclass
class OperationRow:
    """One row of the ``operations`` table: a long-running operation (done when recorded)."""

    id: str
    parent: str
    kind: str
    target: str
    create_time: float
    update_time: float
    done: int

    @property
    def name(self) -> str:
        """``projects/NUMBER/locations/L/operations/ID``."""
        return f"{self.parent}/operations/{self.id}"


@dataclass
class AttemptRow:
    """One row of the ``attempts`` table: one try at running the job (a ledger line)."""

    job_id: str
    attempt: int
    queued_seconds: float
    admit_time: float
    start_time: float | None
    end_time: float | None
    last_seen: float | None
    end_reason: str | None
    machine_type: str
    replica_count: int
    strategy: str
    spot_usd_per_hour: float
    on_demand_usd_per_hour: float
    processes: str

    @property
    def process_list(self) -> list[dict[str, Any]]:
        """The replica processes recorded for this attempt (``replica``, ``pid``, ``token``)."""
        processes: list[dict[str, Any]] = json.loads(self.processes)
        return processes


class JobScan:
    """Reads of the ``jobs`` table inside one read transaction (see :meth:`Store.job_scan`)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def brief(self, parent: str, before: int | None = None) -> Generator[JobBrief, None, None]:
        """The parent's jobs not deleted, newest first (``seq < before`` when given).

        Only the columns a list's filter reads, read as they are iterated (a page reads what it
        shows); close the iterator (``contextlib.closing``) when stopping early.
        """
        sql = (
            "SELECT seq, id, state, display_name, create_time FROM jobs "
            "WHERE deleted = 0 AND parent = ?"
        )
        args: tuple[Any, ...] = (parent,)
        if before is not None:
            sql, args = sql + " AND seq < ?", (parent, before)
        cursor = self._db.cursor()
        cursor.row_factory = None  # plain tuples
        cursor.execute(sql + " ORDER BY seq DESC", args)
        try:
            while batch := cursor.fetchmany(200):
                for row in batch:
                    yield JobBrief(*row)
        finally:
            cursor.close()

    def job(self, job_id: str) -> JobRow | None:
        """The whole row of a job (as :meth:`Store.job`), in this scan's commit."""
        row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return JobRow(**dict(row)) if row else None


class Store(Database):
    """Thread-safe access to the SQLite state file."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, SCHEMA, versioned={"jobs": "id"})
        self._migrate()

    def _migrate(self) -> None:
        """Bring a state file of an older emulator up to date (names by project number)."""
        with self._lock:
            columns = {r["name"] for r in self._db.execute("PRAGMA table_info(jobs)")}
        if "project_id" not in columns:
            with self.transaction() as db:
                db.execute("ALTER TABLE jobs ADD COLUMN project_id TEXT")
        with self._lock:
            rows = self._db.execute(
                "SELECT id, parent FROM jobs WHERE project_id IS NULL"
            ).fetchall()
        for row in rows:
            try:
                parent = names.parse_parent(row["parent"])
            except ValueError:
                continue
            if not names.is_project_number(parent.project):
                self.update_job(row["id"], parent=parent.canonical, project_id=parent.project)

    def secret(self) -> bytes:
        """A random key of this state dir (signs page tokens), created on first use."""
        with self.transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'secret'").fetchone()
            if row is None:
                value = secrets.token_hex(32)
                db.execute("INSERT INTO meta (key, value) VALUES ('secret', ?)", (value,))
                return bytes.fromhex(value)
        return bytes.fromhex(row["value"])

    # jobs -------------------------------------------------------------------------------------

    def insert_job(self, row: dict[str, Any]) -> bool:
        """Insert a job; False when its id is already taken."""
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        try:
            with self.transaction() as db:
                db.execute(f"INSERT INTO jobs ({cols}) VALUES ({marks})", tuple(row.values()))
        except sqlite3.IntegrityError:
            return False
        return True

    def job(self, job_id: str) -> JobRow | None:
        """The job with this id, or None (deleted jobs included, marked ``deleted``)."""
        with self._reading() as db:
            cur = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,))
            row = cur.fetchone()
        return JobRow(**dict(row)) if row else None

    def job_version(self, job_id: str) -> int:
        """The write version of a job's row: it moves on after every commit that writes it."""
        return self.version("jobs", job_id)

    @contextmanager
    def job_scan(self) -> Iterator[JobScan]:
        """Reads of jobs that all see the same commit (a list's page and the rows it shows)."""
        with self._snapshot() as db:
            yield JobScan(db)

    def jobs(self, parent: str | None = None, states: Sequence[str] | None = None) -> list[JobRow]:
        """Jobs not deleted, newest first, optionally for one parent and in some states."""
        sql = "SELECT * FROM jobs WHERE deleted = 0"
        args: list[Any] = []
        if parent is not None:
            sql += " AND parent = ?"
            args.append(parent)
        if states:
            sql += f" AND state IN ({', '.join('?' for _ in states)})"
            args.extend(states)
        with self._reading() as db:
            rows = db.execute(sql + " ORDER BY seq DESC", args).fetchall()
        return [JobRow(**dict(r)) for r in rows]

    def update_job(self, job_id: str, **fields: Any) -> None:
        """Set some columns of a job."""
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as db:
            db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))

    def update_job_if(self, job_id: str, states: Sequence[str], **fields: Any) -> bool:
        """Set some columns of a job only while it is in one of ``states``; True when it was."""
        sets = ", ".join(f"{k} = ?" for k in fields)
        marks = ", ".join("?" for _ in states)
        with self.transaction() as db:
            cur = db.execute(
                f"UPDATE jobs SET {sets} WHERE id = ? AND state IN ({marks})",
                (*fields.values(), job_id, *states),
            )
            return cur.rowcount > 0

    # operations -------------------------------------------------------------------------------

    def insert_operation(self, row: dict[str, Any]) -> None:
        """Record a long-running operation."""
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self.transaction() as db:
            db.execute(f"INSERT INTO operations ({cols}) VALUES ({marks})", tuple(row.values()))

    def operation(self, op_id: str) -> OperationRow | None:
        """The operation with this id, or None."""
        with self._reading() as db:
            row = db.execute("SELECT * FROM operations WHERE id = ?", (op_id,)).fetchone()
        return OperationRow(**dict(row)) if row else None

    def operations(self, parent: str) -> list[OperationRow]:
        """The operations of ``parent``, newest first."""
        with self._reading() as db:
            rows = db.execute(
                "SELECT * FROM operations WHERE parent = ? ORDER BY create_time DESC, id DESC",
                (parent,),
            ).fetchall()
        return [OperationRow(**dict(r)) for r in rows]

    def delete_operation(self, op_id: str) -> None:
        """Forget an operation."""
        with self.transaction() as db:
            db.execute("DELETE FROM operations WHERE id = ?", (op_id,))

    # attempts ---------------------------------------------------------------------------------

    def insert_attempt(self, row: dict[str, Any]) -> None:
        """Insert a new attempt row."""
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self.transaction() as db:
            db.execute(f"INSERT INTO attempts ({cols}) VALUES ({marks})", tuple(row.values()))

    def attempts(self, job_id: str) -> list[AttemptRow]:
        """All attempts of a job, first first."""
        with self._reading() as db:
            rows = db.execute(
                "SELECT * FROM attempts WHERE job_id = ? ORDER BY attempt", (job_id,)
            ).fetchall()
        return [AttemptRow(**dict(r)) for r in rows]

    def open_attempts(self) -> list[AttemptRow]:
        """Attempts without an end (running when the emulator stopped)."""
        with self._reading() as db:
            rows = db.execute("SELECT * FROM attempts WHERE end_time IS NULL").fetchall()
        return [AttemptRow(**dict(r)) for r in rows]

    def update_attempt(self, job_id: str, attempt: int, **fields: Any) -> None:
        """Set some columns of an attempt."""
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as db:
            db.execute(
                f"UPDATE attempts SET {sets} WHERE job_id = ? AND attempt = ?",
                (*fields.values(), job_id, attempt),
            )

    def touch_attempts(self, last_seen: Mapping[tuple[str, int], float]) -> None:
        """Heartbeats of running attempts, in one transaction: ``(job, attempt) -> last_seen``.

        An attempt that has ended meanwhile keeps its end (``last_seen`` never goes back).
        """
        with self.transaction() as db:
            db.executemany(
                "UPDATE attempts SET last_seen = ? WHERE job_id = ? AND attempt = ? "
                "AND end_time IS NULL AND (last_seen IS NULL OR last_seen < ?)",
                [(t, job, attempt, t) for (job, attempt), t in last_seen.items()],
            )

    def end_attempt(
        self, job_id: str, attempt: int, attempt_fields: dict[str, Any], job_fields: dict[str, Any]
    ) -> None:
        """End an attempt and move its job on in one transaction (no half-recorded outcome)."""
        a_sets = ", ".join(f"{k} = ?" for k in attempt_fields)
        j_sets = ", ".join(f"{k} = ?" for k in job_fields)
        with self.transaction() as db:
            db.execute(
                f"UPDATE attempts SET {a_sets} WHERE job_id = ? AND attempt = ?",
                (*attempt_fields.values(), job_id, attempt),
            )
            if job_fields:
                db.execute(f"UPDATE jobs SET {j_sets} WHERE id = ?", (*job_fields.values(), job_id))

    def admit(self, job_id: str, attempt_row: dict[str, Any], job_fields: dict[str, Any]) -> None:
        """Record a new attempt and the job's move to PENDING in one transaction."""
        cols = ", ".join(attempt_row)
        marks = ", ".join("?" for _ in attempt_row)
        j_sets = ", ".join(f"{k} = ?" for k in job_fields)
        with self.transaction() as db:
            db.execute(
                f"INSERT INTO attempts ({cols}) VALUES ({marks})", tuple(attempt_row.values())
            )
            db.execute(f"UPDATE jobs SET {j_sets} WHERE id = ?", (*job_fields.values(), job_id))
