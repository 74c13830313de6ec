"""The trainer's attempt records (``<checkpoints>/_attempts/<id>.json``), typed."""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kfp_spot.accounting.fields import AccountingError, parse_time, step_of

log = logging.getLogger(__name__)


class TrainerExit(str, enum.Enum):
    """How the training process says an attempt ended (its attempt record's ``exit_reason``)."""

    FINISHED = "finished"
    PREEMPTED = "preempted"
    ERROR = "error"
    UNKNOWN = "unknown"  # no exit written: still running, or killed without notice

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: Any) -> TrainerExit:
        """The exit named by ``value``; UNKNOWN for null, ``running`` and anything else."""
        text = str(value or "").strip().lower()
        aliases = {
            "succeeded": cls.FINISHED,
            "success": cls.FINISHED,
            "completed": cls.FINISHED,
            "preemption": cls.PREEMPTED,
            "stockout": cls.PREEMPTED,
            "emulator_restarted": cls.PREEMPTED,
            "failed": cls.ERROR,
        }
        if text in aliases:
            return aliases[text]
        try:
            return cls(text)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True)
class TrainerAttempt:
    """One attempt as the training process recorded it (``<checkpoints>/_attempts/<id>.json``).

    The fields the trainer helper writes (docs/trainer.md); unknown ones are ignored.
    """

    attempt_id: str
    start: float | None
    end: float | None  # None: never wrote its end (still running, or killed)
    exit: TrainerExit
    first_step: int | None = None
    last_committed_step: int | None = None
    last_commit_time: float | None = None  # survives retention deleting the step
    preemption_notice_time: float | None = None
    grace_period: float | None = None
    updated_time: float | None = None  # the last sign of life
    job_id: str = ""

    @classmethod
    def from_json(cls, record: Mapping[str, Any], where: str) -> TrainerAttempt:
        """Parse one record.

        Raises:
            AccountingError: when a time field is unreadable (the message names it).
        """
        if not isinstance(record, Mapping):
            raise AccountingError(f"{where} must be an object, got {type(record).__name__}")

        def time_of(key: str) -> float | None:
            return parse_time(record.get(key), f"{where}.{key}")

        def optional_time(key: str) -> float | None:
            try:
                return time_of(key)
            except AccountingError:
                return None  # a hint, never a reason to drop the record

        exit_text = next(
            (record.get(k) for k in ("exit_reason", "end_reason", "reason") if record.get(k)), None
        )
        grace = record.get("grace_period")
        return cls(
            attempt_id=str(record.get("attempt_id") or where),
            start=time_of("start_time"),
            end=time_of("end_time"),
            exit=TrainerExit.parse(exit_text),
            first_step=step_of(record, "first_step", "start_step", "resumed_from"),
            last_committed_step=step_of(record, "last_committed_step", "last_step", "end_step"),
            last_commit_time=optional_time("last_commit_time"),
            preemption_notice_time=optional_time("preemption_notice_time"),
            grace_period=(
                float(grace)
                if isinstance(grace, (int, float)) and not isinstance(grace, bool)
                else None
            ),
            updated_time=optional_time("updated_time"),
            job_id=str(record.get("job_id") or record.get("job_name") or ""),
        )

    def last_commit_within(self, commits: Sequence[float]) -> float | None:
        """Time of the last checkpoint committed during this attempt; None when none was."""
        if self.start is None or self.end is None:
            return None
        inside = [t for t in commits if self.start <= t <= self.end]
        if self.last_commit_time is not None and self.start <= self.last_commit_time:
            inside.append(min(self.last_commit_time, self.end))
        return max(inside) if inside else None


def parse_records(raw: Sequence[Any], where: str = "_attempts") -> list[TrainerAttempt]:
    """Typed trainer records, by start time; unreadable ones are skipped with a warning."""
    records = []
    for index, record in enumerate(raw):
        name = f"{where}[{index}]"
        if isinstance(record, Mapping) and record.get("attempt_id"):
            name = f"{where}/{record['attempt_id']}"
        try:
            records.append(TrainerAttempt.from_json(record, name))
        except AccountingError as exc:
            log.warning("skipping attempt record: %s", exc)
    return sorted(records, key=lambda r: (r.start is None, r.start or 0.0, r.attempt_id))


def read_records(checkpoint_root: str) -> list[TrainerAttempt]:
    """The trainer's attempt records under ``<checkpoint_root>/_attempts``.

    [] when there are none or the storage cannot be read (logged): a report is never worth
    failing a launch over.
    """
    from kfp_spot import checkpoints  # fsspec is imported only when a report reads files
    from kfp_spot.trainer.attempts import storage_errors

    if not checkpoint_root:
        return []
    try:
        raw = checkpoints.read_attempt_records(checkpoint_root)
    except (*storage_errors(), ValueError) as exc:
        log.info("cannot read attempt records under %s: %s", checkpoint_root, exc)
        return []
    return parse_records(raw, f"{checkpoint_root}/_attempts")


def read_commits(checkpoint_root: str) -> list[float]:
    """Wall times of the checkpoint commits under ``checkpoint_root`` ([] when none, or unread)."""
    from kfp_spot import checkpoints
    from kfp_spot.trainer.attempts import storage_errors

    if not checkpoint_root:
        return []
    try:
        return checkpoints.commit_times(checkpoint_root)
    except (*storage_errors(), ValueError) as exc:
        log.info("cannot list checkpoints under %s: %s", checkpoint_root, exc)
        return []
