"""The ``filter`` of ``customJobs.list``: a small subset of Google's list-filter language (AIP-160).

Supported: ``state``, ``display_name`` (or ``displayName``), ``labels.KEY``, ``create_time`` and
``update_time`` compared with ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` or ``:`` (has / contains),
combined with ``AND``, ``OR``, ``NOT`` and parentheses. Values are quoted strings or bare words.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

__all__ = ["FilterError", "Record", "compile_filter"]

_TOKEN = re.compile(
    r"""\s*(?:(?P<op><=|>=|!=|=|<|>|:)|(?P<lp>\()|(?P<rp>\))|"(?P<dq>(?:[^"\\]|\\.)*)"|"""
    r"""'(?P<sq>(?:[^'\\]|\\.)*)'|(?P<word>[^\s()=<>!:"']+))"""
)
FIELDS = ("state", "display_name", "labels.KEY", "create_time", "update_time")


class FilterError(ValueError):
    """The filter cannot be parsed; the message says where and what is accepted."""


@dataclass
class Record:
    """What a filter sees of a job."""

    state: str
    display_name: str
    labels: Mapping[str, str]
    create_time: float
    update_time: float


Predicate = Callable[[Record], bool]


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise FilterError(f"cannot read the filter at {text[pos:]!r}")
        pos = match.end()
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind in ("dq", "sq"):
            out.append(("str", value.replace('\\"', '"').replace("\\'", "'")))
        elif kind == "word" and value in ("AND", "OR", "NOT"):
            out.append((value, value))
        else:
            out.append((kind, value))
    return out


def _time(value: str) -> float:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        example = "2026-01-31T12:00:00Z"
        raise FilterError(f"{value!r} is not an RFC 3339 time such as {example}") from None


def _compare(op: str, left: object, right: object) -> bool:
    if op == "=":
        return left == right
    if op == "!=":
        return left != right
    if op == ":":
        return isinstance(left, str) and isinstance(right, str) and right in left
    ops = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b}
    ops[">="] = lambda a, b: a >= b
    return bool(ops[op](left, right))


def _term(name: str, op: str, value: str) -> Predicate:
    if name == "state":
        if op not in ("=", "!="):
            raise FilterError('state takes = or !=, e.g. state="JOB_STATE_RUNNING"')
        wanted = value if value.startswith("JOB_STATE_") else f"JOB_STATE_{value}"
        return lambda r: _compare(op, r.state, wanted)
    if name in ("display_name", "displayName"):
        return lambda r: _compare(op, r.display_name, value)
    if name.startswith("labels.") and len(name) > len("labels."):
        key = name[len("labels.") :]
        if op == ":" and value == "*":
            return lambda r: key in r.labels
        return lambda r: key in r.labels and _compare(op, r.labels[key], value)
    if name in ("create_time", "createTime", "update_time", "updateTime"):
        when = _time(value)
        attr = "create_time" if name.startswith("create") else "update_time"
        return lambda r: _compare(op, getattr(r, attr), when)
    raise FilterError(f"cannot filter on {name!r}; fields: {', '.join(FIELDS)}")


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos][0] if self.pos < len(self.tokens) else None

    def take(self, kind: str) -> str:
        if self.peek() != kind:
            found = self.tokens[self.pos][1] if self.pos < len(self.tokens) else "the end"
            raise FilterError(f"expected {kind} but found {found!r}")
        self.pos += 1
        return self.tokens[self.pos - 1][1]

    def expr(self) -> Predicate:
        left = self.conj()
        while self.peek() == "OR":
            self.pos += 1
            right = self.conj()
            left = (lambda a, b: lambda r: a(r) or b(r))(left, right)
        return left

    def conj(self) -> Predicate:
        left = self.unary()
        while self.peek() in ("AND", "word", "lp", "NOT", "str"):  # juxtaposition means AND
            if self.peek() == "AND":
                self.pos += 1
            right = self.unary()
            left = (lambda a, b: lambda r: a(r) and b(r))(left, right)
        return left

    def unary(self) -> Predicate:
        if self.peek() == "NOT":
            self.pos += 1
            inner = self.unary()
            return lambda r: not inner(r)
        if self.peek() == "lp":
            self.pos += 1
            inner = self.expr()
            self.take("rp")
            return inner
        name = self.take("word")
        op = self.take("op")
        kind = self.peek()
        if kind not in ("word", "str"):
            raise FilterError(f"expected a value after {name}{op}")
        return _term(name, op, self.take(kind))


def compile_filter(text: str) -> Predicate:
    """Compile a list filter into a predicate on :class:`Record`.

    Raises:
        FilterError: the filter is malformed or names an unsupported field.
    """
    if not text.strip():
        return lambda r: True
    parser = _Parser(_tokens(text))
    predicate = parser.expr()
    if parser.pos != len(parser.tokens):
        raise FilterError(f"unexpected {parser.tokens[parser.pos][1]!r} in the filter")
    return predicate
