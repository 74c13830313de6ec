"""Reading a run directory: ``run.json``, the checkpoint manifests and the attempt records.

``run.json``'s schema is in docs/reports.md. Everything here reads defensively: unknown fields are
ignored, optional ones may be missing, and a field of the wrong type is reported by name
(``run.json: ledger[2].spotCost must be a number ...``) instead of a traceback.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kfp_spot import checkpoints

log = logging.getLogger(__name__)

RUN_FILE = "run.json"
PREEMPTED = "PREEMPTED"


class ReportError(Exception):
    """A run directory cannot be reported on; the message names the file and field."""


def parse_time(value: Any, where: str) -> float | None:
    """Seconds since the epoch from a number or an RFC 3339 string; None when absent.

    Raises:
        ReportError: naming ``where`` when the value is neither.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ReportError(f"{where} must be a time (epoch seconds or RFC 3339), got {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ReportError(f"{where} must be a finite time, got {value!r}")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None:
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=timezone.utc)
            return parsed.timestamp()
    raise ReportError(f"{where} must be a time (epoch seconds or RFC 3339), got {value!r}")


def _number(row: Mapping[str, Any], key: str, where: str, default: float = 0.0) -> float:
    value = row.get(key)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise ReportError(f"{where}.{key} must be a number, got {value!r}")
    try:
        out = float(value)  # protobuf JSON sends int64 as strings: "12" is fine
    except (TypeError, ValueError) as exc:
        raise ReportError(f"{where}.{key} must be a number, got {value!r}") from exc
    if not math.isfinite(out):
        raise ReportError(f"{where}.{key} must be finite, got {value!r}")
    return out


@dataclass(frozen=True)
class LedgerRow:
    """One billed attempt of a CustomJob, as the emulator's ledger (or Vertex) reports it."""

    job: str
    attempt: int
    start: float | None
    end: float | None
    end_reason: str
    billable_seconds: float
    queued_seconds: float
    machine_type: str
    replica_count: int
    strategy: str
    spot_cost: float
    on_demand_cost: float
    savings: float

    @classmethod
    def from_json(cls, row: Any, where: str, default_job: str) -> LedgerRow:
        """Parse one camelCase ledger row (see docs/ARCHITECTURE.md)."""
        if not isinstance(row, Mapping):
            raise ReportError(f"{where} must be an object, got {type(row).__name__}")
        return cls(
            job=str(row.get("job") or default_job),
            attempt=int(_number(row, "attempt", where, default=0)),
            start=parse_time(row.get("startTime"), f"{where}.startTime"),
            end=parse_time(row.get("endTime"), f"{where}.endTime"),
            end_reason=str(row.get("endReason") or "UNKNOWN"),
            billable_seconds=_number(row, "billableSeconds", where),
            queued_seconds=_number(row, "queuedSeconds", where),
            machine_type=str(row.get("machineType") or ""),
            replica_count=int(_number(row, "replicaCount", where, default=1)),
            strategy=str(row.get("strategy") or ""),
            spot_cost=_number(row, "spotCost", where),
            on_demand_cost=_number(row, "onDemandCost", where),
            savings=_number(row, "savings", where),
        )


@dataclass(frozen=True)
class AttemptRecord:
    """One run of the training process, as the trainer records it under ``_attempts/``."""

    attempt_id: str
    start: float | None
    end: float | None
    first_step: int | None
    last_committed_step: int | None
    exit_reason: str  # finished | preempted | error | unknown (still running or killed)
    last_commit_time: float | None = None  # survives retention deleting the step's manifest

    @classmethod
    def from_json(cls, record: Any, where: str) -> AttemptRecord | None:
        """Parse a record; None (with a warning) when it is not an object or its times are bad."""
        if not isinstance(record, Mapping):
            log.warning("skipping %s: not an object", where)
            return None
        try:
            start = parse_time(record.get("start_time"), f"{where}.start_time")
            end = parse_time(record.get("end_time"), f"{where}.end_time")
        except ReportError as exc:
            log.warning("skipping attempt record: %s", exc)
            return None

        def step(key: str) -> int | None:
            value = record.get(key)
            try:
                return None if value is None or isinstance(value, bool) else int(value)
            except (TypeError, ValueError):
                return None

        return cls(
            attempt_id=str(record.get("attempt_id") or where),
            start=start,
            end=end,
            first_step=step("first_step"),
            last_committed_step=step("last_committed_step"),
            exit_reason=str(record.get("exit_reason") or "unknown"),
            last_commit_time=_optional_time(record.get("last_commit_time"), where),
        )


@dataclass(frozen=True)
class CheckpointSave:
    """One committed checkpoint step."""

    step: int
    time: float
    loss: float | None


def last_commit_in(attempt: AttemptRecord, saves: list[CheckpointSave]) -> float | None:
    """Time of the last checkpoint committed during ``attempt``; None when it committed none."""
    if attempt.start is None or attempt.end is None:
        return None
    commits = [s.time for s in saves if attempt.start <= s.time <= attempt.end]
    if attempt.last_commit_time is not None and attempt.start <= attempt.last_commit_time:
        commits.append(min(attempt.last_commit_time, attempt.end))
    return max(commits) if commits else None


@dataclass
class RunData:
    """Everything a report shows about one run."""

    run_dir: Path
    outcome: str
    job_names: list[str]
    ledger: list[LedgerRow]
    attempts: list[AttemptRecord] = field(default_factory=list)
    saves: list[CheckpointSave] = field(default_factory=list)
    checkpoint_uri: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    started: float | None = None
    finished: float | None = None
    passed: bool | None = None  # the quality gate, when the run had one
    serving: list[dict[str, Any]] = field(default_factory=list)  # serving ledger rows, if any

    @property
    def job_name(self) -> str:
        """The (last) CustomJob of the run, or ``-``."""
        return self.job_names[-1] if self.job_names else "-"


def _optional_time(value: Any, where: str) -> float | None:
    """An optional time field: None when absent or unreadable (logged), never an error."""
    try:
        return parse_time(value, f"{where}.last_commit_time")
    except ReportError as exc:
        log.warning("ignoring %s", exc)
        return None


def _loss_of(metadata: Mapping[str, Any]) -> float | None:
    # kfp_spot.trainer keeps save(..., metrics=) under "metrics"; a plain manifest may hold it flat.
    metrics = metadata.get("metrics")
    value = metrics.get("loss") if isinstance(metrics, Mapping) else None
    if value is None:
        value = metadata.get("loss")
    if isinstance(value, bool):
        return None
    try:
        loss = float(value)
    except (TypeError, ValueError):
        return None
    return loss if math.isfinite(loss) else None


def read_saves(checkpoint_uri: str) -> list[CheckpointSave]:
    """Committed checkpoint steps under ``checkpoint_uri`` (torn ones skipped), by step."""
    if not checkpoint_uri:
        return []
    manifests = checkpoints.committed_steps(checkpoint_uri)
    return [CheckpointSave(m.step, m.wall_time, _loss_of(m.metadata)) for m in manifests]


def read_attempts(checkpoint_uri: str, fallback: Any = None) -> list[AttemptRecord]:
    """Attempt records under ``<checkpoint_uri>/_attempts``, else those given in ``fallback``."""
    raw = checkpoints.read_attempt_records(checkpoint_uri) if checkpoint_uri else []
    source = "_attempts"
    if not raw and isinstance(fallback, list):
        raw, source = fallback, f"{RUN_FILE}: attempt_records"
    parsed = (AttemptRecord.from_json(r, f"{source}[{i}]") for i, r in enumerate(raw))
    records = [r for r in parsed if r is not None]
    return sorted(records, key=lambda r: (r.start is None, r.start or 0.0, r.attempt_id))


def load_run(run_dir: str | Path) -> RunData:
    """Read a run directory.

    Args:
        run_dir: a folder holding ``run.json`` (schema: docs/reports.md).

    Returns:
        The run, with checkpoint saves and attempt records read from its checkpoint root.

    Raises:
        ReportError: when ``run.json`` is missing, not JSON, or a field has the wrong type.
    """
    run_dir = Path(run_dir)
    path = run_dir / RUN_FILE
    if not run_dir.is_dir():
        raise ReportError(f"run directory {run_dir} does not exist")
    if not path.is_file():
        raise ReportError(f"{run_dir} has no {RUN_FILE} (`kfp-spot run` writes one)")
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path} is not readable JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ReportError(f"{path} must hold a JSON object")

    outcome = doc.get("outcome")
    if not isinstance(outcome, str) or not outcome:
        raise ReportError(f"{RUN_FILE}: 'outcome' must be a non-empty string, got {outcome!r}")
    job_names = doc.get("job_names")
    if job_names is None:
        job_names = [doc["job_name"]] if doc.get("job_name") else []
    if not isinstance(job_names, list) or not all(isinstance(j, str) for j in job_names):
        raise ReportError(f"{RUN_FILE}: 'job_names' must be a list of strings")
    ledger_raw = doc.get("ledger", [])
    if not isinstance(ledger_raw, list):
        raise ReportError(f"{RUN_FILE}: 'ledger' must be a list of ledger rows")
    default_job = job_names[-1] if job_names else ""
    ledger = [
        LedgerRow.from_json(row, f"{RUN_FILE}: ledger[{i}]", default_job)
        for i, row in enumerate(ledger_raw)
    ]
    for row in ledger:
        if row.job and row.job not in job_names:
            job_names.append(row.job)
    metrics = doc.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise ReportError(f"{RUN_FILE}: 'metrics' must be an object")
    checkpoint_uri = doc.get("checkpoint_uri") or ""
    if not isinstance(checkpoint_uri, str):
        raise ReportError(f"{RUN_FILE}: 'checkpoint_uri' must be a string")
    serving = doc.get("serving") or []
    if not isinstance(serving, list) or not all(
        isinstance(r, dict) and isinstance(r.get("billableSeconds"), (int, float)) for r in serving
    ):
        raise ReportError(f"{RUN_FILE}: 'serving' must be a list of serving ledger rows")
    return RunData(
        run_dir=run_dir,
        outcome=outcome,
        job_names=job_names,
        ledger=ledger,
        attempts=read_attempts(checkpoint_uri, doc.get("attempt_records")),
        saves=read_saves(checkpoint_uri),
        checkpoint_uri=checkpoint_uri,
        metrics=metrics,
        started=parse_time(doc.get("started"), f"{RUN_FILE}: started"),
        finished=parse_time(doc.get("finished"), f"{RUN_FILE}: finished"),
        passed=next(
            (p for p in (doc.get("passed"), metrics.get("passed")) if isinstance(p, bool)), None
        ),
        serving=serving,
    )
