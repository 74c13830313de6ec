from __future__ import annotations

import datetime as dt
import json

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud.aiplatform_v1.types import CustomJob, JobState
from hypothesis import given
from hypothesis import strategies as st

from kfp_spot.jobs.inputs import LaunchInputError
from kfp_spot.jobs.outcome import Outcome, classify, classify_create_error
from kfp_spot.jobs.recovery import (
    LaunchState,
    RecoveryPolicy,
    Submission,
    decide,
    load_state,
    save_state,
)
from kfp_spot.jobs.strategy import Strategy

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _job(state, code=0, message="", started=True):
    job = CustomJob(name="projects/local-project/locations/l/customJobs/1", state=state)
    job.error.code, job.error.message = code, message
    if started:
        job.start_time = NOW
    return job


_REPLICA_FAILED = "The replica workerpool0-0 exited with a non-zero status of 1."
_QUOTA = "Quota exceeded for custom_model_training_cpus"


# The message is what the task's log and job_report say after the outcome: the job's own error,
# or, where the service gave none, a sentence saying what happened.
@pytest.mark.parametrize(
    ("job", "outcome", "message"),
    [
        (_job(JobState.JOB_STATE_SUCCEEDED), Outcome.SUCCEEDED, ""),
        (
            _job(JobState.JOB_STATE_FAILED, 8, "STOCKOUT: preempted"),
            Outcome.PREEMPTED_EXHAUSTED,
            "STOCKOUT: preempted",
        ),
        (
            _job(JobState.JOB_STATE_FAILED, 8, "STOCKOUT", started=False),
            Outcome.CAPACITY,
            "STOCKOUT",
        ),
        (_job(JobState.JOB_STATE_FAILED, 8, _QUOTA), Outcome.CAPACITY, _QUOTA),
        (
            _job(JobState.JOB_STATE_EXPIRED),
            Outcome.CAPACITY,
            "the job expired waiting for capacity",
        ),
        (
            _job(JobState.JOB_STATE_EXPIRED, 0, "no capacity in 2 h"),
            Outcome.CAPACITY,
            "no capacity in 2 h",
        ),
        (_job(JobState.JOB_STATE_FAILED, 3, _REPLICA_FAILED), Outcome.USER_ERROR, _REPLICA_FAILED),
        (
            _job(JobState.JOB_STATE_FAILED, 7, "Permission denied on bucket"),
            Outcome.USER_ERROR,
            "Permission denied on bucket",
        ),
        (_job(JobState.JOB_STATE_CANCELLED), Outcome.CANCELLED, "the job was cancelled"),
        (_job(JobState.JOB_STATE_PAUSED), Outcome.CANCELLED, "the job was paused"),
        (_job(JobState.JOB_STATE_CANCELLED, 1, "CANCELED"), Outcome.CANCELLED, "CANCELED"),
        (_job(JobState.JOB_STATE_FAILED, 4, "Job timed out"), Outcome.TIMEOUT, "Job timed out"),
        (
            _job(JobState.JOB_STATE_FAILED, 13, "Internal error occurred"),
            Outcome.SERVICE_ERROR,
            "Internal error occurred",
        ),
        (_job(JobState.JOB_STATE_FAILED, 13), Outcome.SERVICE_ERROR, "the job failed with code 13"),
    ],
)
def test_classify(job, outcome, message):
    got = classify(job)
    assert (got.outcome, got.message) == (outcome, message)


def test_only_terminal_jobs_are_classified():
    with pytest.raises(ValueError, match="JOB_STATE_RUNNING"):
        classify(_job(JobState.JOB_STATE_RUNNING))


def test_create_errors():
    assert (
        classify_create_error(api_exceptions.TooManyRequests("quota")).outcome == Outcome.CAPACITY
    )
    assert (
        classify_create_error(api_exceptions.BadRequest("bad machine")).outcome
        == Outcome.USER_ERROR
    )
    assert (
        classify_create_error(api_exceptions.InternalServerError("x")).outcome
        == Outcome.SERVICE_ERROR
    )


def _sub(strategy, outcome):
    return Submission(token="t", strategy=strategy, outcome=outcome)


def test_user_error_is_never_resubmitted():
    decision = decide(
        RecoveryPolicy(max_resubmissions=10),
        [_sub(Strategy.SPOT, Outcome.USER_ERROR)],
        started_at=0,
        now=1,
    )
    assert not decision.resubmit


def test_fallback_after_and_staying_on_standard():
    policy = RecoveryPolicy(max_resubmissions=5, fallback_after=2)
    history = [_sub(Strategy.SPOT, Outcome.PREEMPTED_EXHAUSTED)]
    assert decide(policy, history, started_at=0, now=1).strategy is Strategy.SPOT
    history.append(_sub(Strategy.SPOT, Outcome.CAPACITY))
    assert decide(policy, history, started_at=0, now=1).strategy is Strategy.STANDARD
    history.append(_sub(Strategy.STANDARD, Outcome.CAPACITY))
    assert decide(policy, history, started_at=0, now=1).strategy is Strategy.STANDARD


def test_deadline_falls_back():
    policy = RecoveryPolicy(
        max_resubmissions=5, deadline_seconds=60, fallback_strategy="FLEX_START"
    )
    history = [_sub(Strategy.SPOT, Outcome.PREEMPTED_EXHAUSTED)]
    assert decide(policy, history, started_at=0, now=59).strategy is Strategy.SPOT
    assert decide(policy, history, started_at=0, now=60).strategy is Strategy.FLEX_START


outcomes = st.sampled_from(list(Outcome))


@given(
    st.integers(0, 5),
    st.integers(0, 5),
    st.lists(
        st.sampled_from([Outcome.PREEMPTED_EXHAUSTED, Outcome.CAPACITY, Outcome.SERVICE_ERROR]),
        max_size=12,
    ),
    outcomes,
)
def test_ladder_never_exceeds_its_budget(max_resubmissions, fallback_after, recoverable, final):
    """Play a ladder out: submissions never exceed 1 + max_resubmissions; non-recoverable ends it;
    once it falls back it never returns to Spot."""
    policy = RecoveryPolicy(max_resubmissions=max_resubmissions, fallback_after=fallback_after)
    history = [Submission("t", Strategy.SPOT)]
    for outcome in [*recoverable, final]:
        history[-1].outcome = outcome
        decision = decide(policy, history, started_at=0, now=0)
        if decision.strategy is None:
            assert not decision.resubmit
            break
        assert outcome in (Outcome.PREEMPTED_EXHAUSTED, Outcome.CAPACITY, Outcome.SERVICE_ERROR)
        history.append(Submission("t", decision.strategy))
    assert len(history) <= 1 + max_resubmissions
    strategies = [s.strategy for s in history]
    if Strategy.STANDARD in strategies:
        assert Strategy.SPOT not in strategies[strategies.index(Strategy.STANDARD) :]
        assert fallback_after > 0


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"max_resubmissions": -1}, "max_resubmissions"),
        ({"fallback_after": -1}, "fallback_after"),
        ({"fallback_strategy": "SPOT"}, "fallback_strategy"),
        ({"deadline_seconds": -5}, "deadline_seconds"),
    ],
)
def test_policy_inputs_are_checked(kw, field):
    with pytest.raises(LaunchInputError) as info:
        RecoveryPolicy(**kw)
    assert info.value.field == field


def test_state_round_trip_and_other_runs_are_ignored(tmp_path):
    uri = str(tmp_path / "state.json")
    job = "projects/local-project/locations/l/customJobs/9"
    state = LaunchState(
        "run-a",
        12.5,
        [
            Submission("tok", Strategy.SPOT, job_name=job, outcome=Outcome.PREEMPTED_EXHAUSTED),
            Submission("tok2", Strategy.STANDARD),
        ],
    )
    save_state(uri, state)
    loaded = load_state(uri, "run-a")
    assert loaded == state
    assert loaded.submissions[0].outcome is Outcome.PREEMPTED_EXHAUSTED
    assert loaded.submissions[1].strategy is Strategy.STANDARD
    assert loaded.submissions[1].outcome is None
    # The file keeps the API's names: strings at the edge.
    written = json.loads((tmp_path / "state.json").read_text())["submissions"]
    assert [(s["strategy"], s["outcome"]) for s in written] == [
        ("SPOT", "PREEMPTED_EXHAUSTED"),
        ("STANDARD", ""),
    ]
    assert load_state(uri, "run-b") is None
    (tmp_path / "state.json").write_text("{not json")
    assert load_state(uri, "run-a") is None


def test_a_state_file_of_the_previous_version_still_loads(tmp_path):
    """Strings in, enums inside: "" is a job still running; fields we do not know are ignored."""
    path = tmp_path / "state.json"
    old = {"token": "t", "job_name": "j", "message": "", "submitted_at": 1.0, "ended_at": 0.0}
    old |= {"resume_step": None, "create_time": "", "start_time": "", "end_time": ""}
    doc = {
        "format": "kfp-spot-launcher/1",
        "run_key": "run-a",
        "started_at": 1.0,
        "submissions": [
            {**old, "strategy": "SPOT", "outcome": "CAPACITY", "added_later": 1},
            {**old, "strategy": "ON_DEMAND", "outcome": "SERVICE_ERROR"},  # the API's alias
            {**old, "strategy": "FLEX_START", "outcome": ""},
        ],
    }
    path.write_text(json.dumps(doc))
    state = load_state(str(path), "run-a")
    assert [(s.strategy, s.outcome) for s in state.submissions] == [
        (Strategy.SPOT, Outcome.CAPACITY),
        (Strategy.STANDARD, Outcome.SERVICE_ERROR),
        (Strategy.FLEX_START, None),
    ]
    assert all(isinstance(s.strategy, Strategy) for s in state.submissions)


@pytest.mark.parametrize(
    "bad",
    [
        {"token": "t", "strategy": "CHEAPEST", "outcome": ""},
        {"token": "t", "strategy": "SPOT", "outcome": "EXPLODED"},
        {"token": "t", "outcome": ""},
        "not a submission",
    ],
)
def test_a_state_file_with_a_bad_submission_is_ignored_not_crashed_on(tmp_path, bad):
    path = tmp_path / "state.json"
    doc = {"format": "kfp-spot-launcher/1", "run_key": "r", "started_at": 0, "submissions": [bad]}
    path.write_text(json.dumps(doc))
    assert load_state(str(path), "r") is None


def test_the_policy_takes_a_strategy_name_and_holds_the_enum():
    assert RecoveryPolicy(fallback_strategy="FLEX_START").fallback_strategy is Strategy.FLEX_START
    assert RecoveryPolicy().fallback_strategy is Strategy.STANDARD


@pytest.mark.filterwarnings("ignore:Unrecognized JobState")  # proto-plus says so; we cope
def test_a_state_this_client_does_not_know_is_waited_on_not_crashed_on():
    from kfp_spot.jobs.outcome import is_terminal, state_name

    job = CustomJob.wrap(
        CustomJob.pb(CustomJob(name="projects/local-project/locations/l/customJobs/1"))
    )
    CustomJob.pb(job).state = 99  # a JobState added to the API later
    assert not is_terminal(job)
    assert state_name(99) == "STATE_99"
    with pytest.raises(ValueError, match="STATE_99"):
        classify(job)


def test_a_submission_records_the_jobs_times_and_strategy_as_the_service_gave_them():
    from kfp_spot.jobs import reattach

    job = CustomJob(
        name="projects/local-project/locations/l/customJobs/7",
        state=JobState.JOB_STATE_RUNNING,
        create_time=NOW - dt.timedelta(minutes=1),
        start_time=NOW,
        job_spec={"scheduling": {"strategy": "LOW_COST"}},  # the API's deprecated name for Spot
    )
    sub = reattach._submission(job, clock=lambda: 0.0)
    assert sub.strategy is Strategy.SPOT
    assert sub.outcome is None
    assert sub.submitted_at == (NOW - dt.timedelta(minutes=1)).timestamp()
    assert (sub.create_time, sub.start_time, sub.end_time) == (
        (NOW - dt.timedelta(minutes=1)).isoformat(),
        NOW.isoformat(),
        "",  # not ended: unset on the job
    )
