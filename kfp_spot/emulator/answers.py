"""The JSON answer of each CustomJob, built once and kept until the job's row is written again.

Turning a job's row into its protobuf JSON (the spec parsed, output fields set,
``json_format``) costs most of a GET's time in the server; a job is read far more often than it
changes (a client polls its state, a list shows the same jobs page after page). So the answer is
kept per job (and per enum encoding), under the job's write version
(:meth:`kfp_spot.emulator.sqlite.Database.version`, moved on after every commit that wrote the
row), and used for as long as the version has not moved.

Never stale: an answer is kept under a version read *before* the row it was built from was read,
so a write of the row since (the version moves as the write begins and again once it is
committed) makes the current version newer than the kept one, and the next request builds the
answer again from the row as committed (a state change, a cancel or a preemption is seen by the
first request after it). Built from a row whose version is not known to precede it, an answer
is used for that request but not kept.

The cache holds at most ``limit`` answers (the oldest kept is dropped first); the answer depends
on the row alone (the spec is immutable once stored), so there is nothing else to invalidate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from kfp_spot.emulator.store import JobRow

DEFAULT_LIMIT = 20_000  # answers kept (a few KB each)


@dataclass(frozen=True)
class Answer:
    """A job's JSON answer and what a request checks before it is given out.

    Attributes:
        version: the job's write version the answer was built at (or before).
        parent: the job's canonical parent (a GET by another parent is a NOT_FOUND).
        deleted: whether the job is deleted (NOT_FOUND).
        json: the CustomJob as protobuf JSON, as ``message_json`` writes it.
    """

    version: int
    parent: str
    deleted: bool
    json: str


class AnswerCache:
    """JSON answers of CustomJobs by (job id, integer enums), valid while their version is.

    Args:
        version: the job's current write version (``Store.job_version``).
        build: the JSON answer of a row (``message_json`` of the API's protobuf).
        limit: the most answers kept.
    """

    def __init__(
        self,
        version: Callable[[str], int],
        build: Callable[[JobRow, bool], str],
        limit: int = DEFAULT_LIMIT,
    ) -> None:
        self._version = version
        self._build = build
        self._limit = limit
        self._answers: dict[tuple[str, bool], Answer] = {}
        self._lock = threading.Lock()

    def current(self, job_id: str, int_enums: bool, at_most: int | None = None) -> Answer | None:
        """The kept answer of a job if no write of its row began since; else None.

        Args:
            job_id: the job.
            int_enums: enums as numbers (``$alt=json;enum-encoding=int``).
            at_most: only when the row's version is at most this one (a list: the version
                before its read began, so the answer is the row the list read).
        """
        answer = self._answers.get((job_id, int_enums))
        if answer is None:
            return None
        version = self._version(job_id)
        if answer.version != version or (at_most is not None and version > at_most):
            return None
        return answer

    def build(self, row: JobRow, int_enums: bool, read_at: int | None) -> Answer:
        """The answer of ``row``, kept under ``read_at`` when it is given.

        Args:
            row: the job's row as read.
            int_enums: enums as numbers.
            read_at: the row's version read before the row was (None: not known, the answer
                is not kept).
        """
        answer = Answer(
            read_at if read_at is not None else -1,
            row.parent,
            bool(row.deleted),
            self._build(row, int_enums),
        )
        if read_at is not None:
            self._keep((row.id, int_enums), answer)
        return answer

    def _keep(self, key: tuple[str, bool], answer: Answer) -> None:
        with self._lock:
            old = self._answers.get(key)
            if old is not None and old.version > answer.version:
                return  # a newer answer was kept meanwhile
            self._answers.pop(key, None)  # re-inserted last: the oldest kept goes first
            self._answers[key] = answer
            while len(self._answers) > self._limit:
                del self._answers[next(iter(self._answers))]
