"""InputReader: every component reads its inputs the same way, and bad ones end in its own error."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfp_spot.validation.component_inputs import InputReader, dataclass_defaults


class BadInput(ValueError):
    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name


DEFAULTS = {"n": 3, "flag": True, "items": ["a"], "text": "dflt"}


def reader(**inputs: Any) -> InputReader:
    return InputReader(inputs, DEFAULTS, BadInput)


def test_missing_none_and_empty_take_a_copy_of_the_default():
    for value in (None, ""):
        got = reader(items=value).json_value("items", list)
        assert got == ["a"]
        got.append("b")  # the caller's list, not the defaults'
    assert DEFAULTS["items"] == ["a"]
    assert reader().integer("n") == 3 and reader().boolean("flag") is True


def test_empty_text_can_stay_empty_for_inputs_where_empty_is_a_mistake():
    assert reader(text="").text("text") == "dflt"
    assert reader(text="").text("text", empty_is_default=False) == ""


@pytest.mark.parametrize(
    ("method", "value", "expected"),
    [
        ("integer", 4.0, 4),  # kfp.local hands integers back as floats
        ("integer", "7", 7),
        ("number", "2.5", 2.5),
        ("boolean", "FALSE", False),
        ("json_value", '["x", 1]', ["x", 1]),
        ("strings", '["x"]', ["x"]),
        ("string_map", {"k": "v"}, {"k": "v"}),
    ],
)
def test_values_in_the_forms_kfp_hands_over_are_read(method, value, expected):
    args = (list,) if method == "json_value" else ()
    assert getattr(reader(v=value), method)("v", *args) == expected


@pytest.mark.parametrize(
    ("method", "value", "says"),
    [
        ("integer", 2.5, "integer"),
        ("integer", True, "number"),
        ("number", float("nan"), "finite"),
        ("number", "1e999", "finite"),
        ("number", 10**400, "finite"),
        ("boolean", "yes", "true or false"),
        ("text", 5, "string"),
        ("json_value", "[" * 10_000, "deep"),
        ("json_value", "{not json", "JSON"),
        ("json_value", "{}", "expected a list"),
        ("strings", ["a", None], "strings"),
        ("string_map", {"a": 1}, "strings to strings"),
    ],
)
def test_bad_values_end_in_the_components_error_naming_the_input(method, value, says):
    args = (list,) if method == "json_value" else ()
    with pytest.raises(BadInput, match=says) as refused:
        getattr(reader(v=value), method)("v", *args)
    assert refused.value.name == "v"


def test_a_minimum_is_enforced():
    with pytest.raises(BadInput, match=">= 0"):
        reader(v=-0.5).number("v", minimum=0)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
anything = json_values | json_values.map(lambda v: json.dumps(v, allow_nan=True))
TYPES = {"text": str, "number": float, "integer": int, "boolean": bool, "json_list": list}
TYPES |= {"json_dict": dict, "strings": list, "string_map": dict}
METHODS = tuple(TYPES)


@settings(max_examples=300, deadline=None)
@given(value=anything, method=st.sampled_from(METHODS))
def test_any_value_is_read_or_refused_with_the_components_error(value, method):
    read = reader(v=value)
    try:
        if method == "json_list":
            got = read.json_value("v", list)
        elif method == "json_dict":
            got = read.json_value("v", dict)
        else:
            got = getattr(read, method)("v")
    except BadInput as exc:
        assert exc.name == "v"
        return
    assert isinstance(got, TYPES[method])
    if method == "number":
        assert math.isfinite(got)


def test_dataclass_defaults_are_given_as_inputs_carry_them():
    class Mode(enum.Enum):
        FAST = "FAST"

    @dataclasses.dataclass
    class Request:
        required: str
        mode: Mode = Mode.FAST
        items: tuple[str, ...] = ("a",)
        mapping: dict[str, int] = dataclasses.field(default_factory=lambda: {"x": 1})

    assert dataclass_defaults(Request) == {"mode": "FAST", "items": ["a"], "mapping": {"x": 1}}
    assert dataclass_defaults(Request, ("mode",)) == {"mode": "FAST"}
