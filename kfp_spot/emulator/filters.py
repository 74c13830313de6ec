"""The ``filter`` of Vertex AI's list methods: each method's grammar, parsed and evaluated.

Each list method documents its own filter fields, and a field another method documents is refused
(a 400 naming what is accepted), as on Vertex:

- ``customJobs.list`` (:data:`CUSTOM_JOBS`): ``display_name`` with ``=``, ``!=`` and ``:`` (a
  wildcard match: ``display_name:"my_job_*"``; ``display_name:*`` tests that it is set);
  ``state`` with ``=`` and ``!=`` and a ``JobState`` name; ``create_time`` with ``=``, ``!=``,
  ``<``, ``<=``, ``>``, ``>=`` and an RFC 3339 time; ``labels.KEY=VALUE`` (and ``!=``),
  ``labels.KEY:*`` / ``labels:KEY`` (the key exists) and ``labels.KEY:"v*"`` (a wildcard match of
  the value). https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs/list
- ``models.list`` (:data:`MODELS`) and ``endpoints.list`` (:data:`ENDPOINTS`): ``model`` /
  ``endpoint`` (the resource ID) and ``display_name`` with ``=`` and ``!=``; ``labels.KEY=VALUE``
  (and ``!=``), ``labels.KEY:*`` / ``labels:KEY``; ``base_model_name`` with ``=`` only. No
  ``state``, no ``create_time``, no wildcard.
  https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.models/list and
  https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.endpoints/list

Field names in snake_case or camelCase (``displayName``), as the Model and Endpoint pages say;
terms combined with ``AND`` (or juxtaposition), ``OR``, ``NOT`` / ``-`` and parentheses. As
AIP-160 says, ``OR`` binds tighter than ``AND``: ``a AND b OR c`` is ``a AND (b OR c)``.

A list's ``orderBy`` and ``readMask`` are :mod:`kfp_spot.emulator.listing`'s.

Parsing and evaluation are bounded: a filter is at most ``MAX_LENGTH`` characters and nests at
most ``MAX_DEPTH`` levels of parentheses and negations; conjunctions and disjunctions are flat
lists, so evaluation never recurses deeper than the nesting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from google.cloud.aiplatform_v1.types.job_state import JobState

from kfp_spot.vertex.values import InvalidValueError, rfc3339_seconds

__all__ = [
    "CUSTOM_JOBS",
    "ENDPOINTS",
    "MAX_DEPTH",
    "MAX_LENGTH",
    "MODELS",
    "FilterError",
    "Grammar",
    "Record",
    "compile_filter",
]

MAX_LENGTH = 8192
MAX_DEPTH = 32
_TOKEN = re.compile(
    r"""\s*(?:(?P<op><=|>=|!=|=|<|>|:)|(?P<lp>\()|(?P<rp>\))|"(?P<dq>(?:[^"\\]|\\.)*)"|"""
    r"""'(?P<sq>(?:[^'\\]|\\.)*)'|(?P<word>[^\s()=<>!:"']+))"""
)
_STATES = frozenset(JobState.__members__)
_COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
_EQUALITY = ("=", "!=")
# camelCase spellings of the fields (the Model and Endpoint pages: "both snake_case and camelCase
# are supported").
_SNAKE = {
    "displayName": "display_name",
    "createTime": "create_time",
    "baseModelName": "base_model_name",
    "updateTime": "update_time",
}


class FilterError(ValueError):
    """The filter cannot be parsed; the message says where and what is accepted."""


@dataclass(frozen=True)
class Grammar:
    """The filter one list method documents: its fields and the operators each takes.

    Attributes:
        method: the method, as errors name it (``models.list``).
        fields: field -> operators; ``labels`` is the map (``labels.KEY`` takes its operators,
            ``:`` testing the key, ``labels:KEY`` too), and ``:`` on a field other than
            ``labels`` is a wildcard match.
        label_wildcards: whether ``labels.KEY:"v*"`` matches values (else ``:`` on a label only
            tests that the key exists, ``labels.KEY:*``).
        id_field: the field that is the resource's ID (``model``, ``endpoint``), if any.
    """

    method: str
    fields: Mapping[str, tuple[str, ...]]
    label_wildcards: bool = False
    id_field: str = ""

    def names(self) -> str:
        """The fields, as an error lists them."""
        return ", ".join("labels.KEY" if f == "labels" else f for f in self.fields)


CUSTOM_JOBS = Grammar(
    "customJobs.list",
    {
        "display_name": (*_EQUALITY, ":"),
        "state": _EQUALITY,
        "create_time": _COMPARISONS,
        "labels": (*_EQUALITY, ":"),
    },
    label_wildcards=True,
)
MODELS = Grammar(
    "models.list",
    {
        "model": _EQUALITY,
        "display_name": _EQUALITY,
        "labels": (*_EQUALITY, ":"),
        "base_model_name": ("=",),
    },
    id_field="model",
)
ENDPOINTS = Grammar(
    "endpoints.list",
    {
        "endpoint": _EQUALITY,
        "display_name": _EQUALITY,
        "labels": (*_EQUALITY, ":"),
        "base_model_name": ("=",),
    },
    id_field="endpoint",
)


@dataclass
class Record:
    """What a filter sees of a resource (a job, a model, an endpoint)."""

    state: str
    display_name: str
    labels: Mapping[str, str]
    create_time: float
    id: str = ""
    base_model_name: str = ""


Predicate = Callable[[Record], bool]


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise FilterError(f"cannot read the filter at {text[pos : pos + 40]!r}")
        pos = match.end()
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind in ("dq", "sq"):
            out.append(("str", re.sub(r"\\(.)", r"\1", value)))
        elif kind == "word" and value in ("AND", "OR", "NOT"):
            out.append((value, value))
        else:
            out.append((kind, value))
    return out


def _time(value: str) -> float:
    try:  # with its offset: a local time would depend on the emulator machine's time zone
        return rfc3339_seconds(value)
    except InvalidValueError:
        example = "2026-01-31T12:00:00Z"
        raise FilterError(f"{value!r} is not an RFC 3339 time such as {example}") from None


def _wildcard(pattern: str) -> Callable[[str], bool]:
    """A full match of ``pattern`` where ``*`` stands for any run of characters."""
    if pattern == "*":
        return bool  # present: a non-empty value
    regex = re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)
    return lambda value: regex.fullmatch(value) is not None


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _operators(ops: tuple[str, ...]) -> str:
    return ", ".join(ops[:-1]) + " or " + ops[-1] if len(ops) > 1 else ops[0]


def _term(grammar: Grammar, name: str, op: str, value: str) -> Predicate:
    field = _SNAKE.get(name, name)
    if field == "labels" and op == ":" and "labels" in grammar.fields:
        return lambda r: value in r.labels
    if field.startswith("labels.") and len(field) > len("labels.") and "labels" in grammar.fields:
        key = field[len("labels.") :]
        if op == ":":
            if value != "*" and not grammar.label_wildcards:
                raise FilterError(
                    f"labels.{key}:{value} is not offered by {grammar.method}: ':' on a label "
                    f"tests that the key exists (labels.{key}:*)"
                )
            match = _wildcard(value)
            return lambda r: key in r.labels and (value == "*" or match(r.labels[key]))
        label_ops = grammar.fields["labels"]
        if op not in label_ops:
            raise FilterError(
                f"labels.{key} takes {_operators(label_ops)} in {grammar.method} "
                f"(labels.{key}:* tests the key)"
            )
        compare = _ORDER[op]
        return lambda r: compare(r.labels.get(key), value)
    ops = grammar.fields.get(field) if field != "labels" else None
    if ops is None:
        raise FilterError(
            f"cannot filter on {name!r} in {grammar.method}; fields: {grammar.names()}"
        )
    if op not in ops:
        example = {
            "display_name": ' (a wildcard, display_name:"job_*")' if ":" in ops else "",
            "state": ', e.g. state="JOB_STATE_RUNNING"',
        }.get(field, "")
        raise FilterError(f"{field} takes {_operators(ops)} in {grammar.method}{example}")
    if field == "display_name" and op == ":":
        match = _wildcard(value)
        return lambda r: match(r.display_name)
    if field == "state" and value not in _STATES:
        raise FilterError(f"{value!r} is not a job state; e.g. JOB_STATE_RUNNING")
    compare = _ORDER[op]
    if field == "create_time":
        when = _time(value)
        return lambda r: compare(r.create_time, when)
    attribute = "id" if field == grammar.id_field else field
    return lambda r: compare(getattr(r, attribute), value)


class _Parser:
    """Recursive descent, the recursion bounded by ``MAX_DEPTH``."""

    def __init__(self, tokens: list[tuple[str, str]], grammar: Grammar) -> None:
        self.tokens = tokens
        self.grammar = grammar
        self.pos = 0
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos][0] if self.pos < len(self.tokens) else None

    def take(self, kind: str, what: str) -> str:
        if self.peek() != kind:
            found = self.tokens[self.pos][1] if self.pos < len(self.tokens) else "the end"
            raise FilterError(f"expected {what} but found {found!r}")
        self.pos += 1
        return self.tokens[self.pos - 1][1]

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FilterError(f"nests more than {MAX_DEPTH} levels of parentheses or NOT")

    def conjunction(self) -> Predicate:
        parts = [self.disjunction()]
        while self.peek() in ("AND", "word", "lp", "NOT", "str"):  # juxtaposition means AND
            if self.peek() == "AND":
                self.pos += 1
            parts.append(self.disjunction())
        return parts[0] if len(parts) == 1 else (lambda r: all(p(r) for p in parts))

    def disjunction(self) -> Predicate:
        parts = [self.unary()]
        while self.peek() == "OR":
            self.pos += 1
            parts.append(self.unary())
        return parts[0] if len(parts) == 1 else (lambda r: any(p(r) for p in parts))

    def unary(self) -> Predicate:
        if self.peek() == "NOT" or (
            self.peek() == "word" and self.tokens[self.pos][1].startswith("-")
        ):
            self.nest()
            if self.peek() == "NOT":
                self.pos += 1
            else:  # "-name=..." is the short form of NOT
                self.tokens[self.pos] = ("word", self.tokens[self.pos][1][1:])
            inner = self.unary()
            self.depth -= 1
            return lambda r: not inner(r)
        if self.peek() == "lp":
            self.nest()
            self.pos += 1
            inner = self.conjunction()
            self.take("rp", "')'")
            self.depth -= 1
            return inner
        name = self.take("word", "a field name")
        op = self.take("op", f"an operator after {name}")
        kind = self.peek()
        if kind not in ("word", "str"):
            raise FilterError(f"expected a value after {name}{op}")
        return _term(self.grammar, name, op, self.take(kind, "a value"))


def compile_filter(text: str, grammar: Grammar = CUSTOM_JOBS) -> Predicate:
    """Compile a list filter into a predicate on :class:`Record`.

    Args:
        text: the ``filter`` query parameter.
        grammar: the list method's (:data:`CUSTOM_JOBS`, :data:`MODELS`, :data:`ENDPOINTS`).

    Raises:
        FilterError: the filter is malformed, too long or too deep, or names a field or operator
            that the method does not offer.
    """
    if len(text) > MAX_LENGTH:
        raise FilterError(f"is {len(text)} characters long; at most {MAX_LENGTH} are accepted")
    if not text.strip():
        return lambda r: True
    parser = _Parser(_tokens(text), grammar)
    predicate = parser.conjunction()
    if parser.pos != len(parser.tokens):
        raise FilterError(f"unexpected {parser.tokens[parser.pos][1]!r} in the filter")
    return predicate
