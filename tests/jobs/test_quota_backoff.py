"""The wait before a create where quota refused the last ones: pure, no service."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfp_spot.jobs.backend import backend_for
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.jobs.quota_backoff import QuotaBackoff, quota_wait
from kfp_spot.jobs.recovery import Submission
from kfp_spot.jobs.strategy import Strategy
from kfp_spot.vertex.client import resolve_endpoint

BACKOFF = QuotaBackoff(30.0, 300.0)
ORDER = ("us-central1", "europe-west4")
QUOTA = "The following quota metrics exceed quota limits: ...preemptible_cpus"


def _refused(region: str = "us-central1", ended_at: float = 0.0) -> Submission:
    return Submission(
        "t",
        Strategy.SPOT,
        region=region,
        outcome=Outcome.CAPACITY,
        message=QUOTA,
        ended_at=ended_at,
    )


def _ran(region: str = "us-central1", outcome: Outcome = Outcome.CAPACITY) -> Submission:
    return Submission("t", Strategy.SPOT, job_name="projects/p/locations/l/customJobs/1",
                      region=region, outcome=outcome, ended_at=0.0)  # fmt: skip


def _wait(history, region="us-central1", now=0.0, draw=0.0):
    return quota_wait(BACKOFF, history, region, order=ORDER, now=now, draw=draw)


def test_nothing_refused_goes_at_once():
    assert _wait([]) is None
    assert _wait([_ran()]) is None  # a job that ran out of Spot VMs: the quota let it in


def test_a_refusal_waits_at_least_30_s_doubling_to_the_cap():
    waits = [_wait([_refused()] * n).seconds for n in range(1, 7)]
    assert waits == [30.0, 60.0, 120.0, 240.0, 300.0, 300.0]
    first = _wait([_refused()])
    assert (first.refusals, first.region, first.message) == (1, "us-central1", QUOTA)


@given(st.integers(1, 12), st.floats(0.0, 1.0, exclude_max=True))
def test_jitter_stretches_each_wait_by_at_most_half(refusals, draw):
    base = min(300.0, 30.0 * 2 ** (refusals - 1))
    seconds = _wait([_refused()] * refusals, draw=draw).seconds
    assert base <= seconds <= base * 1.5
    assert seconds <= 450.0


def test_only_what_is_left_of_the_wait_is_waited():
    """A restarted launcher (or one that did other work) waits from the refusal, not anew."""
    assert _wait([_refused(ended_at=100.0)], now=110.0).seconds == pytest.approx(20.0)
    assert _wait([_refused(ended_at=100.0)], now=130.0) is None


def test_refusals_in_another_region_say_nothing_of_this_one():
    assert _wait([_refused("europe-west4")], region="us-central1") is None
    history = [_refused("us-central1"), _refused("europe-west4"), _refused("us-central1")]
    assert _wait(history, region="us-central1").refusals == 2
    assert _wait(history, region="europe-west4").refusals == 1


def test_a_job_made_since_starts_the_count_again():
    history = [_refused(), _refused(), _ran(outcome=Outcome.PREEMPTED_EXHAUSTED), _refused()]
    assert _wait(history).refusals == 1
    assert _wait([_refused(), _ran()]) is None


def test_the_submission_being_created_is_not_a_refusal():
    current = Submission("t", Strategy.SPOT, region="us-central1")  # no outcome yet
    assert _wait([_refused(), current]).refusals == 1


def test_each_backend_waits_on_quota_and_vertex_by_google_s_least_interval():
    vertex = backend_for(resolve_endpoint("us-central1", "")).quota_backoff
    emulator = backend_for(resolve_endpoint("us-central1", "http://127.0.0.1:1")).quota_backoff
    assert vertex.step(1, 0.0) == 30.0  # Service Usage: 30 s at the least for a 429 quota error
    assert 0 < emulator.step(1, 0.0) <= emulator.step(2, 0.0) <= vertex.step(1, 0.0)
