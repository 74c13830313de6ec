"""Which checkpoint step to evaluate, and getting a verified local copy of it.

``step`` is ``latest`` (the step the checkpoint artifact names, else the newest step directory),
an integer, or ``best:<metric>[:max|:min]`` over the metrics recorded in the committed manifests'
metadata. The chosen step must verify through :func:`kfp_spot.checkpoints.verify`, the check
restore uses too (sealed manifest, its fields and state index, every file's type, size and
checksum);
when it does not, the evaluation stops with an error that says so, unless
``fallback_to_previous`` asks for the newest earlier step that verifies (or, for ``best``, the
next best one). Steps skipped that way are reported. A step in a newer format than this
version reads (:class:`~kfp_spot.checkpoints.CheckpointFormatError`) is no damage: it is never
skipped, and ``best:<metric>`` does not rank without it; the evaluation stops, naming it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfp_spot import checkpoints, fs
from kfp_spot.checkpoints import CheckpointCorruptError, CheckpointError, Manifest
from kfp_spot.checkpoints.ranking import smaller_is_better
from kfp_spot.evaluation.errors import EvaluationInputError

_BEST_RE = re.compile(r"^best:([^:]+?)(?::(max|min))?$")
_STEP_HELP = '"latest", a step number like "40", or "best:<metric>[:max|:min]"'


@dataclass(frozen=True)
class StepRequest:
    """A parsed ``step`` input."""

    kind: str  # "latest", "step" or "best"
    step: int | None = None
    metric: str = ""
    mode: str = "max"

    def __str__(self) -> str:
        if self.kind == "step":
            return f"step {self.step}"
        if self.kind == "best":
            return f"best {self.metric} ({self.mode})"
        return "latest"


@dataclass
class Selection:
    """The step chosen for evaluation and how.

    Attributes:
        manifest: the verified manifest of the chosen step.
        local_dir: a local directory holding the verified files of that step.
        rule: how it was chosen, in words.
        skipped: ``(step, reason)`` for candidates that failed verification (fallback only).
    """

    manifest: Manifest
    local_dir: Path
    rule: str
    skipped: list[tuple[int, str]] = field(default_factory=list)


def parse_step(step: Any) -> StepRequest:
    """Parse the ``step`` input.

    Raises:
        EvaluationInputError: it is none of the accepted forms.
    """
    if isinstance(step, bool):
        raise EvaluationInputError("step", f"{step!r} is not valid; use {_STEP_HELP}")
    if isinstance(step, int):
        step = str(step)
    if not isinstance(step, str):
        raise EvaluationInputError("step", f"{step!r} is not valid; use {_STEP_HELP}")
    text = step.strip()
    if text in ("", "latest"):
        return StepRequest("latest")
    if re.fullmatch(r"\d+", text):
        return StepRequest("step", step=int(text))
    match = _BEST_RE.fullmatch(text)
    if match:
        metric = match.group(1).strip()
        mode = match.group(2) or ("min" if smaller_is_better(metric) else "max")
        return StepRequest("best", metric=metric, mode=mode)
    raise EvaluationInputError("step", f"{step!r} is not valid; use {_STEP_HELP}")


def metric_of(metadata: Mapping[str, Any], metric: str) -> float | None:
    """A numeric metric recorded in manifest metadata (top level or under ``metrics``).

    The state index's version (``state_format``, at the top level) is a number but no metric.
    """
    tables = [metadata.get("metrics")]
    if metric != checkpoints.STATE_FORMAT_KEY:
        tables.insert(0, metadata)
    for table in tables:
        if isinstance(table, Mapping) and metric in table and _ranks(value := table[metric]):
            return float(value)
    return None


def _ranks(value: Any) -> bool:
    """Whether a recorded value ranks: a finite number, as for the trainer's ``keep_best``."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value)


def materialize_step(root: str, step: int, workdir: Path) -> tuple[Manifest, Path]:
    """Verify ``step`` and return its manifest and a local directory of its verified files.

    Local checkpoints are verified in place. Remote ones are downloaded first and the local copy
    is verified, so what the entry point loads is exactly what was checked.

    Raises:
        CheckpointCorruptError: the step is torn or a file does not match its manifest.
        CheckpointFormatError: the step is in a newer format than this version reads.
    """
    local_step = fs.to_local_path(checkpoints.step_dir(root, step))
    if local_step is not None:
        manifest = checkpoints.verify(root, step, check_hashes=True)
        return manifest, Path(local_step)
    manifest = checkpoints.read_manifest(root, step)
    local_root = workdir / "checkpoints"
    names = [*checkpoints.files_of(manifest), checkpoints.MANIFEST_NAME]
    for name in names:
        remote_fs, remote = fs.filesystem(fs.join(checkpoints.step_dir(root, step), name))
        target = local_root / f"step-{step}" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            remote_fs.get_file(remote, str(target))
        except FileNotFoundError as exc:
            raise CheckpointCorruptError(f"step {step}: file {name} is missing") from exc
    local = checkpoints.verify(str(local_root), step, check_hashes=True)
    if local.digest != manifest.digest:
        raise CheckpointCorruptError(f"step {step}: the manifest changed while it was downloaded")
    return local, local_root / f"step-{step}"


def _committed_list(root: str) -> str:
    steps = [m.step for m in checkpoints.committed_steps(root)]
    return ", ".join(map(str, steps)) or "none"


def select_step(
    root: str,
    request: StepRequest,
    *,
    latest_hint: int | None,
    fallback_to_previous: bool,
    load: Callable[[int], tuple[Manifest, Path]],
) -> Selection:
    """Choose, verify and fetch the step to evaluate.

    Args:
        root: the checkpoint root (``<base>/checkpoints``).
        request: the parsed ``step`` input.
        latest_hint: the step the checkpoint artifact names as latest, if any.
        fallback_to_previous: on a step that does not verify, use the one before it instead.
        load: verifies one step and returns its manifest and local directory (see
            :func:`materialize_step`).

    Returns:
        The selection.

    Raises:
        CheckpointError: there is no step to evaluate.
        CheckpointCorruptError: the chosen step is torn (and no fallback was asked for).
        CheckpointFormatError: a step it reads is in a newer format (never skipped).
        EvaluationInputError: the requested step or metric does not exist.
    """
    present = checkpoints.list_steps(root)
    if request.kind == "best":
        return _select_best(root, request, fallback_to_previous, load)
    if request.kind == "step":
        target = int(request.step or 0)
        if target not in present:
            raise EvaluationInputError(
                "step",
                f"step {target} does not exist under {root} (steps there: "
                f"{', '.join(map(str, present)) or 'none'})",
            )
        rule = f"step {target} (requested)"
    else:
        if latest_hint is not None:
            target, rule = latest_hint, f"latest: step {latest_hint}, as the checkpoint names it"
        elif present:
            target, rule = present[-1], f"latest: step {present[-1]}, the newest step directory"
        else:
            raise CheckpointError(f"no checkpoint steps under {root}: nothing to evaluate")
    try:
        manifest, local = load(target)
        return Selection(manifest, local, rule)
    except CheckpointCorruptError as exc:
        committed = _committed_list(root)
        if committed == "none":  # neither a step number nor the fallback would find one
            raise CheckpointCorruptError(
                f"the {'latest' if request.kind == 'latest' else 'requested'} checkpoint "
                f"step-{target} under {root} is torn or corrupted: {exc}. No step there is "
                "committed (none has a sealed manifest.json: the job stopped before its first "
                "save completed, or its code wrote step directories without committing them): "
                "nothing to evaluate"
            ) from exc
        if not fallback_to_previous:
            raise CheckpointCorruptError(
                f"the {'latest' if request.kind == 'latest' else 'requested'} checkpoint "
                f"step-{target} under {root} is torn or corrupted: {exc}. Committed steps: "
                f'{committed}. Evaluate one of them with step="N", or set '
                "fallback_to_previous to use the newest earlier one."
            ) from exc
        skipped = [(target, str(exc))]
    for step in sorted((s for s in present if s < target), reverse=True):
        try:
            manifest, local = load(step)
        except CheckpointCorruptError as exc:
            skipped.append((step, str(exc)))
            continue
        rule += f"; fell back to step {step} (newest earlier step that verifies)"
        return Selection(manifest, local, rule, skipped)
    raise CheckpointCorruptError(
        f"step-{target} under {root} is torn or corrupted and no earlier step verifies: "
        + "; ".join(reason for _, reason in skipped)
    )


def _select_best(
    root: str,
    request: StepRequest,
    fallback_to_previous: bool,
    load: Callable[[int], tuple[Manifest, Path]],
) -> Selection:
    # Candidates: every step with a readable manifest. Files are verified only for the chosen
    # step (in ``load``), so a damaged best step is reported, not silently passed over.
    committed = []
    for step in checkpoints.list_steps(root):
        try:
            committed.append(checkpoints.read_manifest(root, step))
        except CheckpointCorruptError:
            continue  # no manifest: never committed
    if not committed:
        raise CheckpointError(f"no committed checkpoint steps under {root}: nothing to evaluate")
    scored = [
        (value, m.step)
        for m in committed
        if (value := metric_of(m.metadata, request.metric)) is not None
    ]
    if not scored:
        recorded = sorted(
            {k for m in committed for k in m.metadata if metric_of(m.metadata, k) is not None}
            | {
                k
                for m in committed
                for k in (m.metadata.get("metrics") or {})
                if metric_of(m.metadata, k) is not None
            }
        )
        unranked = next(
            (
                (m.step, table[request.metric])
                for m in reversed(committed)
                for table in (m.metadata.get("metrics"), m.metadata)
                if isinstance(table, Mapping)
                and request.metric in table
                and not _ranks(table[request.metric])
            ),
            None,
        )
        if unranked is not None:  # recorded, but as no number (text formatted for a log) or NaN
            value = unranked[1]
            finite = isinstance(value, (int, float)) and not isinstance(value, bool)
            raise EvaluationInputError(
                "step",
                f"best:{request.metric}: the committed steps under {root} record "
                f"{request.metric!r}, but as no {'finite ' if finite else ''}number (step "
                f"{unranked[0]}: {value!r}), so none ranks; "
                + (
                    "a NaN or infinite value never does (as for the trainer's keep_best): "
                    "evaluate a step by number"
                    if finite
                    else "record it as a number (save(..., metrics={"
                    f"{request.metric!r}: float(...)}})) or evaluate a step by number"
                ),
            )
        raise EvaluationInputError(
            "step",
            f"best:{request.metric}: no committed step under {root} records {request.metric!r} "
            f"in its manifest metadata (recorded metrics: {', '.join(recorded) or 'none'})",
        )
    sign = 1.0 if request.mode == "max" else -1.0
    # Best value first; among equals the later step.
    ranked = sorted(scored, key=lambda vs: (sign * vs[0], vs[1]), reverse=True)
    skipped: list[tuple[int, str]] = []
    for value, step in ranked:
        try:
            manifest, local = load(step)
        except CheckpointCorruptError as exc:
            if not fallback_to_previous:
                raise CheckpointCorruptError(
                    f"the best checkpoint by {request.metric} (step-{step}) under {root} is "
                    f"corrupted: {exc}. Set fallback_to_previous to take the next best."
                ) from exc
            skipped.append((step, str(exc)))
            continue
        rule = f"best {request.metric} ({request.mode}): step {step} with {value:g}"
        if skipped:
            rule += " (better steps failed verification)"
        return Selection(manifest, local, rule, skipped)
    raise CheckpointCorruptError(
        f"no step recording {request.metric} under {root} verifies: "
        + "; ".join(reason for _, reason in skipped)
    )
