"""The order of (region, strategy) pairs docs/launcher.md shows is the one decide() follows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfp_spot.jobs.inputs import LaunchInputError
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.jobs.recovery import (
    RecoveryPolicy,
    RegionPolicy,
    Submission,
    decide,
    leave_region,
    plan,
)
from kfp_spot.jobs.strategy import Strategy

DOC = Path(__file__).resolve().parents[2] / "docs" / "launcher.md"
TWO = ["us-central1", "europe-west4"]


def _doc_rows() -> list[list[str]]:
    text = DOC.read_text()
    table = text.split("<!-- region-plan -->")[1].split("<!-- /region-plan -->")[0]
    rows = [line.strip().strip("|").split("|") for line in table.strip().splitlines()[2:]]
    return [[cell.strip().strip("`") for cell in row] for row in rows]


def test_the_documented_order_is_the_one_decide_follows() -> None:
    rows = _doc_rows()
    assert len(rows) >= 3
    for regions, fallback_after, budget, tried in rows:
        location = "us-central1"
        listed = [] if regions.startswith("[]") else json.loads(regions)
        policy = RecoveryPolicy(
            max_resubmissions=int(budget), fallback_after=int(fallback_after), regions=listed
        )
        shown = [tuple(pair.split()) for pair in tried.split(", ")]
        assert [(r, s.value) for r, s in plan(policy, location)] == shown


def _ended(region: str, outcome: Outcome, strategy: Strategy = Strategy.SPOT) -> Submission:
    return Submission("t", strategy, region=region, outcome=outcome)


def test_capacity_in_the_first_region_moves_to_the_second() -> None:
    policy = RecoveryPolicy(regions=TWO)
    decision = decide(policy, [_ended("us-central1", Outcome.CAPACITY)], started_at=0, now=0)
    assert (decision.region, decision.strategy) == ("europe-west4", Strategy.SPOT)


def test_a_user_error_is_never_retried_in_another_region() -> None:
    policy = RecoveryPolicy(regions=TWO, max_resubmissions=5)
    decision = decide(policy, [_ended("us-central1", Outcome.USER_ERROR)], started_at=0, now=0)
    assert decision.strategy is None and decision.region == ""


def test_a_service_error_is_retried_in_the_same_region() -> None:
    policy = RecoveryPolicy(regions=TWO)
    decision = decide(policy, [_ended("europe-west4", Outcome.SERVICE_ERROR)], started_at=0, now=0)
    assert (decision.region, decision.strategy) == ("europe-west4", Strategy.SPOT)


def test_a_record_without_a_region_ran_in_the_first_one() -> None:
    policy = RecoveryPolicy(regions=TWO)
    decision = decide(policy, [_ended("", Outcome.PREEMPTED_EXHAUSTED)], started_at=0, now=0)
    assert decision.region == "europe-west4"


def test_without_regions_the_job_stays_in_its_location() -> None:
    decision = decide(
        RecoveryPolicy(), [_ended("", Outcome.CAPACITY)], started_at=0, now=0, location="asia-east1"
    )
    assert (decision.region, decision.strategy) == ("asia-east1", Strategy.SPOT)


def test_past_the_deadline_the_fallback_runs_in_the_home_region() -> None:
    policy = RecoveryPolicy(regions=TWO, deadline_seconds=10)
    decision = decide(policy, [_ended("europe-west4", Outcome.CAPACITY)], started_at=0, now=11)
    assert (decision.region, decision.strategy) == ("us-central1", Strategy.STANDARD)


@pytest.mark.parametrize(
    ("policy", "preempted", "waiting", "outcome"),
    [
        (RecoveryPolicy(regions=TWO, region_policy=RegionPolicy.EAGER), True, 0, "PREEMPTED"),
        (RecoveryPolicy(regions=TWO), True, 0, None),  # STAY lets the service restart it
        (RecoveryPolicy(regions=TWO, region_wait_seconds=60), False, 60, "CAPACITY"),
        (RecoveryPolicy(regions=TWO, region_wait_seconds=60), False, 59, None),
        (RecoveryPolicy(region_wait_seconds=60, region_policy="eager"), True, 99, None),  # 1 region
    ],
)
def test_leave_region(
    policy: RecoveryPolicy, preempted: bool, waiting: float, outcome: str | None
) -> None:
    regions = len(policy.order("us-central1"))
    verdict = leave_region(
        policy,
        regions=regions,
        strategy=Strategy.SPOT,
        preempted=preempted,
        waiting_seconds=waiting,
    )
    if outcome is None:
        assert verdict is None
    else:
        assert verdict is not None and verdict.outcome.value.startswith(outcome)


def test_a_fallback_job_is_never_given_up_for_another_region() -> None:
    policy = RecoveryPolicy(regions=TWO, region_policy=RegionPolicy.EAGER, region_wait_seconds=1)
    assert (
        leave_region(
            policy, regions=2, strategy=Strategy.STANDARD, preempted=True, waiting_seconds=5
        )
        is None
    )


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"regions": ["us-central1", "us-central1"]}, "more than once"),
        ({"regions": ["mars-north1"]}, "mars-north1"),
        ({"regions": "us-central1"}, "list"),
        ({"region_policy": "sometimes"}, "STAY, EAGER"),
        ({"region_wait_seconds": -1}, ">= 0"),
    ],
)
def test_bad_region_inputs_name_the_input(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(LaunchInputError) as info:
        RecoveryPolicy(**kwargs)  # type: ignore[arg-type]
    assert needle in str(info.value)
    assert re.search(r"'region", str(info.value))


@given(
    outcomes=st.lists(
        st.sampled_from([Outcome.CAPACITY, Outcome.PREEMPTED_EXHAUSTED, Outcome.SERVICE_ERROR]),
        min_size=1,
        max_size=8,
    ),
    fallback_after=st.integers(0, 4),
    count=st.integers(1, 4),
)
def test_spot_runs_in_every_region_before_any_fallback(
    outcomes: list[Outcome], fallback_after: int, count: int
) -> None:
    regions = ["us-central1", "europe-west4", "asia-east1", "us-east1"][:count]
    policy = RecoveryPolicy(
        regions=regions, fallback_after=fallback_after, max_resubmissions=len(outcomes)
    )
    history: list[Submission] = []
    region, strategy = regions[0], Strategy.SPOT
    for outcome in outcomes:
        history.append(Submission("t", strategy, region=region, outcome=outcome))
        decision = decide(policy, history, started_at=0, now=0)
        if decision.strategy is None:
            break
        assert decision.region in regions
        if decision.strategy is not Strategy.SPOT:
            out = {
                s.region
                for s in history
                if s.strategy is Strategy.SPOT
                and s.outcome in (Outcome.CAPACITY, Outcome.PREEMPTED_EXHAUSTED)
            }
            assert out == set(regions) and decision.region == regions[0]
        region, strategy = decision.region, decision.strategy
