"""Reading a run directory: ``run.json``, the checkpoint manifests and the attempt records.

``run.json``'s schema is in docs/reports.md. Everything here reads defensively: unknown fields are
ignored, optional ones may be missing, and a field of the wrong type is reported by name
(``run.json: ledger[2].spotCost must be a number ...``) instead of a traceback. The rows and records
become :mod:`kfp_spot.accounting`'s types: the report sums them with the same code as the
launcher's job report.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfp_spot import accounting, checkpoints, fs
from kfp_spot.accounting import Attempt, ReplicaLife
from kfp_spot.checkpoints import AttemptRecord
from kfp_spot.reports.evaluations import Evaluation, evaluated_text, evaluations_of
from kfp_spot.reports.runfile import RUN_FILE, ReportError

log = logging.getLogger(__name__)

DEFAULT_METRIC = "loss"
"""The metric a report charts when a checkpoint records it (:func:`chart_metric`)."""


@dataclass(frozen=True)
class CheckpointSave:
    """One committed checkpoint step.

    Attributes:
        step: the committed step.
        time: when it was committed.
        loss: its value of the metric the report charts (:attr:`RunData.metric_name`, ``loss``
            when the trainer records one); None when its manifest records none.
    """

    step: int
    time: float
    loss: float | None


@dataclass(frozen=True)
class CommitMark:
    """A commit the timeline shows: on disk, or one that mattered and retention deleted.

    Attributes:
        step: the committed step.
        time: when it was committed.
        loss: its manifest's value of the charted metric (:attr:`RunData.metric_name`); None
            when unknown (or the manifest is gone).
        on_disk: whether the step is still under the checkpoint root.
        resumed_from: whether an attempt resumed from it.
    """

    step: int
    time: float
    loss: float | None
    on_disk: bool
    resumed_from: bool


@dataclass
class RunData:
    """Everything a report shows about one run.

    Attributes:
        ledger: the billing ledger's attempts (every job's), or None when ``run.json`` has none.
        records: the trainer's attempt records.
        saves: the committed checkpoints.
        newer_steps: committed steps in a newer format than this version reads (not in saves).
        metric_name: the metric whose values ``saves`` hold (:func:`chart_metric`): ``loss``,
            or the trainer's own metric when it records no loss.
        commits: every known commit time (the saves', and the records' ``last_commit_time``,
            which survives retention deleting a step).
        serving: the serving replica lives of the run's endpoints (``run.json``'s ``serving``).
        job_regions: each CustomJob's region (``run.json``'s ``job_regions``; else its name's).
        job_launches: the launch task that submitted each CustomJob (``run.json``'s
            ``job_launches``): a failover is a move of one launch's jobs, not of several launches.
        regions: the order of regions the launch was given (``run.json``'s ``regions``; the first
            is the home region), empty when it was given none.
        evaluated: what a run that launched no CustomJob evaluated (:func:`evaluated_text`).
        evaluations: each task's evaluation, when several tasks evaluated (a sweep).
    """

    run_dir: Path
    outcome: str
    job_names: list[str]
    ledger: list[Attempt] | None
    records: list[AttemptRecord] = field(default_factory=list)
    saves: list[CheckpointSave] = field(default_factory=list)
    newer_steps: list[int] = field(default_factory=list)
    metric_name: str = DEFAULT_METRIC
    commits: list[float] = field(default_factory=list)
    checkpoint_uri: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    started: float | None = None
    finished: float | None = None
    passed: bool | None = None  # the quality gate, when the run had one
    serving: list[ReplicaLife] = field(default_factory=list)
    job_regions: dict[str, str] = field(default_factory=dict)
    job_launches: dict[str, str] = field(default_factory=dict)
    regions: list[str] = field(default_factory=list)
    evaluated: str = ""
    evaluations: list[Evaluation] = field(default_factory=list)

    @property
    def job_name(self) -> str:
        """The (last) CustomJob of the run, or ``-``."""
        return self.job_names[-1] if self.job_names else "-"

    @property
    def kept_commits(self) -> list[CommitMark]:
        """The commits the timeline shows (:func:`commit_marks`), whatever retention deleted."""
        return commit_marks(self.saves, self.records)

    def account(self) -> accounting.Summary:
        """The run's accounting summary (the same code as the launcher's job report).

        A finished run's jobs ended (how is not recorded here): a record never closed is not live.
        """
        state = (
            accounting.EndReason.RUNNING if self.finished is None else accounting.EndReason.UNKNOWN
        )
        return accounting.account(
            ledger=self.ledger,
            records=self.records,
            commits=self.commits,
            jobs=[accounting.JobRun(name, "", end_reason=state) for name in self.job_names],
        )

    def account_regions(self, summary: accounting.Summary) -> accounting.RegionSummary:
        """Where the run's attempts ran (:mod:`kfp_spot.accounting.regions`), from ``summary``."""
        return accounting.summarize_regions(
            summary.attempts,
            job_names=self.job_names,
            job_regions=self.job_regions,
            home=self.regions[0] if self.regions else "",
            launches=self.job_launches or None,
        )

    def account_serving(self) -> accounting.ServingSummary | None:
        """The serving replicas' summary; None when the run served nothing."""
        return accounting.summarize_serving(self.serving) if self.serving else None


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _metrics_of(metadata: Mapping[str, Any]) -> dict[str, float]:
    """The numeric metrics a manifest records (non-numbers and non-finite values left out)."""
    # kfp_spot.trainer keeps save(..., metrics=) under "metrics"; a plain manifest may hold its
    # loss flat.
    raw = metadata.get("metrics")
    found = {str(k): _number(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
    if found.get(DEFAULT_METRIC) is None:
        found[DEFAULT_METRIC] = _number(metadata.get(DEFAULT_METRIC))
    return {name: value for name, value in found.items() if value is not None}


def chart_metric(recorded: Sequence[Mapping[str, Any]]) -> str:
    """The one metric a report shows (report.md's "Final <name>", report.png's lower panel).

    ``loss`` when any checkpoint records it; otherwise, of the names the checkpoints record as
    numbers, the first in alphabetical order that ends in ``loss`` (``train_loss``,
    ``val_loss``), else the first in alphabetical order (manifests keep metric names sorted, so
    the trainer's own order is not known). ``loss`` when nothing numeric is recorded.

    Args:
        recorded: each checkpoint's numeric metrics (name -> value).
    """
    names = sorted({name for metrics in recorded for name in metrics})
    if DEFAULT_METRIC in names or not names:
        return DEFAULT_METRIC
    return next((n for n in names if n.lower().endswith("loss")), names[0])


def read_saves(checkpoint_uri: str) -> tuple[list[CheckpointSave], str, list[int]]:
    """Committed checkpoint steps under ``checkpoint_uri`` (torn ones skipped), by step.

    Returns:
        The saves, each with its value of the charted metric, that metric's name
        (:func:`chart_metric`), and the steps in a newer format than this version reads.
    """
    if not checkpoint_uri:
        return [], DEFAULT_METRIC, []
    newer: list[int] = []
    manifests = checkpoints.committed_steps(checkpoint_uri, newer=newer)
    recorded = [_metrics_of(m.metadata) for m in manifests]
    name = chart_metric(recorded)
    saves = [
        CheckpointSave(m.step, m.wall_time, metrics.get(name))
        for m, metrics in zip(manifests, recorded, strict=True)
    ]
    return saves, name, newer


def commit_marks(
    saves: Sequence[CheckpointSave], records: Sequence[AttemptRecord]
) -> list[CommitMark]:
    """The commits a report shows, by step, whatever retention deleted.

    Every step still on disk, and from the attempt records (which survive retention) every step
    an attempt resumed from and the last commit. A record gives its last committed step with
    that commit's time; a step an attempt resumed from is placed at the time it was committed
    (on disk, or as some attempt's last commit). A resumed-from step whose commit time nothing
    records is left out.
    """
    committed_at = {s.step: s.time for s in saves}
    for record in records:
        step, when = record.last_committed_step, record.last_commit_time
        # An attempt that resumed and committed nothing has its first step as its last one
        # and no commit time of its own.
        if step is not None and when is not None:
            committed_at.setdefault(step, when)
    resumed = {r.first_step for r in records if r.first_step}
    wanted = {s.step for s in saves} | resumed
    if committed_at:
        wanted.add(max(committed_at))
    losses = {s.step: s.loss for s in saves}
    return [
        CommitMark(step, committed_at[step], losses.get(step), step in losses, step in resumed)
        for step in sorted(wanted)
        if step in committed_at
    ]


def read_attempts(checkpoint_uri: str, fallback: Any = None) -> list[AttemptRecord]:
    """Attempt records under ``<checkpoint_uri>/_attempts``, else those given in ``fallback``."""
    records = accounting.read_records(checkpoint_uri)
    if not records and isinstance(fallback, list):
        records = checkpoints.parse_attempt_records(fallback, f"{RUN_FILE}: attempt_records")
    return records


STORAGE_TIMEOUT = 20.0
"""Seconds a remote checkpoint root may take to answer its first listing (gcsfs's retries of an
unreachable host take minutes: the report says so instead)."""


def _check_reachable(checkpoint_uri: str) -> None:
    """Refuse, in one line, a remote checkpoint root that does not answer in time.

    Without it every read of the root (steps, attempt records, commits) waits through gcsfs's
    retries in turn, and the report either fails with a traceback or leaves the checkpoints out.
    """
    if not checkpoint_uri or not fs.is_remote(checkpoint_uri):
        return
    try:
        fs.list_names(checkpoint_uri, timeout=STORAGE_TIMEOUT)
    except FileNotFoundError:
        return  # nothing written there yet: a report without checkpoints
    except checkpoints.storage_errors(ValueError) as exc:  # FSTimeoutError too
        reason = str(exc) or type(exc).__name__
        raise ReportError(
            f"{RUN_FILE}: checkpoint_uri {checkpoint_uri} cannot be read ({reason}); the report "
            "needs its checkpoints and attempt records: run it where that storage is reachable "
            "(and credentials work)"
        ) from exc


def _time(value: Any, where: str) -> float | None:
    try:
        return accounting.parse_time(value, where)
    except accounting.AccountingError as exc:
        raise ReportError(str(exc)) from exc


def load_run(run_dir: str | os.PathLike[str]) -> RunData:
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
        what = "is not a directory" if run_dir.exists() else "does not exist"
        raise ReportError(f"run directory {run_dir} {what}")
    if path.exists() and not path.is_file():  # a FIFO would hang the read, a folder fail it
        raise ReportError(f"{path} is not a regular file; `kfp-spot run` writes it as one")
    if not path.is_file():
        raise ReportError(f"{run_dir} has no {RUN_FILE} (`kfp-spot run` writes one)")
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path} is not readable JSON: {exc}") from exc
    except RecursionError:  # [[[[...: json's parser recurses once per level
        raise ReportError(f"{path} is not readable JSON: nested too deeply") from None
    if not isinstance(doc, dict):
        raise ReportError(f"{path} must hold a JSON object")
    return run_from_json(run_dir, doc)


def run_from_json(run_dir: str | Path, doc: Mapping[str, Any]) -> RunData:
    """The run described by ``doc`` (``run.json``'s content) in ``run_dir``.

    Raises:
        ReportError: when a field has the wrong type (the message names it).
    """
    run_dir = Path(run_dir)
    outcome = doc.get("outcome")
    if not isinstance(outcome, str) or not outcome:
        raise ReportError(f"{RUN_FILE}: 'outcome' must be a non-empty string, got {outcome!r}")
    job_names = doc.get("job_names")
    if job_names is None:
        if not isinstance(job_name := doc.get("job_name") or "", str):  # named as the file has it
            raise ReportError(f"{RUN_FILE}: 'job_name' must be a string, got {job_name!r}")
        job_names = [job_name] if job_name else []
    if not isinstance(job_names, list) or not all(isinstance(j, str) for j in job_names):
        raise ReportError(f"{RUN_FILE}: 'job_names' must be a list of strings")
    job_names = list(job_names)
    ledger_raw = doc.get("ledger", [])
    if not isinstance(ledger_raw, list):
        raise ReportError(f"{RUN_FILE}: 'ledger' must be a list of ledger rows")
    try:
        ledger = accounting.ledger_attempts(
            ledger_raw,
            where=f"{RUN_FILE}: ledger",
            default_job=job_names[-1] if job_names else "",
        )
    except accounting.AccountingError as exc:
        raise ReportError(str(exc)) from exc
    serving_raw = doc.get("serving") or []
    if not isinstance(serving_raw, list):
        raise ReportError(f"{RUN_FILE}: 'serving' must be a list of serving ledger rows")
    try:
        serving = accounting.serving_lives(serving_raw, where=f"{RUN_FILE}: serving")
    except accounting.AccountingError as exc:
        raise ReportError(str(exc)) from exc
    for attempt in ledger:
        if attempt.job_name and attempt.job_name not in job_names:
            job_names.append(attempt.job_name)
    metrics = doc.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise ReportError(f"{RUN_FILE}: 'metrics' must be an object")
    checkpoint_uri = doc.get("checkpoint_uri") or ""
    if not isinstance(checkpoint_uri, str):
        raise ReportError(f"{RUN_FILE}: 'checkpoint_uri' must be a string")
    _check_reachable(checkpoint_uri)
    job_regions = doc.get("job_regions") or {}
    if not isinstance(job_regions, dict) or not all(
        isinstance(v, str) for v in job_regions.values()
    ):
        raise ReportError(f"{RUN_FILE}: 'job_regions' must map job names to regions")
    job_launches = doc.get("job_launches") or {}
    if not isinstance(job_launches, dict) or not all(
        isinstance(v, str) for v in job_launches.values()
    ):
        raise ReportError(f"{RUN_FILE}: 'job_launches' must map job names to launch tasks")
    regions = doc.get("regions") or []
    if not isinstance(regions, list) or not all(isinstance(r, str) for r in regions):
        raise ReportError(f"{RUN_FILE}: 'regions' must be a list of regions")
    records = read_attempts(checkpoint_uri, doc.get("attempt_records"))
    saves, metric_name, newer = read_saves(checkpoint_uri)
    commits = set(accounting.read_commits(checkpoint_uri))
    commits.update(r.last_commit_time for r in records if r.last_commit_time is not None)
    return RunData(
        run_dir=run_dir,
        outcome=outcome,
        job_names=job_names,
        ledger=ledger,
        records=records,
        saves=saves,
        newer_steps=newer,
        metric_name=metric_name,
        commits=sorted(commits),
        checkpoint_uri=checkpoint_uri,
        metrics=metrics,
        started=_time(doc.get("started"), f"{RUN_FILE}: started"),
        finished=_time(doc.get("finished"), f"{RUN_FILE}: finished"),
        passed=next(
            (p for p in (doc.get("passed"), metrics.get("passed")) if isinstance(p, bool)), None
        ),
        serving=serving,
        job_regions=dict(job_regions),
        job_launches=dict(job_launches),
        regions=list(regions),
        evaluated=evaluated_text(doc),
        evaluations=evaluations_of(doc),
    )
