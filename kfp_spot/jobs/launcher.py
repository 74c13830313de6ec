"""Submit, watch, recover: the launcher's main loop.

One launch is a ladder of CustomJobs on the same checkpoint directory. Before the launcher waits on
a job it records it twice: in ``gcp_resources`` (GCPC's format: the Vertex console links it and
pipeline cancellation reaches it) and in a state file next to the job's outputs (every submission of
the launch, so a restarted launcher knows how much of each budget is spent). A launcher that starts
and finds either resumes watching instead of submitting a duplicate. SIGTERM or SIGINT cancels the
job the launcher is watching.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from google.api_core import exceptions as api_exceptions

from kfp_spot import checkpoints
from kfp_spot.jobs import gcp_resources, reattach
from kfp_spot.jobs.backend import Backend, backend_for
from kfp_spot.jobs.inputs import JobInputs, LaunchInputError
from kfp_spot.jobs.outcome import (
    Classified,
    Outcome,
    classify,
    classify_create_error,
    is_terminal,
    state_name,
)
from kfp_spot.jobs.recovery import (
    LaunchState,
    RecoveryPolicy,
    Submission,
    decide,
    load_state,
    past_deadline,
    save_state,
    state_uri,
)
from kfp_spot.jobs.report import JobReport, build_report, pools_of
from kfp_spot.jobs.resume import seed_checkpoint
from kfp_spot.jobs.service import (
    JobService,
    ServiceUnreachableError,
)
from kfp_spot.jobs.spec import RESUME_ENV, build_custom_job, output_dirs, with_strategy
from kfp_spot.jobs.strategy import Strategy, strategy_of
from kfp_spot.jobs.watch import AttemptWatcher
from kfp_spot.validation.component_inputs import inputs_of
from kfp_spot.vertex.client import resolve_endpoint
from kfp_spot.vertex.signals import LaunchInterruptedError, cancel_on_signals

if TYPE_CHECKING:  # GAPIC's types load where the job is built and sent (spec, service)
    from google.cloud.aiplatform_v1.types import CustomJob

__all__ = [
    "LaunchFailedError",
    "LaunchInterruptedError",
    "LaunchRequest",
    "LaunchResult",
    "Launcher",
]

log = logging.getLogger(__name__)


class LaunchFailedError(RuntimeError):
    """The launch ended without success; carries the outcome and the job's own message."""

    def __init__(self, outcome: Outcome, message: str, result: LaunchResult | None = None):
        super().__init__(f"{outcome.value}: {message}")
        self.outcome = outcome
        self.job_message = message
        self.result = result


@dataclass
class LaunchRequest:
    """Everything one launch needs."""

    inputs: JobInputs
    base_output_directory: str
    gcp_resources_path: str
    run_key: str  # unique to this task run (e.g. the checkpoint output's URI)
    policy: RecoveryPolicy = field(default_factory=RecoveryPolicy)
    api_endpoint: str = ""
    poll_interval_seconds: float = 0.0
    resume_from: str = ""  # checkpoint directory of a previous run
    cancel_wait_seconds: float = 0.0  # 0: the backend's own (kfp_spot.jobs.backend)
    # region -> gs:// directory for that region's copy of the checkpoints, when the base output
    # directory's bucket is not in (or over) that region
    region_buckets: dict[str, str] = field(default_factory=dict)


@dataclass
class LaunchResult:
    """What became of the launch."""

    outcome: Outcome
    message: str
    checkpoint_dir: str
    model_dir: str
    latest: checkpoints.Manifest | None
    report: JobReport
    submissions: list[Submission]
    resumed_from: checkpoints.Manifest | None = None


def _short(job_name: str) -> str:
    """``customJobs/ID`` of a resource name, for log lines."""
    return "/".join(job_name.split("/")[-2:])


class Launcher:
    """Runs one launch (see the module docstring)."""

    def __init__(
        self,
        request: LaunchRequest,
        *,
        backend: Backend | None = None,
        service: JobService | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.request = request
        with inputs_of(LaunchInputError):
            self.endpoint = resolve_endpoint(request.inputs.location, request.api_endpoint)
        self.backend = backend or backend_for(
            self.endpoint,
            poll_interval=request.poll_interval_seconds,
            cancel_wait=request.cancel_wait_seconds,
        )
        self.service = service or JobService(self.endpoint, retry=self.backend.retry)
        self.poll = self.backend.poll
        self.clock = clock
        self.parent = f"projects/{request.inputs.project}/locations/{request.inputs.location}"
        self.dirs = output_dirs(request.base_output_directory)
        self.state_path = state_uri(request.base_output_directory, request.run_key)
        self.watcher = AttemptWatcher(self.backend, self.dirs["checkpoints"])
        self.state: LaunchState | None = None
        self.base_job: CustomJob | None = None
        self.resumed_from: checkpoints.Manifest | None = None
        self._fresh: set[str] = set()  # submission tokens this process made (known not created)

    # -- set-up ---------------------------------------------------------------------------------

    def prepare(self) -> CustomJob:
        """Build and validate the Spot CustomJob (nothing is submitted); seed resume_from."""
        inputs = self.request.inputs
        inputs.base_output_directory = self.request.base_output_directory
        extra_env = {}
        if self.request.resume_from:
            extra_env[RESUME_ENV] = self.request.resume_from
        # Built and checked against the service's rules (kfp_spot.validation), errors naming inputs.
        job = build_custom_job(
            inputs, strategy=Strategy.SPOT, extra_env=extra_env, target=self.endpoint.target
        )
        if self.request.resume_from:
            try:
                self.resumed_from = seed_checkpoint(
                    self.request.resume_from, self.dirs["checkpoints"]
                )
            except checkpoints.CheckpointError as exc:
                raise LaunchInputError("resume_from", str(exc)) from exc
        self.base_job = job
        return job

    def _load_or_start_state(self) -> LaunchState:
        state = load_state(self.state_path, self.request.run_key)
        recorded = gcp_resources.read_job_names(self.request.gcp_resources_path)
        if state is None:
            state = LaunchState(self.request.run_key, self.clock())
        # gcp_resources outlived the state (another base directory, or a lost write): adopt.
        reattach.adopt(state, recorded, self.service, self.clock)
        if state.submissions:
            log.info(
                "reattaching: %d earlier submission(s), the last %s",
                len(state.submissions),
                state.submissions[-1].job_name or "(being created)",
            )
        return state

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> LaunchResult:
        """Submit (or reattach), wait, recover; returns the result or raises LaunchFailedError.

        Raises:
            LaunchFailedError: USER_ERROR, CANCELLED, and any outcome but SUCCEEDED once the
                budgets are spent (the result, with the report, is attached).
            LaunchInterruptedError: after cancelling the job on SIGTERM/SIGINT.
        """
        if self.base_job is None:
            self.prepare()
        with cancel_on_signals():
            self.state = self._load_or_start_state()
            try:
                outcome, message = self._loop()
            except LaunchInterruptedError:
                try:
                    self._cancel_current()
                except (api_exceptions.GoogleAPICallError, ServiceUnreachableError) as exc:
                    log.error("could not cancel the CustomJob: %s", exc)
                raise
        result = self._result(outcome, message)
        if outcome != Outcome.SUCCEEDED:
            raise LaunchFailedError(outcome, self._with_logs(outcome, message), result)
        return result

    def _with_logs(self, outcome: Outcome, message: str) -> str:
        """A user error's message, plus what the backend can show of the replicas' own output."""
        assert self.state is not None
        name = self.state.submissions[-1].job_name if self.state.submissions else ""
        if outcome != Outcome.USER_ERROR or not name:
            return message
        tail = self.backend.failure_logs(name)
        return f"{message}\n{tail}" if tail else message

    def _save(self) -> None:
        assert self.state is not None
        save_state(self.state_path, self.state)

    def _loop(self) -> tuple[Outcome, str]:
        assert self.state is not None and self.base_job is not None
        subs = self.state.submissions
        while True:
            ended = subs[-1].outcome if subs else None
            if not subs or ended is not None:
                if ended is not None:
                    decision = decide(
                        self.request.policy,
                        subs,
                        started_at=self.state.started_at,
                        now=self.clock(),
                    )
                    if decision.strategy is None:
                        if ended is not Outcome.SUCCEEDED:
                            log.info("not resubmitting: %s", decision.reason)
                        return ended, subs[-1].message
                    log.info("resubmitting on %s: %s", decision.strategy, decision.reason)
                    strategy = decision.strategy
                else:
                    strategy = Strategy.SPOT
                latest = checkpoints.latest(self.dirs["checkpoints"], check_hashes=False)
                token = uuid.uuid4().hex
                self._fresh.add(token)
                subs.append(
                    Submission(
                        token=token,
                        strategy=strategy,
                        submitted_at=self.clock(),
                        resume_step=latest.step if latest else None,
                    )
                )
                self._save()  # before create: a restarted launcher finds the job by its token
            current = subs[-1]
            if not current.job_name:
                # A submission left by an earlier launcher may have been created: look first.
                job = (
                    self.service.find_submission(self.parent, current.token)
                    if current.token and current.token not in self._fresh
                    else None
                )
                if job is None:
                    spec = with_strategy(
                        self.base_job, current.strategy, self.request.inputs.max_wait_duration
                    )
                    try:
                        job = self.service.create(self.parent, spec, current.token)
                    except api_exceptions.GoogleAPICallError as exc:
                        verdict = classify_create_error(exc)
                        log.warning(
                            "create refused (%s): %s", verdict.outcome.value, verdict.message
                        )
                        self._finish(current, verdict)
                        continue
                current.job_name = job.name
                self._save()
                log.info("submitted %s (%s)", job.name, current.strategy)
            gcp_resources.write(
                self.request.gcp_resources_path,
                [self.endpoint.resource_uri(s.job_name) for s in subs if s.job_name],
            )
            self.watcher.watch(current.job_name, current.strategy, current.submitted_at)
            job = self.service.wait(
                current.job_name, self.poll, on_poll=self.watcher.poll, stop=self._abandon_spot
            )
            self.watcher.poll(force=True)  # the last attempt's end, before the verdict
            verdict = self._settle(current, job)
            self._finish(current, verdict, job)

    def _abandon_spot(self, job: CustomJob) -> bool:
        """Past the deadline, a Spot job that is waiting for capacity (not running) is given up."""
        assert self.state is not None
        return (
            strategy_of(job) is Strategy.SPOT
            and state_name(job.state) != "JOB_STATE_RUNNING"
            and past_deadline(self.request.policy, self.state.started_at, self.clock())
        )

    def _settle(self, current: Submission, job: CustomJob) -> Classified:
        if is_terminal(job):
            return classify(job)
        # Abandoned past the deadline: cancel it; it counts as Spot running out.
        log.warning("%s still waiting for Spot capacity past the deadline; cancelling", job.name)
        self.service.cancel(job.name)
        self.service.wait_terminal(job.name, self.poll, self.backend.cancel_wait_seconds)
        ran = bool(job.start_time)
        return Classified(
            Outcome.PREEMPTED_EXHAUSTED if ran else Outcome.CAPACITY,
            f"no Spot capacity within deadline_seconds={self.request.policy.deadline_seconds:g}",
        )

    def _finish(
        self, current: Submission, verdict: Classified, job: CustomJob | None = None
    ) -> None:
        current.outcome = verdict.outcome
        current.message = verdict.message
        current.ended_at = self.clock()
        if job is not None:
            reattach.record_times(current, job)
        self._save()
        log.info(
            "%s ended %s%s",
            _short(current.job_name) or "the submission",
            current.outcome,
            f": {current.message}" if current.message else "",
        )

    def _cancel_current(self) -> None:
        """Cancel the job being watched (pipeline cancellation); record it as CANCELLED."""
        if self.state is None or not self.state.submissions:
            return
        current = self.state.submissions[-1]
        if current.outcome is not None:
            return
        name = current.job_name
        if not name and current.token:
            found = self.service.find_submission(self.parent, current.token)
            name = found.name if found else ""
            current.job_name = name
        if not name:
            return
        log.warning("cancelling %s", name)
        self.service.cancel(name)
        job = self.service.wait_terminal(name, self.poll, self.backend.cancel_wait_seconds)
        verdict = classify(job) if job is not None else Classified(Outcome.CANCELLED, "cancelling")
        self._finish(current, verdict, job)

    # -- the result -----------------------------------------------------------------------------

    def _result(self, outcome: Outcome, message: str) -> LaunchResult:
        assert self.state is not None and self.base_job is not None
        ledgers = {
            sub.job_name: self.backend.ledger(sub.job_name)
            for sub in self.state.submissions
            if sub.job_name
        }
        report = build_report(
            outcome=outcome,
            submissions=self.state.submissions,
            checkpoint_root=self.dirs["checkpoints"],
            pools=pools_of(self.base_job),
            ledgers=ledgers,
        )
        latest = checkpoints.latest(self.dirs["checkpoints"], check_hashes=False)
        return LaunchResult(
            outcome=outcome,
            message=message,
            checkpoint_dir=self.dirs["checkpoints"],
            model_dir=self.dirs["model"],
            latest=latest,
            report=report,
            submissions=list(self.state.submissions),
            resumed_from=self.resumed_from,
        )
