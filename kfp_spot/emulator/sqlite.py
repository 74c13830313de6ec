"""One SQLite file of emulator state, shared by threads: opened durable, written in transactions.

The CustomJob state (:mod:`kfp_spot.emulator.store`) and the serving state
(:mod:`kfp_spot.emulator.serving.store`) are both a :class:`Database`: WAL with
``synchronous=FULL`` so a committed change survives the emulator being killed, one lock so threads
share the connection, and ``BEGIN IMMEDIATE`` transactions so a write never waits half-done.
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

    Subclasses read through :meth:`_all` (or ``self._db`` under ``self._lock``) and write
    through :meth:`transaction`.
    """

    def __init__(self, path: Path, schema: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(schema)

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

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
        with self._lock:
            return self._db.execute(sql, args).fetchall()
