"""Attempt records: one JSON file per training attempt, ``<root>/_attempts/<attempt_id>.json``.

:class:`AttemptRecord` is the one definition of the format: the trainer writes it
(:class:`kfp_spot.trainer.AttemptRecorder`), the launcher, the reports and the accounting read it
(:func:`read_attempt_records`). A record is written when the attempt starts, rewritten after every
committed checkpoint and on heartbeats, and closed with an exit reason. An attempt killed (SIGKILL:
an OOM kill, a VM gone, the grace period's end) or still running leaves ``exit_reason`` and
``end_time`` null; readers take ``updated_time`` as its last sign of life, and count it preempted
only when its ``preemption_notice_time`` is on record (the accounting's
``record_end_reason``).

Fields (times are Unix seconds as floats; ``start`` and ``end`` repeat them as RFC 3339 strings
for people and are never read back):

``format`` (:data:`ATTEMPT_FORMAT`; records written before the field existed have none and the
same fields), ``attempt_id``, ``job_id`` (``CLOUD_ML_JOB_ID`` or null), ``host``, ``pid``,
``start_time``, ``end_time`` (null until the end), ``updated_time``, ``first_step`` (the step it
resumed from; 0 for a fresh start), ``last_committed_step`` (null until one commits),
``last_commit_time`` (survives retention deleting that step), ``exit_reason`` (``finished`` /
``preempted`` / ``error`` / null), ``error`` (the message, for ``error``), ``saves``,
``save_seconds_mean``, ``save_seconds_max`` (the whole save, written),
``save_stall_seconds_mean`` (how long saves blocked the loop), ``preemption_notice_time``,
``grace_period``. No earlier version wrote other names for these fields, so there are no aliases;
unknown fields are ignored.
"""

from __future__ import annotations

import enum
import json
import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kfp_spot import fs
from kfp_spot.checkpoints.manifest import CheckpointError
from kfp_spot.checkpoints.paths import list_names
from kfp_spot.checkpoints.verify import committed_steps

log = logging.getLogger("kfp_spot.checkpoints")

ATTEMPTS_DIR = "_attempts"
ATTEMPT_FORMAT = "kfp-spot-attempt/1"
MAX_ATTEMPT_RECORD_BYTES = 1 << 20
"""A record larger than this is refused unread (they hold a few dozen small fields)."""


class ExitReason(str, enum.Enum):
    """How the training process says an attempt ended (``exit_reason``)."""

    FINISHED = "finished"
    PREEMPTED = "preempted"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


class AttemptRecordError(CheckpointError):
    """An attempt record cannot be read; the message names the record and the field."""


@dataclass(frozen=True)
class AttemptRecord:
    """One training attempt, as ``<root>/_attempts/<attempt_id>.json`` holds it."""

    attempt_id: str
    start_time: float
    job_id: str | None = None
    host: str = ""
    pid: int | None = None
    end_time: float | None = None  # None: never wrote its end (still running, or killed)
    updated_time: float | None = None  # the last sign of life
    first_step: int | None = None  # None: not written (ours always write it, 0 when fresh)
    last_committed_step: int | None = None
    last_commit_time: float | None = None
    exit_reason: ExitReason | None = None
    error: str | None = None
    saves: int = 0
    save_seconds_mean: float | None = None
    save_seconds_max: float | None = None
    save_stall_seconds_mean: float | None = None
    preemption_notice_time: float | None = None
    grace_period: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as its file holds it."""
        return {
            "format": ATTEMPT_FORMAT,
            "attempt_id": self.attempt_id,
            "job_id": self.job_id,
            "host": self.host,
            "pid": self.pid,
            "start_time": self.start_time,
            "start": _rfc3339(self.start_time),
            "end_time": self.end_time,
            "end": _rfc3339(self.end_time),
            "updated_time": self.updated_time,
            "first_step": self.first_step,
            "last_committed_step": self.last_committed_step,
            "last_commit_time": self.last_commit_time,
            "exit_reason": None if self.exit_reason is None else self.exit_reason.value,
            "error": self.error,
            "saves": self.saves,
            "save_seconds_mean": self.save_seconds_mean,
            "save_seconds_max": self.save_seconds_max,
            "save_stall_seconds_mean": self.save_stall_seconds_mean,
            "preemption_notice_time": self.preemption_notice_time,
            "grace_period": self.grace_period,
        }

    @classmethod
    def from_json(cls, doc: object, where: str = "attempt record") -> AttemptRecord:
        """Parse and check one record.

        Raises:
            AttemptRecordError: naming ``where`` and the first field of the wrong type.
        """
        if not isinstance(doc, Mapping):
            raise AttemptRecordError(f"{where} is not a JSON object")
        fmt = doc.get("format", ATTEMPT_FORMAT)
        if fmt != ATTEMPT_FORMAT:
            raise AttemptRecordError(f"{where} has unknown format {fmt!r}")
        fields = _Fields(doc, where)
        attempt_id = fields.text("attempt_id")
        start_time = fields.time("start_time")
        if not attempt_id or start_time is None:
            raise AttemptRecordError(f"{where} has no attempt_id or no start_time")
        reason = fields.text("exit_reason") or None
        if reason is not None and reason not in {r.value for r in ExitReason}:
            raise AttemptRecordError(f"{where}: exit_reason {reason!r} is not one of ours")
        return cls(
            attempt_id=attempt_id,
            start_time=start_time,
            job_id=fields.text("job_id") or None,
            host=fields.text("host"),
            pid=fields.count("pid"),
            end_time=fields.time("end_time"),
            updated_time=fields.time("updated_time"),
            first_step=fields.count("first_step"),
            last_committed_step=fields.count("last_committed_step"),
            last_commit_time=fields.time("last_commit_time"),
            exit_reason=None if reason is None else ExitReason(reason),
            error=fields.text("error") or None,
            saves=fields.count("saves") or 0,
            save_seconds_mean=fields.time("save_seconds_mean"),
            save_seconds_max=fields.time("save_seconds_max"),
            save_stall_seconds_mean=fields.time("save_stall_seconds_mean"),
            preemption_notice_time=fields.time("preemption_notice_time"),
            grace_period=fields.time("grace_period"),
        )


class _Fields:
    """Typed reads of a record's optional fields; a field of the wrong type names itself."""

    def __init__(self, doc: Mapping[str, Any], where: str) -> None:
        self.doc, self.where = doc, where

    def _wrong(self, key: str, kind: str) -> AttemptRecordError:
        return AttemptRecordError(f"{self.where}: {key} must be {kind}, got {self.doc[key]!r}")

    def time(self, key: str) -> float | None:
        value = self.doc.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._wrong(key, "a number")
        if not math.isfinite(value) or value < 0:
            raise self._wrong(key, "a finite number >= 0")
        return float(value)

    def count(self, key: str) -> int | None:
        value = self.doc.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._wrong(key, "an integer >= 0")
        return value

    def text(self, key: str) -> str:
        value = self.doc.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self._wrong(key, "a string")
        return value


def _rfc3339(t: float | None) -> str | None:
    if t is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def parse_attempt_records(docs: Iterable[object], where: str = ATTEMPTS_DIR) -> list[AttemptRecord]:
    """Records from their JSON form, by start time; a record that does not parse is skipped.

    Args:
        docs: the records' JSON objects (as files hold them, or as a run summary embeds them).
        where: named, with each record's position, in the warning for one that is skipped.
    """
    records = []
    for index, doc in enumerate(docs):
        try:
            records.append(AttemptRecord.from_json(doc, f"{where}[{index}]"))
        except AttemptRecordError as exc:
            log.warning("skipping attempt record: %s", exc)
    return sorted(records, key=lambda r: (r.start_time, r.attempt_id))


def read_attempt_records(root: str) -> list[AttemptRecord]:
    """Every readable attempt record under ``<root>/_attempts``, by start time.

    A file that is not JSON or not a record is skipped with a warning: one bad record must not
    hide the others.
    """
    directory = fs.join(root, ATTEMPTS_DIR)
    records = []
    for name in list_names(directory):
        if not name.endswith(".json") or name.startswith("."):
            continue
        uri = fs.join(directory, name)
        try:
            local = fs.to_local_path(uri)
            if local is not None:
                with open(local, "rb") as handle:
                    data = handle.read(MAX_ATTEMPT_RECORD_BYTES + 1)
            else:
                filesystem, path = fs.filesystem(uri)
                with filesystem.open(path, "rb") as handle:
                    data = handle.read(MAX_ATTEMPT_RECORD_BYTES + 1)
            if len(data) > MAX_ATTEMPT_RECORD_BYTES:
                raise AttemptRecordError(f"over {MAX_ATTEMPT_RECORD_BYTES} bytes")
            records.append(AttemptRecord.from_json(json.loads(data), f"{ATTEMPTS_DIR}/{name}"))
        except (OSError, ValueError, RecursionError, AttemptRecordError) as exc:
            log.warning("skipping unreadable attempt record %s: %s", name, exc)
    return sorted(records, key=lambda r: (r.start_time, r.attempt_id))


def write_attempt_record(root: str, record: AttemptRecord) -> None:
    """Write (or overwrite) ``record`` as ``<root>/_attempts/<attempt_id>.json``.

    Readers see the old record or the new one, never a mix: a local file is replaced by rename,
    an object by a single PUT.
    """
    attempt_id = record.attempt_id
    if not attempt_id or "/" in attempt_id or attempt_id.startswith("."):
        raise ValueError(f"invalid attempt id {attempt_id!r}: a non-empty name without '/'")
    data = json.dumps(record.to_json(), sort_keys=True).encode()
    fs.atomic_write(fs.join(root, ATTEMPTS_DIR, f"{attempt_id}.json"), data)


def commit_times(root: str) -> list[float]:
    """Wall times at which checkpoints under ``root`` were committed, ascending.

    The committed manifests give theirs; attempt records add each attempt's ``last_commit_time``,
    which survives retention deleting that step. Used to tell kept work from lost work. A step
    in a newer format than this version reads gives none (its attempt's record still does).
    """
    times = {m.wall_time for m in committed_steps(root, newer=[])}
    times.update(
        r.last_commit_time for r in read_attempt_records(root) if r.last_commit_time is not None
    )
    return sorted(times)
