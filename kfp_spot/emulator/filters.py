"""The ``filter`` of ``customJobs.list``: the fields and operators Vertex AI documents (AIP-160).

What ``projects.locations.customJobs.list`` documents, and all this accepts:

- ``display_name``: ``=``, ``!=`` and ``:`` (a wildcard match: ``display_name:"my_job_*"``;
  ``display_name:*`` tests that it is set);
- ``state``: ``=`` and ``!=`` with a ``JobState`` name (``state="JOB_STATE_SUCCEEDED"``);
- ``create_time``: ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` with an RFC 3339 time;
- ``labels``: ``labels.KEY=VALUE`` (and ``!=``), ``labels.KEY:*`` / ``labels:KEY`` (the key
  exists) and ``labels.KEY:"v*"`` (a wildcard match of the value);

combined with ``AND`` (or juxtaposition), ``OR``, ``NOT`` / ``-`` and parentheses. As AIP-160
says, ``OR`` binds tighter than ``AND``: ``a AND b OR c`` is ``a AND (b OR c)``.

Parsing and evaluation are bounded: a filter is at most ``MAX_LENGTH`` characters and nests at
most ``MAX_DEPTH`` levels of parentheses and negations; conjunctions and disjunctions are flat
lists, so evaluation never recurses deeper than the nesting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from google.cloud.aiplatform_v1.types import JobState

from kfp_spot.vertex.values import InvalidValueError, rfc3339_seconds

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "FilterError", "Record", "compile_filter"]

MAX_LENGTH = 8192
MAX_DEPTH = 32
_TOKEN = re.compile(
    r"""\s*(?:(?P<op><=|>=|!=|=|<|>|:)|(?P<lp>\()|(?P<rp>\))|"(?P<dq>(?:[^"\\]|\\.)*)"|"""
    r"""'(?P<sq>(?:[^'\\]|\\.)*)'|(?P<word>[^\s()=<>!:"']+))"""
)
_STATES = frozenset(JobState.__members__)
FIELDS = ("display_name", "state", "create_time", "labels.KEY")
_COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")


class FilterError(ValueError):
    """The filter cannot be parsed; the message says where and what is accepted."""


@dataclass
class Record:
    """What a filter sees of a job."""

    state: str
    display_name: str
    labels: Mapping[str, str]
    create_time: float


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


def _term(name: str, op: str, value: str) -> Predicate:
    if name in ("display_name", "displayName"):
        if op == ":":
            match = _wildcard(value)
            return lambda r: match(r.display_name)
        if op not in ("=", "!="):
            raise FilterError('display_name takes =, != or : (a wildcard, display_name:"job_*")')
        compare = _ORDER[op]
        return lambda r: compare(r.display_name, value)
    if name == "state":
        if op not in ("=", "!="):
            raise FilterError('state takes = or !=, e.g. state="JOB_STATE_RUNNING"')
        if value not in _STATES:
            raise FilterError(f"{value!r} is not a job state; e.g. JOB_STATE_RUNNING")
        compare = _ORDER[op]
        return lambda r: compare(r.state, value)
    if name in ("create_time", "createTime"):
        if op not in _COMPARISONS:
            raise FilterError("create_time takes =, !=, <, <=, > or >=")
        when = _time(value)
        compare = _ORDER[op]
        return lambda r: compare(r.create_time, when)
    if name == "labels" and op == ":":
        return lambda r: value in r.labels
    if name.startswith("labels.") and len(name) > len("labels."):
        key = name[len("labels.") :]
        if op == ":":
            match = _wildcard(value)
            return lambda r: key in r.labels and (value == "*" or match(r.labels[key]))
        if op not in ("=", "!="):
            raise FilterError(f"labels.{key} takes =, != or : (labels.{key}:* tests the key)")
        compare = _ORDER[op]
        return lambda r: compare(r.labels.get(key), value)
    raise FilterError(f"cannot filter on {name!r}; fields: {', '.join(FIELDS)}")


class _Parser:
    """Recursive descent, the recursion bounded by ``MAX_DEPTH``."""

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
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
        return _term(name, op, self.take(kind, "a value"))


def compile_filter(text: str) -> Predicate:
    """Compile a list filter into a predicate on :class:`Record`.

    Raises:
        FilterError: the filter is malformed, too long or too deep, or names a field or operator
            that ``customJobs.list`` does not offer.
    """
    if len(text) > MAX_LENGTH:
        raise FilterError(f"is {len(text)} characters long; at most {MAX_LENGTH} are accepted")
    if not text.strip():
        return lambda r: True
    parser = _Parser(_tokens(text))
    predicate = parser.conjunction()
    if parser.pos != len(parser.tokens):
        raise FilterError(f"unexpected {parser.tokens[parser.pos][1]!r} in the filter")
    return predicate
