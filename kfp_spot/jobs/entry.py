"""The one call the launch_spot_job component makes: ``launch_spot_job(**inputs) -> outcome``.

Artifacts are duck-typed (``.uri``, ``.path``, ``.metadata``): this module never imports kfp.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

from kfp_spot import checkpoints, fs, lightimports, vertex
from kfp_spot.jobs.inputs import (
    JobInputs,
    LaunchInputError,
    checked,
    parse_strategy,
    read_job_inputs,
)
from kfp_spot.jobs.launcher import (
    Launcher,
    LaunchFailedError,
    LaunchInterruptedError,
    LaunchRequest,
    LaunchResult,
)
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.jobs.recovery import RecoveryPolicy, RegionPolicy, parse_region_policy
from kfp_spot.jobs.service import KFP_SPOT_LABELS
from kfp_spot.jobs.strategy import FALLBACK_STRATEGIES
from kfp_spot.layout import FOREIGN, inspect_layout
from kfp_spot.validation.component_inputs import InputReader, dataclass_defaults, inputs_of
from kfp_spot.validation.inputs import freeze_at_exit, report_input_errors
from kfp_spot.vertex import pipeline_context
from kfp_spot.vertex.client import check_poll_interval, is_emulator_endpoint

log = logging.getLogger(__name__)

# Outcomes that still hand on a usable checkpoint when fail_on_incomplete is False.
INCOMPLETE = frozenset({Outcome.PREEMPTED_EXHAUSTED, Outcome.CAPACITY, Outcome.TIMEOUT})
JOB_DIR_NAME = "custom_job"
FAIL_ON_INCOMPLETE = True  # the default of the fail_on_incomplete input
MAX_POLL_INTERVAL_SECONDS = 3600.0


def input_defaults() -> dict[str, Any]:
    """The default of every optional parameter input of the launch_spot_job component.

    The one source of truth is the runtime code: ``JobInputs`` (the job), ``RecoveryPolicy`` (the
    budgets), ``LaunchRequest`` (endpoint, polling) and :data:`FAIL_ON_INCOMPLETE`. The component's
    signature must repeat them as literals (KFP evaluates it without this package), so
    tests/jobs/test_defaults.py checks the signature and the compiled YAMLs against this.
    Sequences come back as lists and mappings as dicts, as KFP passes them.
    """
    job = dataclass_defaults(JobInputs)
    job.pop("package_uris")  # comes from the package artifact, not a parameter
    merged = {
        **job,
        **dataclass_defaults(RecoveryPolicy),
        **dataclass_defaults(
            LaunchRequest, ("api_endpoint", "poll_interval_seconds", "region_buckets")
        ),
        "fail_on_incomplete": FAIL_ON_INCOMPLETE,
    }
    return merged


INPUT_DEFAULTS = input_defaults()


def _package(package: Any, python_module: str) -> tuple[list[str], str]:
    """Package URIs and module from the prepare_package artifact (python_module input wins)."""
    if package is None:
        return [], python_module
    metadata = dict(getattr(package, "metadata", None) or {})
    uris = metadata.get("package_uris") or []
    if isinstance(uris, str):  # JSON text where kfp.local passed the list through a string
        uris = InputReader({}, {}, LaunchInputError).as_strings("package", uris)
    uri = getattr(package, "uri", None)
    if not uris and uri:
        uris = [uri]
    if not isinstance(uris, list) or not all(isinstance(u, str) and u for u in uris):
        raise LaunchInputError(
            "package", f"metadata package_uris must be a list of URIs, got {vertex.show(uris)}"
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
    local = fs.to_local_path(parent)  # kfp.local's outputs: relative to this process, made absolute
    return fs.join(local if local is not None else parent, JOB_DIR_NAME)


def base_output_directory(given: str, checkpoint_uri: str) -> str:
    """The job's base output directory: ``given``, or one next to this task's outputs.

    ``/gcs/BUCKET/PATH`` becomes ``gs://BUCKET/PATH``; a relative path or another scheme is
    refused (:func:`kfp_spot.vertex.normalize_output_uri`). Whether the service takes an
    absolute local path is for the job's target to say (only the local emulator does).

    Raises:
        LaunchInputError: naming ``base_output_directory``.
    """
    base = given or default_base_directory(checkpoint_uri)
    try:
        return vertex.normalize_output_uri(base)
    except vertex.InvalidValueError as exc:
        derived = "" if given else f" (derived from the checkpoint output {checkpoint_uri!r})"
        raise LaunchInputError("base_output_directory", f"{exc}{derived}") from None


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
            fs.atomic_write(path, json.dumps(result.report.to_json(), indent=1, default=str))


def build_request(**inputs: Any) -> LaunchRequest:
    """Turn the component's inputs into a LaunchRequest; errors name the input.

    A missing, None or empty input takes its default (:func:`input_defaults`).
    """
    read = InputReader(inputs, INPUT_DEFAULTS, LaunchInputError)
    checkpoint = inputs.get("checkpoint")
    gcp_resources_path = inputs.get("gcp_resources") or ""
    if not gcp_resources_path:
        raise LaunchInputError("gcp_resources", "an output path is required")
    package_uris, python_module = _package(inputs.get("package"), read.text("python_module"))
    checkpoint_uri = str(getattr(checkpoint, "uri", "") or "")
    base = base_output_directory(read.text("base_output_directory"), checkpoint_uri)
    api_endpoint = read.text("api_endpoint")
    # GCPC's placeholders reach us unresolved outside Vertex AI Pipelines: settled per target.
    with inputs_of(LaunchInputError):
        emulator = is_emulator_endpoint(api_endpoint)
    resolved = {
        name: checked(name, pipeline_context.resolve, name, read.text(name), emulator=emulator)
        for name in pipeline_context.RESOLVED_INPUTS
    }
    resume = inputs.get("resume_from")
    resume_uri = str(getattr(resume, "uri", "") or "") if resume is not None else ""
    if resume is not None and not resume_uri:
        raise LaunchInputError("resume_from", "the checkpoint artifact has no URI")
    if resume_uri:
        checked("resume_from", vertex.check_checkpoint_uri, resume_uri)
    # Every job input is read by its row (kfp_spot.jobs.inputs) but those worked out here.
    job_inputs = read_job_inputs(
        read,
        **resolved,
        package_uris=package_uris,
        python_module=python_module,
        base_output_directory=base,
    )
    # The pipeline run's labels, so the job's cost is attributed to the run (as GCPC does).
    job_inputs.labels = checked(  # counting the labels every create adds (KFP_SPOT_LABELS)
        "labels",
        pipeline_context.merge_system_labels,
        job_inputs.labels,
        os.environ,
        added=len(KFP_SPOT_LABELS),
    )
    policy = RecoveryPolicy(
        max_resubmissions=read.integer("max_resubmissions"),
        fallback_after=read.integer("fallback_after"),
        fallback_strategy=parse_strategy(
            "fallback_strategy", read.text("fallback_strategy"), FALLBACK_STRATEGIES
        ),
        deadline_seconds=read.number("deadline_seconds"),
        regions=read.strings("regions"),
        region_policy=parse_region_policy(read.text("region_policy")),
        region_wait_seconds=read.number("region_wait_seconds"),
    )
    order = policy.order(job_inputs.location)
    if len(order) > 1:
        check_regional_inputs(job_inputs, order)
    region_buckets = {str(k): str(v) for k, v in read.json_value("region_buckets", dict).items()}
    check_region_buckets(region_buckets, order, emulator=emulator)
    poll = read.number("poll_interval_seconds")
    if not 0 <= poll <= MAX_POLL_INTERVAL_SECONDS:
        raise LaunchInputError(
            "poll_interval_seconds",
            f"expected 0 (automatic) to {MAX_POLL_INTERVAL_SECONDS:g} seconds, got {poll:g}",
        )
    with inputs_of(LaunchInputError):
        check_poll_interval(poll, api_endpoint)
    return LaunchRequest(
        inputs=job_inputs,
        base_output_directory=base,
        gcp_resources_path=str(gcp_resources_path),
        run_key=checkpoint_uri or str(gcp_resources_path),
        policy=policy,
        api_endpoint=api_endpoint,
        poll_interval_seconds=poll,
        resume_from=resume_uri,
        region_buckets=region_buckets,
    )


# Inputs naming a resource that lives in one region: a job in another region cannot use it.
REGIONAL_INPUTS = ("encryption_spec_key_name", "tensorboard", "persistent_resource_id")


def check_regional_inputs(inputs: JobInputs, order: tuple[str, ...]) -> None:
    """Refuse inputs that tie the job to one region when it may run in several.

    Raises:
        LaunchInputError: naming the first such input that is set.
    """
    for name in REGIONAL_INPUTS:
        if getattr(inputs, name):
            raise LaunchInputError(
                name,
                f"names a resource of one region, but the job may run in {', '.join(order)} "
                "(regions): leave it empty, or list a single region",
            )


def idle_region_settings(policy: RecoveryPolicy, location: str) -> list[str]:
    """What a launch with one region was told about leaving it, which it cannot do (pure).

    ``region_policy=EAGER`` and ``region_wait_seconds`` say when to go on to the next region;
    with one region (``regions`` empty or of one) there is none, and they change nothing.

    Returns:
        One notice per such input, naming it (empty when each is at its default or there are
        several regions).
    """
    order = policy.order(location)
    if len(order) > 1:
        return []
    one = f"the launch has one region ({order[0]}; regions lists {len(policy.regions)})"
    notices = []
    if policy.region_policy is RegionPolicy.EAGER:
        notices.append(
            f"launch_spot_job input 'region_policy': EAGER has no effect: {one}, so a preemption "
            "leaves it for none; the service restarts the job in place. List the regions to go "
            "on to in regions"
        )
    if policy.region_wait_seconds:
        notices.append(
            f"launch_spot_job input 'region_wait_seconds': {policy.region_wait_seconds:g} has no "
            f"effect: {one}, so a job waiting for Spot VMs is not given up for another. List "
            "the regions to go on to in regions, or set deadline_seconds to move a waiting Spot "
            "job to fallback_strategy"
        )
    return notices


def check_region_buckets(
    buckets: dict[str, str], order: tuple[str, ...], *, emulator: bool
) -> None:
    """Check ``region_buckets``: each key a region of the launch, each value an output URI.

    Raises:
        LaunchInputError: naming ``region_buckets`` and the bad entry.
    """
    for region, uri in buckets.items():
        if region not in order:
            raise LaunchInputError(
                "region_buckets",
                f"{vertex.show(region)} is not one of the launch's regions ({', '.join(order)})",
            )
        try:
            normalized = vertex.normalize_output_uri(uri)
        except vertex.InvalidValueError as exc:
            raise LaunchInputError("region_buckets", f"{region}: {exc}") from None
        if not emulator and not normalized.startswith("gs://"):
            raise LaunchInputError(
                "region_buckets",
                f"{region}: expected gs://BUCKET[/PATH] (Vertex AI writes only to Cloud Storage), "
                f"got {vertex.show(uri)}",
            )
        buckets[region] = normalized


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
        kfp_spot.checkpoints.CheckpointFormatError: the newest step is in a newer format than
            this kfp-spot reads (in a KFP task: its one line, no traceback).
        SystemExit: on SIGTERM/SIGINT, after cancelling the CustomJob.
    """
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    freeze_at_exit()  # the task ends after this call: skip the GAPIC objects' last collection
    lightimports.defer_gapic_packages()  # the task loads the JobService and CustomJob's types alone
    with report_input_errors(LaunchInputError):
        request = build_request(**inputs)
        read = InputReader(inputs, INPUT_DEFAULTS, LaunchInputError)
        fail_on_incomplete = read.boolean("fail_on_incomplete")
        launcher = Launcher(request)
        launcher.prepare()  # every input checked (resume_from too) before any API call
    for notice in idle_region_settings(request.policy, request.inputs.location):
        print(f"kfp-spot: warning: {notice}", file=sys.stderr, flush=True)
    try:
        # A step in a newer format: read before a job is submitted or once the last has ended
        # (the watcher only logs it), so no job is left running; the task ends on its one line.
        with report_input_errors(checkpoints.CheckpointFormatError):
            result = launcher.run()
    except LaunchInterruptedError as exc:
        if exc.cancel_error:
            log.error(
                "launch interrupted by signal %d; the CustomJob may still be running (%s): "
                "cancel it from the console or with `gcloud ai custom-jobs cancel`",
                exc.signum,
                exc.cancel_error,
            )
        else:
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
