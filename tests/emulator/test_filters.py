"""The list queries: each method's documented filter grammar, AIP-160 precedence, bounded work,
``orderBy`` and ``readMask``."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest
from google.cloud.aiplatform_v1.types import Model

from kfp_spot.emulator import filters, listing
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


# models.list and endpoints.list document their own fields: the resource ID, display_name with
# = and != (no wildcard), labels, base_model_name with = only; no state, no create_time.
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.models/list
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.endpoints/list
MODELS = {
    "1234": Record("", "mine", {"team": "a", "env": "prod"}, T0, id="1234"),
    "5678": Record("", "theirs", {"team": "b"}, T0 + 10, id="5678"),
}


@pytest.mark.parametrize("grammar", [filters.MODELS, filters.ENDPOINTS])
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{id}=1234", {"1234"}),
        ("{id}!=1234", {"5678"}),
        ('displayName="mine"', {"1234"}),  # "both snake_case and camelCase are supported"
        ('display_name!="mine"', {"5678"}),
        ('labels.team="b"', {"5678"}),
        ("labels.env:*", {"1234"}),
        ("labels:team", {"1234", "5678"}),
        ('baseModelName="text-bison"', set()),  # no model here is tuned from a base model
        ('NOT display_name="mine" OR labels.env:*', {"1234", "5678"}),
    ],
)
def test_the_model_and_endpoint_grammar(grammar, text, expected):
    predicate = compile_filter(text.format(id=grammar.id_field), grammar)
    assert {name for name, record in MODELS.items() if predicate(record)} == expected


@pytest.mark.parametrize("grammar", [filters.MODELS, filters.ENDPOINTS])
@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        # the customJobs.list fields the Model and Endpoint lists do not document
        ('state="JOB_STATE_RUNNING"', "cannot filter on 'state' in {method}"),
        ('create_time>"2026-01-01T00:00:00Z"', "cannot filter on 'create_time' in {method}"),
        ('display_name:"m*"', "display_name takes = or != in {method}"),
        ('labels.team:"a*"', "is not offered by {method}"),
        ('base_model_name!="x"', "base_model_name takes = in {method}"),
        ("{id}>1", "{id} takes = or != in {method}"),
        ("{other}=1", "cannot filter on '{other}' in {method}"),  # the other collection's ID
    ],
)
def test_what_the_model_and_endpoint_lists_do_not_offer_is_refused(grammar, text, fragment):
    other = "endpoint" if grammar is filters.MODELS else "model"
    names = {"id": grammar.id_field, "other": other, "method": grammar.method}
    with pytest.raises(FilterError, match=re.escape(fragment.format(**names))):
        compile_filter(text.format(**names), grammar)


def test_custom_jobs_keep_their_own_fields():
    with pytest.raises(FilterError, match=r"cannot filter on 'model' in customJobs\.list"):
        compile_filter("model=1")
    with pytest.raises(FilterError, match="cannot filter on 'base_model_name'"):
        compile_filter('base_model_name="x"')


@pytest.mark.parametrize(
    ("text", "order"),
    [
        ("", []),
        ("display_name", [("display_name", False)]),
        ("display_name, create_time desc", [("display_name", False), ("create_time", True)]),
        ("update_time desc", [("update_time", True)]),
    ],
)
def test_order_by_takes_the_documented_fields(text, order):
    assert listing.compile_order(text) == order


@pytest.mark.parametrize(
    "text", ["name", "display_name asc", "create_time desc desc", "display_name,", "labels"]
)
def test_order_by_refuses_what_is_not_documented(text):
    with pytest.raises(FilterError, match="not a field to order by"):
        listing.compile_order(text)


def test_sort_by_orders_by_each_key_in_turn_and_keeps_ties_in_their_order():
    def model(name: str, display: str, seconds: int) -> Model:
        pb = Model.pb()(name=name, display_name=display)
        pb.create_time.FromSeconds(seconds)
        return pb

    pbs = [model("a", "x", 3), model("b", "y", 1), model("c", "x", 2), model("d", "x", 2)]
    names = lambda order: [pb.name for pb in listing.sort_by(pbs, order)]  # noqa: E731
    assert names(listing.compile_order("display_name, create_time desc")) == ["a", "c", "d", "b"]
    assert names(listing.compile_order("create_time")) == ["b", "c", "d", "a"]
    assert names([]) == ["a", "b", "c", "d"]


def test_a_read_mask_names_fields_of_the_listed_message():
    pb = Model.pb()(name="n", display_name="d", labels={"a": "b"})
    mask = listing.field_mask("displayName,labels", Model.pb().DESCRIPTOR)
    assert listing.masked(pb, mask) == Model.pb()(display_name="d", labels={"a": "b"})
    assert listing.field_mask("*", Model.pb().DESCRIPTOR) is None
    with pytest.raises(FilterError, match="a Model does not have"):
        listing.field_mask("jobSpec", Model.pb().DESCRIPTOR)
