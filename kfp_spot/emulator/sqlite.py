"""One SQLite file of emulator state, shared by threads: opened durable, written in transactions.

The CustomJob state (:mod:`kfp_spot.emulator.store`) and the serving state
(:mod:`kfp_spot.emulator.serving.store`) are both a :class:`Database`: WAL with
``synchronous=FULL`` so a committed change survives the emulator being killed, one lock so threads
share the writing connection, and ``BEGIN IMMEDIATE`` transactions so a write never waits half-done.

Reads go through read-only connections of their own, one per concurrent reader and taken from a
pool, so no reader waits for another or for the writer: WAL lets each read the last committed
state while a write commits (a GET never waits for a commit's fsync), and SQLite runs without
Python's GIL meanwhile.

Write versions: a table named in ``versioned`` gets per-connection (``TEMP``) triggers on the
writing connection that note the key of every row inserted, updated or deleted. The row's
:meth:`Database.version` moves on twice: as the statement writes it, and again once the
transaction has committed (or rolled back). So whoever reads the version, then the row, and
keeps what it built from the row under that version (a cache of answers) finds it out of date
as soon as a write of the row began after the version was read, and a row read before the
commit is never kept under the version that follows it. Every write counts, whichever code made
it, since the triggers watch the table, not the callers.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MAX_IDLE_READERS = 8  # read-only connections kept open between reads (more are opened at need)


class Database:
    """Thread-safe access to one SQLite file whose tables ``schema`` creates when missing.

    Subclasses read through :meth:`_all` or :meth:`_reading` (what is committed) and write
    through :meth:`transaction` (``self._db`` under ``self._lock`` reads what the writer sees).

    Args:
        path: the SQLite file (created with its directory when missing).
        schema: SQL that creates the tables when missing.
        versioned: ``table -> key column`` whose writes move :meth:`version` on.
    """

    def __init__(self, path: Path, schema: str, versioned: Mapping[str, str] | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = str(path)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(schema)
        self._versions: dict[tuple[str, Any], int] = {}
        self._written: set[tuple[str, Any]] = set()  # keys written by the open transaction
        self._commits = 0
        if versioned:
            self._watch(versioned)
        self._readers: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._closed = False

    def _watch(self, versioned: Mapping[str, str]) -> None:
        """TEMP triggers on the writing connection that note the keys of rows written."""
        self._db.create_function("kfp_spot_written", 2, self._note, deterministic=False)
        for table, key in versioned.items():
            for event, row in (("INSERT", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
                self._db.execute(
                    f"CREATE TEMP TRIGGER IF NOT EXISTS kfp_spot_{table}_{event.lower()} "
                    f"AFTER {event} ON main.{table} "
                    f"BEGIN SELECT kfp_spot_written('{table}', {row}.{key}); END"
                )
            self._db.execute(
                f"CREATE TEMP TRIGGER IF NOT EXISTS kfp_spot_{table}_rekey "
                f"AFTER UPDATE OF {key} ON main.{table} "
                f"BEGIN SELECT kfp_spot_written('{table}', NEW.{key}); END"
            )

    def _note(self, table: str, key: Any) -> None:
        # on the writer's thread, under self._lock, as the statement writes the row
        self._written.add((table, key))
        self._commits += 1
        self._versions[(table, key)] = self._commits

    def _written_done(self) -> None:
        """After a commit or a rollback: the rows written move on again."""
        if self._written:
            self._commits += 1
            for key in self._written:
                self._versions[key] = self._commits
            self._written.clear()

    def version(self, table: str, key: Any) -> int:
        """Where the committed writes of one row of a ``versioned`` table are (0: none yet).

        It only moves on, after each commit that inserted, changed or deleted the row; read it
        before reading the row to keep an answer built from the row under it.
        """
        return self._versions.get((table, key), 0)

    def last_version(self) -> int:
        """The newest version any row has been given.

        Read before a query, it bounds the versions of the rows the query reads: a row whose
        version is at most this one was last written before the query began.
        """
        return self._commits

    def close(self) -> None:
        """Close the database (connections still lent to readers close when given back)."""
        self._closed = True
        while True:
            try:
                self._readers.get_nowait().close()
            except queue.Empty:
                break
        with self._lock:
            self._db.close()

    def _connect_reader(self) -> sqlite3.Connection:
        db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA query_only=1")
        return db

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """A read-only connection of the caller's own, given back to the pool afterwards.

        Autocommit: each statement sees the last commit, once the one before it is done (a
        cursor left half-read holds its snapshot: close it before the block ends).
        """
        try:
            db = self._readers.get_nowait()
        except queue.Empty:
            db = self._connect_reader()
        try:
            yield db
        finally:
            if self._closed or self._readers.qsize() >= MAX_IDLE_READERS or db.in_transaction:
                db.close()
            else:
                self._readers.put(db)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction, committed on success and rolled back on error."""
        with self._lock:
            self._written.clear()
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                self._written_done()
                raise
            self._db.execute("COMMIT")
            self._written_done()

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read-only connection in a read transaction: every query sees the same commit."""
        with self._reading() as db:
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("ROLLBACK")

    def _all(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._reading() as db:
            return db.execute(sql, args).fetchall()
