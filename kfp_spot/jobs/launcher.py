"""Submit, watch, recover: the launcher's main loop.

One launch is a ladder of CustomJobs on the same checkpoint directory. Before the launcher waits on
a job it records it twice: in ``gcp_resources`` (GCPC's format: the Vertex console links it and
pipeline cancellation reaches it) and in a state file next to the job's outputs (every submission of
the launch, so a restarted launcher knows how much of each budget is spent). A launcher that starts
and finds either resumes watching instead of submitting a duplicate. SIGTERM or SIGINT cancels the
job the launcher is watching.

With several regions each job runs where :func:`~kfp_spot.jobs.recovery.decide` says, through that
region's service and in that region's output directory (:mod:`kfp_spot.jobs.regions`): the newest
verified step is copied there first, and back home at the end.

A launch holds its output directory alone: a job of another launch still writing there stops it
before it creates one (:mod:`kfp_spot.jobs.sharing`).

Why one module: the loop is one state machine over one ``LaunchState`` (submit or reattach,
watch, settle, resubmit or give up, cancel on a signal); each step reads and writes the state the
others leave, so split apart each transition would be read across modules.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from google.api_core import exceptions as api_exceptions

from kfp_spot import checkpoints
from kfp_spot.jobs import gcp_resources, reattach, regions, sharing
from kfp_spot.jobs.backend import Backend, backend_for
from kfp_spot.jobs.inputs import LaunchInputError
from kfp_spot.jobs.outcome import (
    Classified,
    Outcome,
    classify,
    classify_create_error,
    is_terminal,
    state_name,
)
from kfp_spot.jobs.quota_backoff import quota_wait
from kfp_spot.jobs.recovery import (
    LaunchState,
    Submission,
    decide,
    leave_region,
    load_state,
    past_deadline,
    region_of,
    save_state,
    state_uri,
    waiting_since,
)
from kfp_spot.jobs.regions import Site, Sites
from kfp_spot.jobs.report import build_report, pools_of
from kfp_spot.jobs.request import LaunchFailedError, LaunchRequest, LaunchResult
from kfp_spot.jobs.resume import seed_checkpoint
from kfp_spot.jobs.service import OUTPUT_LABEL, JobService, ServiceUnreachableError
from kfp_spot.jobs.spec import RESUME_ENV, build_custom_job, output_dirs, with_strategy
from kfp_spot.jobs.strategy import Strategy, strategy_of
from kfp_spot.jobs.watch import AttemptWatcher
from kfp_spot.validation.component_inputs import inputs_of
from kfp_spot.vertex import signals
from kfp_spot.vertex.client import resolve_endpoint
from kfp_spot.vertex.signals import LaunchInterruptedError, cancel_on_signals

if TYPE_CHECKING:  # GAPIC's types load where the job is built and sent (spec, service)
    from google.cloud.aiplatform_v1.types.custom_job import CustomJob

__all__ = [
    "LaunchFailedError",
    "LaunchInterruptedError",
    "LaunchRequest",
    "LaunchResult",
    "Launcher",
]

log = logging.getLogger(__name__)


class Launcher:
    """Runs one launch (see the module docstring)."""

    def __init__(
        self,
        request: LaunchRequest,
        *,
        backend: Backend | None = None,
        service: JobService | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = signals.sleep,
        draw: Callable[[], float] = random.random,
    ):
        self.request = request
        self.order = request.policy.order(request.inputs.location)
        with inputs_of(LaunchInputError):
            self.endpoint = resolve_endpoint(self.order[0], request.api_endpoint)
        self.backend = backend or backend_for(
            self.endpoint,
            poll_interval=request.poll_interval_seconds,
            cancel_wait=request.cancel_wait_seconds,
        )
        self.service = service or JobService(self.endpoint, retry=self.backend.retry)
        self.poll = self.backend.poll
        self.clock = clock
        self._sleep = sleep  # the wait before a create where quota refused the last ones
        self._draw = draw  # its jitter
        project = request.inputs.project
        self.parent = f"projects/{project}/locations/{self.order[0]}"
        home = Site(self.order[0], self.endpoint, self.service, self.backend, self.parent)
        self.sites = Sites(project, request.api_endpoint, home)
        self.dirs = output_dirs(request.base_output_directory)
        # each region's base output directory (prepare(): the bucket's location is read there)
        self.storage = regions.Storage(request.base_output_directory, self.order, {})
        self.state_path = state_uri(request.base_output_directory, request.run_key)
        self.watcher = AttemptWatcher(self.backend, self.dirs["checkpoints"])
        self.state: LaunchState | None = None
        self.base_job: CustomJob | None = None
        self.resumed_from: checkpoints.Manifest | None = None
        self._fresh: set[str] = set()  # submission tokens this process made (known not created)
        self._leaving: Classified | None = None  # leave_region's verdict on the watched job
        self._waiting_since: float | None = None  # since when the watched job waits for VMs
        self._created_at = 0.0  # when the watched job was submitted

    # -- set-up ---------------------------------------------------------------------------------

    def prepare(self) -> CustomJob:
        """Build and validate the Spot CustomJob (nothing is submitted); seed resume_from.

        With several regions, also each region's endpoint and base output directory, so a bad
        set-up fails before anything is submitted.
        """
        inputs = self.request.inputs
        inputs.base_output_directory = self.request.base_output_directory
        extra_env = {}
        if self.request.resume_from:
            extra_env[RESUME_ENV] = self.request.resume_from
        # Built and checked against the service's rules (kfp_spot.validation), errors naming inputs.
        job = build_custom_job(
            inputs, strategy=Strategy.SPOT, extra_env=extra_env, target=self.endpoint.target
        )
        self.storage = regions.prepare_storage(
            self.sites, self.request.base_output_directory, self.order, self.request.region_buckets
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
        self.state = state  # known at once: a signal from here on cancels what it holds
        # gcp_resources outlived the state (another base directory, or a lost write): adopt.
        reattach.adopt(state, recorded, lambda name: self.sites.of_job(name).service, self.clock)
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
            try:  # a signal while reattaching cancels the job it found too
                self.state = self._load_or_start_state()
                outcome, message = self._loop()
            except LaunchInterruptedError as interrupted:
                try:
                    self._cancel_current()
                except (api_exceptions.GoogleAPICallError, ServiceUnreachableError) as exc:
                    log.error("could not cancel the CustomJob: %s", exc)
                    interrupted.cancel_error = str(exc)
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
        tail = self.sites.of_job(name).backend.failure_logs(name)
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
                strategy, region = Strategy.SPOT, self.order[0]
                if ended is not None:
                    decision = decide(
                        self.request.policy,
                        subs,
                        started_at=self.state.started_at,
                        now=self.clock(),
                        location=self.order[0],
                    )
                    if decision.strategy is None:
                        if ended is not Outcome.SUCCEEDED:
                            log.info("not resubmitting: %s", decision.reason)
                        return ended, subs[-1].message
                    strategy, region = decision.strategy, decision.region or self.order[0]
                    log.info("resubmitting on %s in %s: %s", strategy, region, decision.reason)
                step, copied = self.storage.carry(subs, region)
                if not subs and step is not None and not self.request.resume_from:
                    # As on Vertex AI, but said: a user who meant a fresh run sees why it is not.
                    log.info(
                        "resuming from step %d, already committed in %s: this "
                        "base_output_directory was used before (give a new one for a fresh run)",
                        step,
                        self.storage.checkpoints(region),
                    )
                token = uuid.uuid4().hex
                self._fresh.add(token)
                subs.append(
                    Submission(
                        token=token,
                        strategy=strategy,
                        region=region,
                        submitted_at=self.clock(),
                        resume_step=step,
                        copied_bytes=copied,
                    )
                )
                self._save()  # before create: a restarted launcher finds the job by its token
            current = subs[-1]
            site = self.sites.get(region_of(current, self.order))
            if not current.job_name and not self._create(site, current):
                continue
            names = [s.job_name for s in subs if s.job_name]
            gcp_resources.write(  # each job's URI on its own region's endpoint
                self.request.gcp_resources_path,
                [self.sites.of_job(name).endpoint.resource_uri(name) for name in names],
            )
            self.watcher.watch(
                current.job_name,
                current.strategy,
                current.submitted_at,
                backend=site.backend,
                checkpoint_root=self.storage.checkpoints(site.region),
            )
            self._leaving, self._waiting_since = None, None
            self._created_at = current.submitted_at
            job = site.service.wait(
                current.job_name, self.poll, on_poll=self.watcher.poll, stop=self._stop_waiting
            )
            self.watcher.poll(force=True)  # the last attempt's end, before the verdict
            verdict = self._settle(site, job)
            self._finish(current, verdict, job)

    def _create(self, site: Site, current: Submission) -> bool:
        """Find (a lost create's answer) or create ``current``'s job; False if it was refused."""
        assert self.base_job is not None
        # A submission left by an earlier launcher may have been created: look first.
        job = (
            site.service.find_submission(site.parent, current.token)
            if current.token and current.token not in self._fresh
            else None
        )
        base = self.storage.base(site.region)
        if job is None:
            self._wait_for_quota(site)
            current.submitted_at = self.clock()
            spec = with_strategy(
                self.base_job, current.strategy, self.request.inputs.max_wait_duration
            )
            spec.job_spec.base_output_directory.output_uri_prefix = base
            spec.labels[OUTPUT_LABEL] = sharing.output_label(base)
            if (held := self._held(site, base, None)) is not None:
                self._finish(current, held)
                return False
            try:
                job = site.service.create(site.parent, spec, current.token)
            except api_exceptions.GoogleAPICallError as exc:
                verdict = classify_create_error(exc)
                why = f"{verdict.outcome.value}: {verdict.message}"
                log.warning("create refused in %s (%s)", site.region, why)
                self._finish(current, verdict)
                return False
        current.job_name = job.name
        self._save()
        log.info("submitted %s (%s in %s)", job.name, current.strategy, site.region)
        if (held := self._held(site, base, job)) is not None:  # created together: one gives way
            site.service.cancel(job.name)
            self._finish(current, held, site.service.wait_terminal(job.name, self.poll, 60.0))
            return False
        return True

    def _wait_for_quota(self, site: Site) -> None:
        """Wait before a create in ``site``'s region whose last creates were refused for quota."""
        assert self.state is not None
        region = site.region
        wait = quota_wait(
            site.backend.quota_backoff,
            self.state.submissions,
            region,
            order=self.order,
            now=self.clock(),
            draw=self._draw(),
        )
        if wait is None:
            return
        log.info(
            "waiting %.0f s before creating the job in %s: quota refused the last %s there "
            "(%s); a quota frees up as jobs end or its minute passes, so an immediate create "
            "would be refused again",
            wait.seconds,
            region,
            "create" if wait.refusals == 1 else f"{wait.refusals} creates",
            wait.message,
        )
        self._sleep(wait.seconds)

    def _held(self, site: Site, base: str, mine: CustomJob | None) -> Classified | None:
        """A USER_ERROR when another launch's live job writes to ``base`` (:mod:`sharing`).

        Looked for in ``site``'s region and in every other region of the launch whose jobs
        write to ``base`` too: another launch that failed over there still writes to it.
        """
        own = {sub.token for sub in self.state.submissions} if self.state else set()
        regions = [site.region] + [
            region
            for region in self.order
            if region != site.region and self.storage.base(region) == base
        ]
        places = [(self.sites.get(r).service, self.sites.get(r).parent) for r in regions]
        return sharing.check(places, base, mine=mine, own_tokens=own)

    def _stop_waiting(self, job: CustomJob) -> bool:
        """Stop waiting on ``job``: to leave its region, or past the deadline (_abandon_spot)."""
        now = self.clock()
        self._waiting_since = waiting_since(
            running=state_name(job.state) == "JOB_STATE_RUNNING",
            ever_ran=bool(job.start_time),
            before=self._waiting_since,
            created_at=self._created_at,
            now=now,
        )
        self._leaving = leave_region(
            self.request.policy,
            regions=len(self.order),
            strategy=strategy_of(job),
            preempted=self.watcher.preempted,
            waiting_seconds=now - self._waiting_since,
        )
        return self._leaving is not None or self._abandon_spot(job)

    def _abandon_spot(self, job: CustomJob) -> bool:
        """Past the deadline, a Spot job that is waiting for capacity (not running) is given up."""
        assert self.state is not None
        return (
            strategy_of(job) is Strategy.SPOT
            and state_name(job.state) != "JOB_STATE_RUNNING"
            and past_deadline(self.request.policy, self.state.started_at, self.clock())
        )

    def _settle(self, site: Site, job: CustomJob) -> Classified:
        if is_terminal(job):
            return classify(job)
        # Given up (for the next region, or past the deadline): cancel it; Spot ran out here.
        leaving = self._leaving
        if leaving is not None:
            log.warning("leaving %s for the next region: %s", site.region, leaving.message)
        else:
            log.warning("%s still waiting for Spot past the deadline; cancelling", job.name)
        site.service.cancel(job.name)
        ended = site.service.wait_terminal(job.name, self.poll, site.backend.cancel_wait_seconds)
        if ended is not None and state_name(ended.state) != "JOB_STATE_CANCELLED":
            return classify(ended)  # it ended on its own before the cancel took
        if leaving is not None:
            return leaving
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
            "/".join(current.job_name.split("/")[-2:]) or "the submission",  # customJobs/ID
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
        site = self.sites.get(region_of(current, self.order))
        # All of it within the backend's cancel wait, transient errors included: the task is
        # killed soon after the signal, and a cancel it never finished asking for is reported.
        deadline = self.clock() + site.backend.cancel_wait_seconds
        service = site.service.bounded(site.backend.cancel_wait_seconds)
        name = current.job_name
        if not name and current.token:
            found = service.find_submission(site.parent, current.token)
            name = found.name if found else ""
            current.job_name = name
        if not name:
            return
        log.warning("cancelling %s", name)
        service.cancel(name)
        left = deadline - self.clock()
        job = service.bounded(left).wait_terminal(name, self.poll, left)
        verdict = classify(job) if job is not None else Classified(Outcome.CANCELLED, "cancelling")
        self._finish(current, verdict, job)

    # -- the result -----------------------------------------------------------------------------

    def _result(self, outcome: Outcome, message: str) -> LaunchResult:
        assert self.state is not None and self.base_job is not None
        subs = self.state.submissions
        copied = self.storage.bring_home(subs)  # the outputs are home, where the component says
        if copied:
            self.state.copied_back_bytes += copied
            self._save()
        ledgers = {
            sub.job_name: self.sites.of_job(sub.job_name).backend.ledger(sub.job_name)
            for sub in subs
            if sub.job_name
        }
        report = build_report(
            outcome=outcome,
            submissions=self.state.submissions,
            checkpoint_root=self.dirs["checkpoints"],
            pools=pools_of(self.base_job),
            ledgers=ledgers,
            home_region=self.order[0],
            copied_home_bytes=self.state.copied_back_bytes,
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
