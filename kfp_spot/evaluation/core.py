"""evaluate: a verified checkpoint step → the package's ``evaluate()`` → metrics and a verdict."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfp_spot import envcache, fs
from kfp_spot.checkpoints import CheckpointError
from kfp_spot.evaluation.entry_point import check_entry_point, entry_point_for
from kfp_spot.evaluation.errors import EvaluationError, EvaluationInputError
from kfp_spot.evaluation.invoke import run_entry_point
from kfp_spot.evaluation.metric_values import as_metadata
from kfp_spot.evaluation.result import (
    ConfusionMatrix,
    parse_result,
)
from kfp_spot.evaluation.selection import (
    Selection,
    materialize_step,
    parse_step,
    select_step,
)
from kfp_spot.evaluation.thresholds import Threshold, parse_thresholds
from kfp_spot.layout import EMPTY, EXPECTED, KFP_SPOT, inspect_layout, misplaced_root
from kfp_spot.validation.component_inputs import check_input
from kfp_spot.vertex.storage import check_checkpoint_uri

log = logging.getLogger(__name__)

FOREIGN_INPUT = "allow_foreign_layout"
"""The input that evaluates a directory without kfp-spot manifests as it is."""


@dataclass(frozen=True)
class ThresholdCheck:
    """One threshold and whether the evaluated metric met it."""

    threshold: Threshold
    value: float
    passed: bool


@dataclass
class EvaluationResult:
    """What one evaluation found.

    Attributes:
        checkpoint_uri: the checkpoint root.
        step: the evaluated step.
        manifest_digest: sha256 of that step's manifest.json (names exactly what was scored).
        manifest_time: when the step was committed (RFC 3339).
        selection: how the step was chosen, in words.
        skipped: ``(step, reason)`` of steps that failed verification and were passed over.
        entry_point: ``module:function`` that scored it.
        params: the parameters it was given.
        package_uris: the packages installed for it.
        metrics: metric name → value, as ``evaluate()`` returned them.
        confusion_matrix: when ``evaluate()`` returned one.
        checks: every threshold with the value it was held against.
        passed: every threshold held.
        seconds: wall time of the entry point (environment set-up excluded).
        layout: ``kfp-spot`` (a verified step) or ``foreign`` (a trainer's own directory,
            evaluated whole with ``allow_foreign_layout``; ``step`` is -1).
        verified: whether what was scored was checked against a manifest (never for foreign).
    """

    checkpoint_uri: str
    step: int
    manifest_digest: str
    manifest_time: str
    selection: str
    skipped: list[tuple[int, str]]
    entry_point: str
    params: dict[str, Any]
    package_uris: list[str]
    metrics: dict[str, float]
    confusion_matrix: ConfusionMatrix | None
    checks: list[ThresholdCheck] = field(default_factory=list)
    passed: bool = True
    seconds: float = 0.0
    layout: str = KFP_SPOT
    verified: bool = True

    def metrics_metadata(self) -> dict[str, Any]:
        """The Metrics artifact's metadata: the metrics plus what was evaluated and the verdict."""
        out: dict[str, Any] = {k: as_metadata(v) for k, v in self.metrics.items()}
        out.update(
            checkpoint_step=self.step,
            checkpoint_manifest_sha256=self.manifest_digest,
            checkpoint_uri=self.checkpoint_uri,
            checkpoint_layout=self.layout,
            checkpoint_verified=self.verified,
            passed=self.passed,
        )
        return out

    def confusion_matrix_metadata(self) -> dict[str, Any] | None:
        """``confusionMatrix`` as ``ClassificationMetrics.log_confusion_matrix`` writes it."""
        if self.confusion_matrix is None:
            return None
        return {
            "annotationSpecs": [{"displayName": label} for label in self.confusion_matrix.labels],
            "rows": [{"row": list(row)} for row in self.confusion_matrix.matrix],
        }


def _check_inputs(
    checkpoint_uri: str, package_uris: Sequence[str], entry_point: str, params: Any
) -> tuple[str, list[str], dict[str, Any]]:
    if not isinstance(checkpoint_uri, str) or not checkpoint_uri.strip():
        raise EvaluationInputError(
            "checkpoint", "the checkpoint URI is empty: connect the launch step's checkpoint"
        )
    check_input(EvaluationInputError, "checkpoint", check_checkpoint_uri, checkpoint_uri.strip())
    if isinstance(package_uris, str) or not package_uris:
        raise EvaluationInputError(
            "package", "no package URIs: connect the prepare_package step's package"
        )
    uris = [str(u) for u in package_uris]
    check_entry_point(entry_point)
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise EvaluationInputError(
            "params", f"must be a mapping of parameter -> value, got {type(params).__name__}"
        )
    try:
        json.dumps(dict(params))
    except (TypeError, ValueError) as exc:
        raise EvaluationInputError("params", f"must be JSON-serialisable: {exc}") from exc
    return checkpoint_uri.strip().rstrip("/"), uris, dict(params)


def _meant(name: str, returned: Iterable[str]) -> str:
    """A returned metric's name close to ``name`` (its prefix, its case, a typo); else ``""``."""
    import difflib

    returned = list(returned)
    lowered = name.lower()
    close = [r for r in returned if r.lower().startswith(lowered) or lowered.startswith(r.lower())]
    close = close or difflib.get_close_matches(name, returned, n=1)
    return close[0] if close else ""


def check_thresholds(
    entry_point: str, wanted: Sequence[Threshold], metrics: Mapping[str, float]
) -> list[ThresholdCheck]:
    """Each threshold held against the metric it names.

    Raises:
        EvaluationInputError: naming ``thresholds``, every metric they name that the entry point
            did not return (a close name it did return suggested), and what it returned, with
            the values, which the failed evaluation outputs nowhere else.
    """
    missing = list(dict.fromkeys(t.metric for t in wanted if t.metric not in metrics))
    if missing:
        names = ", ".join(map(repr, missing))
        returned = ", ".join(f"{k}={v:.6g}" for k, v in sorted(metrics.items()))
        meant = [
            f"{close!r}" + (f" for {name!r}" if len(missing) > 1 else "")
            for name in missing
            if (close := _meant(name, metrics))
        ]
        raise EvaluationInputError(
            "thresholds",
            f"{'metric' if len(missing) == 1 else 'metrics'} {names} "
            f"{'is' if len(missing) == 1 else 'are'} not among what {entry_point} returned "
            f"({returned or 'no metrics'})"
            + (f"; did you mean {', '.join(meant)}?" if meant else ""),
        )
    return [ThresholdCheck(t, metrics[t.metric], t.check(metrics[t.metric])) for t in wanted]


def _foreign_error(root: str, found: Any) -> EvaluationInputError:
    misplaced = misplaced_root(root, found.names, step_input="step")
    if misplaced:  # a step's own directory, or a run's: not a trainer's own layout
        return EvaluationInputError(
            "checkpoint", f"no kfp-spot checkpoint under {root}: expected {EXPECTED}; {misplaced}"
        )
    return EvaluationInputError(
        "checkpoint",
        f"no kfp-spot checkpoint under {root}: expected {EXPECTED}, found {found.found()}. "
        "To evaluate this directory as it is (the entry point gets the whole directory, "
        f"unverified), set {FOREIGN_INPUT}=True.",
    )


def _materialize_tree(root: str, workdir: Path) -> Path:
    """A local directory with everything under ``root`` (downloaded when remote)."""
    local = fs.to_local_path(root)
    if local is not None:
        return Path(local)
    filesystem, path = fs.filesystem(root)
    target = workdir / "checkpoint"
    filesystem.get(path.rstrip("/") + "/", str(target), recursive=True)
    return target


def evaluate(
    checkpoint_uri: str,
    package_uris: Sequence[str],
    *,
    entry_point: str = "",
    params: Mapping[str, Any] | None = None,
    step: str = "latest",
    thresholds: Mapping[str, Any] | None = None,
    fallback_to_previous: bool = False,
    latest_step: int | None = None,
    allow_foreign_layout: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    timeout_s: float | None = None,
) -> EvaluationResult:
    """Verify a checkpoint step and score it with the package's evaluation entry point.

    Args:
        checkpoint_uri: the checkpoint root (``<base>/checkpoints``), local or gs://.
        package_uris: the training package first, then its dependencies (as the job got them).
        entry_point: ``module:function``; the function is called as
            ``function(checkpoint_dir: str, params: dict) -> dict`` in a subprocess of an
            environment with the packages installed (cached by their sha256) and what kfp-spot's
            runtime image holds, nothing else of this machine. Empty: the one
            the package declares (``[tool.kfp-spot] evaluation-entry-point`` in the sdist's
            pyproject.toml), else ``trainer.evaluate:evaluate`` (the bundled example's).
        params: evaluation parameters passed to the function (JSON-serialisable).
        step: ``latest``, a step number, or ``best:<metric>[:max|:min]``.
        thresholds: metric → bound (``">=0.9"``, ``"<=0.5"``, or a number meaning ``>=``,
            refused for a smaller-is-better metric such as ``rmse``).
        fallback_to_previous: when the chosen step does not verify, evaluate the newest earlier
            one that does (reported) instead of failing.
        latest_step: the step the checkpoint artifact names as latest (None: newest present).
        allow_foreign_layout: when ``checkpoint_uri`` holds no kfp-spot steps (a trainer's own
            files), hand the whole directory to the entry point instead of failing. Nothing is
            verified; the result says so (``layout="foreign"``, ``verified=False``).
        cache_dir: where package environments are cached.
        timeout_s: stop the entry point after this many seconds (None: no limit).

    Returns:
        The evaluation result; ``passed`` is False when a threshold does not hold.

    Raises:
        EvaluationInputError: an input is invalid (names it), or the directory holds no
            kfp-spot steps and ``allow_foreign_layout`` is off (the message names the layout
            expected, what was found and the input that evaluates it anyway).
        kfp_spot.checkpoints.CheckpointCorruptError: the chosen step is torn or corrupted.
        kfp_spot.checkpoints.CheckpointFormatError: a step it reads is in a newer format than
            this kfp-spot reads (never skipped, even with ``fallback_to_previous``).
        kfp_spot.checkpoints.CheckpointError: there is no checkpoint to evaluate.
        EvaluationError: the entry point failed or returned something unusable.
    """
    entry_point, hint = entry_point_for(entry_point, package_uris)
    root, uris, params_dict = _check_inputs(checkpoint_uri, package_uris, entry_point, params)
    request = parse_step(step)
    wanted = parse_thresholds(thresholds)
    if timeout_s is not None and timeout_s <= 0:
        raise EvaluationInputError("timeout_s", f"must be positive, got {timeout_s}")
    if not isinstance(allow_foreign_layout, bool):
        raise EvaluationInputError(
            FOREIGN_INPUT, f"must be true or false, got {allow_foreign_layout!r}"
        )
    found = inspect_layout(root)
    if found.kind == EMPTY:
        raise CheckpointError(
            f"no checkpoint under {root}: the directory is empty or does not exist (the job "
            "saved nothing there): nothing to evaluate"
        )
    foreign = found.kind != KFP_SPOT
    if foreign and not allow_foreign_layout:
        raise _foreign_error(root, found)
    if foreign and request.kind != "latest":
        raise EvaluationInputError(
            "step",
            f"{step!r} names a kfp-spot step, but {root} has none (a foreign layout is "
            'evaluated whole): use step="latest"',
        )
    with tempfile.TemporaryDirectory(prefix="kfp-spot-ckpt-") as tmp:
        if foreign:
            manifest = None
            local_dir = _materialize_tree(root, Path(tmp))
            rule = f"the whole directory (foreign layout: {found.found()}; not verified)"
            skipped: list[tuple[int, str]] = []
            log.warning("evaluating %s as it is: no kfp-spot manifest, nothing verified", root)
        else:
            selection: Selection = select_step(
                root,
                request,
                latest_hint=latest_step,
                fallback_to_previous=fallback_to_previous,
                load=lambda s: materialize_step(root, s, Path(tmp)),
            )
            manifest, local_dir = selection.manifest, selection.local_dir
            rule, skipped = selection.rule, selection.skipped
            log.info("evaluating %s step %d (%s)", root, manifest.step, rule)
        from kfp_spot.image.lock import runtime_profile  # the image's packages, as on Vertex AI

        try:
            python = envcache.package_env(
                uris, cache_dir or envcache.default_cache_dir(), profile=runtime_profile()
            )
        except FileNotFoundError as exc:
            raise EvaluationInputError("package", str(exc)) from exc
        except envcache.PackageInstallError as exc:
            raise EvaluationError(f"the package does not install: {exc}") from exc
        started = time.monotonic()
        raw = run_entry_point(python, entry_point, local_dir, params_dict, timeout_s, hint)
        seconds = time.monotonic() - started
    metrics, matrix = parse_result(entry_point, raw)
    checks = check_thresholds(entry_point, wanted, metrics)
    return EvaluationResult(
        checkpoint_uri=root,
        step=manifest.step if manifest else -1,
        manifest_digest=manifest.digest if manifest else "",
        manifest_time=(
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(manifest.wall_time)) if manifest else ""
        ),
        selection=rule,
        skipped=skipped,
        entry_point=entry_point,
        params=params_dict,
        package_uris=uris,
        metrics=metrics,
        confusion_matrix=matrix,
        checks=checks,
        passed=all(c.passed for c in checks),
        seconds=seconds,
        layout=found.kind if foreign else KFP_SPOT,
        verified=not foreign,
    )
