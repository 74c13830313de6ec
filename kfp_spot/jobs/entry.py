"""The one call the launch_spot_job component makes: ``launch_spot_job(**inputs) -> outcome``.

Artifacts are duck-typed (``.uri``, ``.path``, ``.metadata``): this module never imports kfp.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from kfp_spot import fs
from kfp_spot.jobs.launcher import (
    Launcher,
    LaunchFailedError,
    LaunchInterruptedError,
    LaunchRequest,
    LaunchResult,
)
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.jobs.recovery import RecoveryPolicy
from kfp_spot.jobs.spec import DEFAULT_EXECUTOR_IMAGE, JobInputs, LaunchInputError
from kfp_spot.layout import FOREIGN, inspect_layout

log = logging.getLogger(__name__)

# Outcomes that still hand on a usable checkpoint when fail_on_incomplete is False.
INCOMPLETE = frozenset({Outcome.PREEMPTED_EXHAUSTED, Outcome.CAPACITY, Outcome.TIMEOUT})
JOB_DIR_NAME = "custom_job"


def _int(name: str, value: Any, default: int) -> int:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise LaunchInputError(name, f"expected an integer, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise LaunchInputError(name, f"expected an integer, got {value!r}") from exc
    if number != int(number):
        raise LaunchInputError(name, f"expected an integer, got {value!r}")
    return int(number)


def _float(name: str, value: Any, default: float) -> float:
    if value is None or value == "":
        return default
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise LaunchInputError(name, f"expected a number, got {value!r}") from exc


def _json_value(name: str, value: Any, kind: type, default: Any) -> Any:
    """Lists and dicts may arrive as JSON text (from YAML or the CLI) or as objects."""
    if value is None or value == "":
        return default
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise LaunchInputError(
                name, f"expected a {kind.__name__} (or its JSON), got {value!r}"
            ) from exc
    if not isinstance(value, kind):
        raise LaunchInputError(name, f"expected a {kind.__name__}, got {type(value).__name__}")
    return value


def _package(package: Any, python_module: str) -> tuple[list[str], str]:
    """Package URIs and module from the prepare_package artifact (python_module input wins)."""
    if package is None:
        return [], python_module
    metadata = dict(getattr(package, "metadata", None) or {})
    uris = metadata.get("package_uris") or []
    if isinstance(uris, str):
        uris = [u for u in uris.split(",") if u]
    if not uris and getattr(package, "uri", ""):
        uris = [package.uri]
    if not isinstance(uris, list) or not all(isinstance(u, str) and u for u in uris):
        raise LaunchInputError(
            "package", f"metadata package_uris must be a list of URIs, got {uris!r}"
        )
    return list(uris), python_module or str(metadata.get("python_module") or "")


def _parent_uri(uri: str) -> str:
    head = uri.rstrip("/").rsplit("/", 1)[0]
    return head if head and head != uri.rstrip("/") else uri


def default_base_directory(checkpoint_uri: str) -> str:
    """A directory next to this task's outputs, derived from the checkpoint output's URI."""
    if not checkpoint_uri:
        raise LaunchInputError(
            "base_output_directory",
            "empty, and no checkpoint output URI to derive it from; set it to a gs:// URI",
        )
    parent = _parent_uri(checkpoint_uri)
    local = fs.to_local_path(parent)
    return fs.join(local if local is not None else parent, JOB_DIR_NAME)


def _set_outputs(result: LaunchResult, checkpoint: Any, model: Any, job_report: Any) -> None:
    if checkpoint is not None:
        checkpoint.uri = result.checkpoint_dir
        checkpoint.metadata["latest_step"] = result.latest.step if result.latest else -1
        checkpoint.metadata["manifest_digest"] = result.latest.digest if result.latest else ""
        if result.resumed_from is not None:
            checkpoint.metadata["resumed_from_step"] = result.resumed_from.step
        found = inspect_layout(result.checkpoint_dir)
        checkpoint.metadata["layout"] = found.kind
        if result.latest is None:
            log.warning(
                "the job committed no kfp-spot checkpoint step under %s (found %s)%s",
                result.checkpoint_dir,
                found.found(),
                "; evaluate_checkpoint scores this layout with allow_foreign_layout=True"
                if found.kind == FOREIGN
                else "",
            )
    if model is not None:
        model.uri = result.model_dir
    if job_report is not None:
        job_report.metadata.update(result.report.metrics())
        path = getattr(job_report, "path", "")
        if path:
            local = fs.to_local_path(path)
            target_fs, target = fs.filesystem(local or path)
            target_fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
            with target_fs.open(target, "w") as handle:
                json.dump(result.report.to_json(), handle, indent=1, default=str)


def build_request(**inputs: Any) -> LaunchRequest:
    """Turn the component's inputs into a LaunchRequest; errors name the input."""
    checkpoint = inputs.get("checkpoint")
    gcp_resources_path = inputs.get("gcp_resources") or ""
    if not gcp_resources_path:
        raise LaunchInputError("gcp_resources", "an output path is required")
    package_uris, python_module = _package(inputs.get("package"), inputs.get("python_module") or "")
    checkpoint_uri = str(getattr(checkpoint, "uri", "") or "")
    base = inputs.get("base_output_directory") or default_base_directory(checkpoint_uri)
    local = fs.to_local_path(base)
    if local is not None:
        base = local  # the job runs elsewhere: never a path relative to this process
    resume = inputs.get("resume_from")
    resume_uri = str(getattr(resume, "uri", "") or "") if resume is not None else ""
    if resume is not None and not resume_uri:
        raise LaunchInputError("resume_from", "the checkpoint artifact has no URI")
    job_inputs = JobInputs(
        project=str(inputs.get("project") or ""),
        location=str(inputs.get("location") or "us-central1"),
        display_name=str(inputs.get("display_name") or "kfp-spot-training"),
        package_uris=package_uris,
        python_module=python_module,
        container_image_uri=str(inputs.get("container_image_uri") or ""),
        executor_image_uri=str(inputs.get("executor_image_uri") or DEFAULT_EXECUTOR_IMAGE),
        command=[str(a) for a in _json_value("command", inputs.get("command"), list, [])],
        args=[str(a) for a in _json_value("args", inputs.get("args"), list, [])],
        env={str(k): str(v) for k, v in _json_value("env", inputs.get("env"), dict, {}).items()},
        machine_type=str(inputs.get("machine_type") or "n1-standard-4"),
        accelerator_type=str(inputs.get("accelerator_type") or ""),
        accelerator_count=_int("accelerator_count", inputs.get("accelerator_count"), 0),
        replica_count=_int("replica_count", inputs.get("replica_count"), 1),
        boot_disk_type=str(inputs.get("boot_disk_type") or "pd-ssd"),
        boot_disk_size_gb=_int("boot_disk_size_gb", inputs.get("boot_disk_size_gb"), 100),
        worker_pool_specs=_json_value(
            "worker_pool_specs", inputs.get("worker_pool_specs"), list, []
        ),
        base_output_directory=base,
        service_account=str(inputs.get("service_account") or ""),
        network=str(inputs.get("network") or ""),
        labels=_json_value("labels", inputs.get("labels"), dict, {}),
        timeout=str(inputs.get("timeout") or "604800s"),
        restart_job_on_worker_restart=bool(inputs.get("restart_job_on_worker_restart") or False),
        disable_retries=bool(inputs.get("disable_retries") or False),
        max_wait_duration=str(inputs.get("max_wait_duration") or "86400s"),
    )
    policy = RecoveryPolicy(
        max_resubmissions=_int("max_resubmissions", inputs.get("max_resubmissions"), 2),
        fallback_after=_int("fallback_after", inputs.get("fallback_after"), 0),
        fallback_strategy=str(inputs.get("fallback_strategy") or "STANDARD"),
        deadline_seconds=_float("deadline_seconds", inputs.get("deadline_seconds"), 0.0),
    )
    return LaunchRequest(
        inputs=job_inputs,
        base_output_directory=base,
        gcp_resources_path=str(gcp_resources_path),
        run_key=checkpoint_uri or str(gcp_resources_path),
        policy=policy,
        api_endpoint=str(inputs.get("api_endpoint") or ""),
        poll_interval_seconds=_float(
            "poll_interval_seconds", inputs.get("poll_interval_seconds"), 0.0
        ),
        resume_from=resume_uri,
    )


def launch_spot_job(**inputs: Any) -> str:
    """Run a Spot CustomJob to its end, recovering from preemption; set the component's outputs.

    Takes the launch_spot_job component's inputs and output artifacts by keyword (see
    ``components/launch_spot_job/component.py`` for what each means).

    Returns:
        The outcome: ``SUCCEEDED``, or with ``fail_on_incomplete=False`` also
        ``PREEMPTED_EXHAUSTED``, ``CAPACITY`` or ``TIMEOUT`` (the checkpoint output then holds the
        latest committed step, for a later run to resume from).

    Raises:
        LaunchInputError: an input is invalid (nothing was submitted).
        LaunchFailedError: the job failed (USER_ERROR: with the job's own message), was cancelled,
            or did not finish within the budgets.
        SystemExit: on SIGTERM/SIGINT, after cancelling the CustomJob.
    """
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    request = build_request(**inputs)
    fail_on_incomplete = inputs.get("fail_on_incomplete")
    fail_on_incomplete = True if fail_on_incomplete is None else bool(fail_on_incomplete)
    launcher = Launcher(request)
    try:
        result = launcher.run()
    except LaunchInterruptedError as exc:
        log.warning("launch interrupted by signal %d; the CustomJob was cancelled", exc.signum)
        raise SystemExit(128 + exc.signum) from None
    except LaunchFailedError as exc:
        if exc.result is not None:
            _set_outputs(
                exc.result, inputs.get("checkpoint"), inputs.get("model"), inputs.get("job_report")
            )
        if exc.outcome in INCOMPLETE and not fail_on_incomplete and exc.result is not None:
            log.warning("launch ended %s: %s", exc.outcome.value, exc.job_message)
            return exc.outcome.value
        raise
    _set_outputs(result, inputs.get("checkpoint"), inputs.get("model"), inputs.get("job_report"))
    _summary(result)
    return result.outcome.value


def _summary(result: LaunchResult) -> None:
    metrics = result.report.metrics()
    text = ", ".join(f"{k}={v}" for k, v in metrics.items())
    print(f"launch_spot_job: {result.outcome.value}; {text}", file=sys.stderr)
