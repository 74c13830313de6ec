"""The Spot capacity table (``kfp_spot.emulator.spot_capacity``): settings, lookup, expiry."""

from __future__ import annotations

import pytest

from kfp_spot.emulator.spot_capacity import (
    QUOTA,
    STOCKOUT,
    SpotCapacity,
    SpotCapacityError,
    quota_message,
    quota_metrics,
    stockout_message,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def table(clock: Clock) -> SpotCapacity:
    return SpotCapacity(clock)


def test_every_region_has_spot_capacity_until_told_otherwise(table):
    assert table.empty()
    assert table.setting("us-central1", "n1-standard-4") is None
    assert table.refusal("us-central1", ["n1-standard-4"]) is None
    assert table.rows() == [] and table.next_change() is None


def test_a_region_without_capacity_refuses_every_machine_type_there_only(table):
    row = table.set("us-central1", available=False)
    assert (row.location, row.machine_type, row.available, row.until, row.refusal) == (
        "us-central1",
        "*",
        False,
        None,
        STOCKOUT,
    )
    assert table.refusal("us-central1", ["e2-standard-4"]) == row
    assert table.refusal("europe-west4", ["e2-standard-4"]) is None


def test_a_machine_type_wins_over_the_star_and_later_calls_replace(table):
    table.set("us-central1", available=False)
    table.set("us-central1", "n1-standard-4", available=True)
    assert table.refusal("us-central1", ["n1-standard-4"]) is None
    assert table.refusal("us-central1", ["n1-standard-4", "e2-standard-4"]).machine_type == "*"
    table.set("us-central1", "n1-standard-4", available=False, refusal=QUOTA)
    assert table.refusal("us-central1", ["n1-standard-4"]).refusal == QUOTA
    assert len(table.rows()) == 2  # one row per (location, machine type)
    table.set("us-central1", available=True)
    assert table.refusal("us-central1", ["e2-standard-4"]) is None
    assert table.refusal("us-central1", ["n1-standard-4"]).machine_type == "n1-standard-4"


def test_a_timed_setting_ends_and_the_next_one_down_decides(table, clock):
    table.set("us-central1", available=False, seconds=60)
    table.set("us-central1", "n1-standard-4", available=True, seconds=10)
    assert table.next_change() == clock.now + 10
    assert table.refusal("us-central1", ["n1-standard-4"]) is None
    clock.now += 10
    assert table.refusal("us-central1", ["n1-standard-4"]).machine_type == "*"
    assert [r.machine_type for r in table.rows()] == ["*"]  # the ended row is gone
    assert table.next_change() == clock.now + 50
    clock.now += 50
    assert table.refusal("us-central1", ["n1-standard-4"]) is None
    assert table.rows() == [] and table.next_change() is None


def test_rows_as_rest_serves_them(table, clock):
    clock.now = 1_800_000_000.0
    table.set("europe-west4", "n1-standard-4", available=False, seconds=30, refusal=QUOTA)
    table.set("europe-west4", available=True)
    assert [r.to_json() for r in table.rows()] == [
        {"location": "europe-west4", "machineType": "*", "available": True, "refusal": STOCKOUT},
        {
            "location": "europe-west4",
            "machineType": "n1-standard-4",
            "available": False,
            "until": "2027-01-15T08:00:30.000Z",
            "refusal": QUOTA,
        },
    ]


def test_every_change_is_told_to_the_listener(table):
    told = []
    table.subscribe(lambda: told.append(1))
    table.set("us-central1", available=False)
    table.set("us-central1", available=True)
    assert len(told) == 2
    listener = told.clear
    table.subscribe(listener)
    table.unsubscribe(listener)
    table.unsubscribe(listener)  # not subscribed any more: ignored
    table.set("us-central1", available=True)
    assert len(told) == 3  # told by the first listener only, never cleared


@pytest.mark.parametrize(
    ("kwargs", "argument", "says"),
    [
        ({"location": "mars-north1"}, "location", "not a Vertex AI region"),
        ({"location": "us-centrall1"}, "location", "did you mean 'us-central1'"),
        ({"location": 3}, "location", "not a Vertex AI region"),
        ({"machine_type": "n9-huge"}, "machine_type", "'*' for every machine type"),
        ({"machine_type": None}, "machine_type", "machines.csv"),
        ({"available": "false"}, "available", "true or false"),
        ({"available": 0}, "available", "true or false"),
        ({"seconds": 0}, "seconds", "> 0"),
        ({"seconds": -1.0}, "seconds", "> 0"),
        ({"seconds": float("inf")}, "seconds", "finite"),
        ({"seconds": True}, "seconds", "number of seconds"),
        ({"seconds": "30"}, "seconds", "number of seconds"),
        ({"refusal": "stockout"}, "refusal", "STOCKOUT, QUOTA"),
    ],
)
def test_bad_values_are_value_errors_naming_the_argument(table, kwargs, argument, says):
    args = {"location": "us-central1", "machine_type": "*", "available": False, **kwargs}
    with pytest.raises(ValueError, match=says) as caught:
        table.set(args.pop("location"), args.pop("machine_type"), **args)
    assert isinstance(caught.value, SpotCapacityError)
    assert caught.value.argument == argument
    assert str(caught.value).startswith(f"{argument}: ")
    assert table.empty()


def test_an_extra_region_is_allowed_through_the_floor(table, monkeypatch):
    monkeypatch.setenv("KFP_SPOT_EXTRA_REGIONS", "mars-north1")
    assert table.set("mars-north1", available=False).location == "mars-north1"


def test_vertex_wording():
    assert quota_metrics(["", ""]) == [
        "aiplatform.googleapis.com/custom_model_training_preemptible_cpus"
    ]
    assert quota_metrics(["NVIDIA_TESLA_T4", "NVIDIA_L4", "NVIDIA_H100_80GB"])[1:] == [
        "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_t4_gpus",
        "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_l4_gpus",
        "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_h100_gpus",
    ]
    assert quota_message([""]) == (
        "The following quota metrics exceed quota limits: "
        "aiplatform.googleapis.com/custom_model_training_preemptible_cpus"
    )
    assert stockout_message("asia-east1") == (
        "Resources are insufficient in region: asia-east1. Please try a different region."
    )
