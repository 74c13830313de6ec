"""The list filter: Vertex's documented grammar, AIP-160 precedence, and bounded work."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from kfp_spot.emulator.filters import MAX_DEPTH, MAX_LENGTH, FilterError, Record, compile_filter

T0 = datetime(2026, 5, 18, tzinfo=timezone.utc).timestamp()
JOBS = {
    "sd-train": Record("JOB_STATE_SUCCEEDED", "sd-train", {"team": "a", "env": "prod"}, T0),
    "sd-eval": Record("JOB_STATE_FAILED", "sd-eval", {"team": "b"}, T0 + 10),
    "my_job_1": Record("JOB_STATE_RUNNING", "my_job_1", {}, T0 + 20),
    "other": Record("JOB_STATE_SUCCEEDED", "other sd", {"env": "dev"}, T0 + 30),
}


def matching(text: str) -> set[str]:
    predicate = compile_filter(text)
    return {name for name, record in JOBS.items() if predicate(record)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the examples of projects.locations.customJobs.list
        ('state="JOB_STATE_SUCCEEDED" AND display_name:"my_job_*"', set()),
        ('state!="JOB_STATE_FAILED" OR display_name="my_job"', {"sd-train", "my_job_1", "other"}),
        ('NOT display_name="my_job_1"', {"sd-train", "sd-eval", "other"}),
        ('create_time>"2026-05-18T00:00:15Z"', {"my_job_1", "other"}),
        # an offset and protobuf's nanoseconds, read alike on every Python (3.10's
        # fromisoformat takes neither a Z nor more than 6 fractional digits)
        ('create_time>"2026-05-18T02:00:15.000000001+02:00"', {"my_job_1", "other"}),
        ('create_time<"2026-05-18T00:00:10.5Z"', {"sd-train", "sd-eval"}),
        ("labels.team=a", {"sd-train"}),
        ("labels.env:*", {"sd-train", "other"}),
        # ':' on display_name is a wildcard match of the whole name, not a substring test
        ('display_name:"sd*"', {"sd-train", "sd-eval"}),
        ('display_name:"*sd"', {"other"}),
        ('display_name:"sd"', set()),
        ('display_name:"sd-*n"', {"sd-train"}),
        ("display_name:*", set(JOBS)),
        ("labels:team", {"sd-train", "sd-eval"}),
        ('labels.env:"p*"', {"sd-train"}),
        ('-display_name:"sd*"', {"my_job_1", "other"}),
        # AIP-160: OR binds tighter than AND
        (
            'state="JOB_STATE_SUCCEEDED" AND labels.team=a OR labels.env=dev',
            {"sd-train", "other"},
        ),
        ('(state="JOB_STATE_FAILED") labels.team=b', {"sd-eval"}),  # juxtaposition is AND
        ("", set(JOBS)),
    ],
)
def test_documented_grammar(text, expected):
    assert matching(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("update_time>1", "cannot filter on 'update_time'"),
        ('state:"JOB_STATE_RUNNING"', "state takes = or !="),
        ('state="RUNNING"', "not a job state"),
        ('display_name>"a"', "display_name takes"),
        ("labels.team<a", "labels.team takes"),
        ('create_time:"x"', "create_time takes"),
        ('create_time>"yesterday"', "RFC 3339"),
        # no offset: a local time, which would depend on the emulator machine's time zone
        ('create_time>"2026-05-18T00:00:15"', "RFC 3339"),
        ("state=", "expected a value"),
        ('(state="JOB_STATE_RUNNING"', "expected ')'"),
        ('state="JOB_STATE_RUNNING")', "unexpected ')'"),
        ('"dangling', "cannot read the filter"),
    ],
)
def test_what_vertex_does_not_offer_is_refused(text, fragment):
    with pytest.raises(FilterError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        compile_filter(text)


def test_nesting_is_bounded_not_a_recursion_error():
    term = 'state="JOB_STATE_RUNNING"'
    assert matching("(" * MAX_DEPTH + term + ")" * MAX_DEPTH) == {"my_job_1"}
    for deep in ("(" * 5000 + term + ")" * 5000, "NOT " * 1000 + term, "-" * 3000 + "state=x"):
        with pytest.raises(FilterError, match=f"more than {MAX_DEPTH} levels"):
            compile_filter(deep[:MAX_LENGTH])


def test_length_is_bounded_and_long_flat_filters_evaluate_without_recursion():
    with pytest.raises(FilterError, match=f"at most {MAX_LENGTH}"):
        compile_filter("x" * (MAX_LENGTH + 1))
    # 400 ANDed and 400 ORed terms: flat lists, evaluated without deep recursion
    wide_and = " AND ".join(['display_name!="nobody"'] * 300)
    wide_or = " OR ".join(['display_name="nobody"'] * 300 + ['display_name="other sd"'])
    assert len(wide_and) < MAX_LENGTH and len(wide_or) < MAX_LENGTH
    assert matching(wide_and) == set(JOBS)
    assert matching(wide_or) == {"other"}
