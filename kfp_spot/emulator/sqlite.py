"""One SQLite file of emulator state, shared by threads: opened durable, written in transactions.

The CustomJob state (:mod:`kfp_spot.emulator.store`) and the serving state
(:mod:`kfp_spot.emulator.serving.store`) are both a :class:`Database`: WAL with
``synchronous=FULL`` so a committed change survives the emulator being killed, one lock so threads
share the writing connection, and ``BEGIN IMMEDIATE`` transactions so a write never waits half-done.
Reads go through a second, read-only connection with its own lock: WAL lets it read the last
committed state while a write commits, so a GET never waits for a commit's fsync.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class Database:
    """Thread-safe access to one SQLite file whose tables ``schema`` creates when missing.

    Subclasses read through :meth:`_all` or :meth:`_reading` (what is committed) and write
    through :meth:`transaction` (``self._db`` under ``self._lock`` reads what the writer sees).
    """

    def __init__(self, path: Path, schema: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(schema)
        self._read_lock = threading.Lock()
        self._reader = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._reader.row_factory = sqlite3.Row
        self._reader.execute("PRAGMA query_only=1")

    def close(self) -> None:
        """Close the database."""
        with self._read_lock:
            self._reader.close()
        with self._lock:
            self._db.close()

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The read-only connection (autocommit: each statement sees the last commit)."""
        with self._read_lock:
            yield self._reader

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction, committed on success and rolled back on error."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _all(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._reading() as db:
            return db.execute(sql, args).fetchall()
