"""The emulator's one route table: every REST method as a row, and the dispatcher over them.

A :class:`Route` is data: an HTTP method, a path template, the handler that answers it, the
query parameters it binds and, for a ``body: "*"`` request that carries only the path's own
fields, the body fields it accepts. :func:`kfp_spot.emulator.routes.route_table` puts every
row (CustomJobs, the emulator's own methods, the Model, Endpoint and Prediction APIs) into one
:class:`RouteTable`; the HTTP server (``server.py``) asks it :meth:`RouteTable.match` for each
request. Adding an emulator method is one row and its handler.

Path templates (a subset of ``google.api.http`` path templates, compiled once, when the table is
built):

- literal text: ``/customJobs``, ``:cancel``;
- ``(v1|v1beta1)``: one path segment, one of the listed literals;
- ``*``: one segment of a resource ID (``[^/:]+``: ``:`` begins a custom method);
- ``+``: one segment of a parent (``[^/]+``: a project ID may hold a ``:``);
- ``{var=...}``: binds the text the inner template matches to ``var`` (``Request.params``).

A template begins with a literal segment or a choice; the table indexes its routes by that first
segment, the number of ``/`` in the path, a literal segment that tells the templates of that
shape apart (the collection, e.g. ``customJobs``) and the custom method (``:cancel``), so a
request is tried against one template (two dict lookups and one compiled regex). Templates do
not overlap: a path matches at most one template, whose methods answer (404, naming them, for
another method; 404 for a path no template matches).

A matched request that names a resource of a project (``projects/P/locations/L...``, bound to
``parent`` or ``name``) has its project and location judged before anything else of it (query,
body) is read (:func:`kfp_spot.emulator.scope.check_scope`, given the route's IAM permission,
:attr:`Route.permission`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import parse_qs

from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.payloads import check_request_field, decode_json, refuse_unknown
from kfp_spot.emulator.scope import check_scope
from kfp_spot.vertex.values import INT32_MAX

MAX_QUERY_FIELDS = 64
# What templates begin with: the API versions, and where the GAPIC REST operations client asks
# too (``/ui/``); a location-scoped parent, as templates write it inside a ``{var=...}``.
V1 = "/(v1|v1beta1)"
OPS = "/(v1|v1beta1|ui)"
PARENT = "projects/+/locations/+"
# Query parameters every Google API takes (system parameters); accepted and ignored here.
SYSTEM_PARAMETERS = frozenset(
    {
        "$alt",
        "alt",
        "$fields",
        "fields",
        "key",
        "$prettyPrint",
        "prettyPrint",
        "quotaUser",
        "$quotaUser",
        "access_token",
        "oauth_token",
        "callback",
        "$callback",
        "$.xgafv",
        "upload_protocol",
        "uploadType",
        "userProject",
        "$userProject",
    }
)

_TOKEN = re.compile(
    r"\{(?P<var>[a-z_]+)=(?P<inner>[^{}]+)\}|\((?P<choice>[^()/]+)\)|(?P<id>\*)|(?P<any>\+)"
    r"|(?P<literal>[^{}()*+]+)"
)
_CAMEL = re.compile(r"([A-Z])")


def _snake(name: str) -> str:
    return _CAMEL.sub(lambda m: "_" + m.group(1).lower(), name)


@cache
def compile_template(template: str) -> re.Pattern[str]:
    """The regular expression of a path template (see the module's docstring), compiled once.

    Raises:
        ValueError: ``template`` is not a template.
    """
    return re.compile(_pattern(template, binding=True))


def _pattern(template: str, *, binding: bool) -> str:
    out, at = [], 0
    while at < len(template):
        token = _TOKEN.match(template, at)
        if token is None or (token["var"] and not binding):
            raise ValueError(f"bad path template {template!r} at {at}")
        at = token.end()
        if token["var"]:
            out.append(f"(?P<{token['var']}>{_pattern(token['inner'], binding=False)})")
        elif token["choice"]:
            out.append("(?:" + "|".join(re.escape(c) for c in token["choice"].split("|")) + ")")
        elif token["id"]:
            out.append("[^/:]+")
        elif token["any"]:
            out.append("[^/]+")
        else:
            out.append(re.escape(token["literal"]))
    return "".join(out)


def _heads(template: str) -> tuple[str, ...]:
    """The literals a template's first path segment can be."""
    head = template[1:].split("/", 1)[0] if template.startswith("/") else ""
    if head.startswith("(") and head.endswith(")"):
        return tuple(head[1:-1].split("|"))
    if not head or not re.fullmatch(r"[A-Za-z0-9_.-]+", head):
        raise ValueError(f"path template {template!r} must begin with a literal segment or choice")
    return (head,)


class Query:
    """The query parameters of one request, checked against what its route binds."""

    def __init__(self, text: str, params: Collection[str]) -> None:
        try:
            raw = parse_qs(text, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS)
        except ValueError:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"the query string has more than {MAX_QUERY_FIELDS} parameters",
            ) from None
        self.int_enums = any("enum-encoding=int" in v for v in raw.get("$alt", []))
        self.values: dict[str, str] = {}
        for key, values in raw.items():
            if key in SYSTEM_PARAMETERS:
                continue
            name = _snake(key)
            if name not in params:
                raise ApiError(
                    "INVALID_ARGUMENT",
                    f"Invalid JSON payload received. Unknown name {json.dumps(key)}: Cannot bind "
                    f"query parameter. Field '{key}' could not be found in request message."
                    + (f" (accepted: {', '.join(params)})" if params else ""),
                    key,
                )
            if len(values) > 1 or name in self.values:
                raise ApiError(
                    "INVALID_ARGUMENT",
                    f"Invalid JSON payload received. Multiple values for non-repeated field "
                    f"{json.dumps(key)}.",
                    key,
                )
            self.values[name] = values[0]

    def text(self, name: str) -> str:
        """A string parameter ("" when absent)."""
        return self.values.get(name, "")

    def int32(self, name: str) -> int:
        """An int32 parameter (0 when absent)."""
        value = self.values.get(name, "")
        if not value:
            return 0
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or not -(2**31) <= number <= INT32_MAX:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"Invalid value at '{name}' (TYPE_INT32), {json.dumps(value)}",
                name,
            )
        return number


@dataclass(frozen=True)
class Request:
    """One request as a handler sees it (read whole, within the server's limits).

    Attributes:
        params: the template's variables (e.g. ``name``, ``parent``).
        query: the query parameters, checked against what the route binds.
        body: the request body (``b""`` when there is none).
        content_type: the request's Content-Type header ("" when absent).
    """

    params: Mapping[str, str]
    query: Query
    body: bytes
    content_type: str = ""


@dataclass(frozen=True)
class Reply:
    """An answer that is not a 200 JSON document, e.g. a model server's own ``:rawPredict`` body.

    Attributes:
        status: the HTTP status.
        body: the body, sent as is.
        headers: headers to send (``Content-Type`` among them; JSON when absent).
    """

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


Answer = dict[str, Any] | str | Reply
"""What a handler answers: a JSON document (object or text) or a :class:`Reply`."""


@dataclass(frozen=True)
class Route:
    """One REST method of the emulator.

    Attributes:
        method: the HTTP method (``HEAD`` is answered as ``GET`` without the body).
        template: the path template (see the module's docstring).
        handler: ``handler(api, request)`` answers; ``api`` is its :class:`RouteGroup`'s.
            It raises :class:`~kfp_spot.emulator.errors.ApiError` to refuse.
        params: the query parameters it binds (snake_case; system parameters always pass).
        body: for a request whose body may only repeat the path's fields (``body: "*"`` with
            nothing else), those fields; the body is checked before the handler runs. None: the
            handler reads the body itself (or ignores it).
        permission: the IAM permission Vertex AI checks on the request's resource (e.g.
            ``aiplatform.customJobs.create``; ``{collection}`` stands for the resource's
            collection, ``models`` or ``endpoints``), named when its project is refused. ""
            for the emulator's own methods, which Vertex AI does not have.
    """

    method: str
    template: str
    handler: Callable[[Any, Request], Answer]
    params: tuple[str, ...] = ()
    body: tuple[str, ...] | None = None
    permission: str = ""


@dataclass(frozen=True)
class RouteGroup:
    """Routes of one API surface and the object their handlers are given.

    Attributes:
        api: passed to each route's handler.
        routes: the rows.
        served: what they serve, for the 404 of an unknown path (e.g. ``/v1/.../endpoints``).
    """

    api: Any
    routes: Sequence[Route]
    served: str


@dataclass(frozen=True)
class Match:
    """The route a request reached, the API its handler is given and the path's variables."""

    route: Route
    api: Any
    params: dict[str, str]


@dataclass
class _Path:
    """One template: its compiled pattern and the routes by method."""

    template: str
    pattern: re.Pattern[str]
    methods: dict[str, tuple[Route, Any]]


_LITERAL_SEGMENT = re.compile(r"(?:\{[a-z_]+=)?([A-Za-z0-9_.-]+)\}*")


class _Shape:
    """The templates of one first segment and depth, keyed by what tells them apart cheaply.

    ``position``: a segment every template has as a literal (the collection, e.g. ``customJobs``)
    or 0 for none; ``verbs``: whether the last segment's custom method (``:cancel``) keys them
    too. A path is then matched against the one or two templates of its key.
    """

    def __init__(self, paths: list[_Path]) -> None:
        pieces = [p.template.split("/") for p in paths]
        self.verbs = all("+" not in split[-1] for split in pieces)
        self.last = len(pieces[0]) - 1
        literals = [[_literal(piece) for piece in self._names(split)] for split in pieces]
        positions = [
            i for i in range(2, self.last + 1) if all(lits[i] is not None for lits in literals)
        ]
        self.position = max(positions, key=lambda i: len({lits[i] for lits in literals}), default=0)
        self.paths: dict[tuple[str, str], list[_Path]] = {}
        for path, split, lits in zip(paths, pieces, literals, strict=True):
            key = (lits[self.position] or "", self._verb(split[-1]))
            self.paths.setdefault(key, []).append(path)

    def _names(self, segments: list[str]) -> list[str]:
        """The segments without the last one's custom method (when verbs key the shape)."""
        return [*segments[:-1], segments[-1].partition(":")[0]] if self.verbs else segments

    def _verb(self, last: str) -> str:
        return last.partition(":")[2] if self.verbs else ""

    def candidates(self, segments: list[str]) -> list[_Path]:
        """The templates a path of this shape (split at ``/``) can match."""
        at = self.position
        name = segments[at].partition(":")[0] if at == self.last and self.verbs else segments[at]
        return self.paths.get((name if at else "", self._verb(segments[-1])), [])


def _literal(piece: str) -> str | None:
    """The literal a template's path segment is (``customJobs``), None for anything else."""
    found = _LITERAL_SEGMENT.fullmatch(piece)
    return found.group(1) if found else None


class RouteTable:
    """Every route of the emulator, indexed by the shape of a path; the one dispatcher.

    Args:
        groups: the API surfaces, each with its routes.

    Raises:
        ValueError: a template is malformed, or two routes share a method and template.
    """

    def __init__(self, *groups: RouteGroup) -> None:
        self.served = ", ".join(g.served for g in groups)
        self.routes = tuple(route for g in groups for route in g.routes)
        paths: dict[str, _Path] = {}
        shapes: dict[tuple[str, int], list[_Path]] = {}
        for group in groups:
            for route in group.routes:
                path = paths.get(route.template)
                if path is None:
                    pattern = compile_template(route.template)
                    path = paths[route.template] = _Path(route.template, pattern, {})
                    for head in _heads(route.template):
                        shapes.setdefault((head, route.template.count("/")), []).append(path)
                if route.method in path.methods:
                    raise ValueError(f"two routes for {route.method} {route.template}")
                path.methods[route.method] = (route, group.api)
        self._shapes = {key: _Shape(found) for key, found in shapes.items()}

    def match(self, method: str, path: str) -> Match:
        """The route of ``method`` on ``path`` (decoded, without the query).

        Raises:
            ApiError: NOT_FOUND for a path no route has, or a method the path does not offer
                (naming the methods it does); PERMISSION_DENIED or INVALID_ARGUMENT for a
                resource whose project or location Vertex AI refuses (``scope.check_scope``).
        """
        segments = path.split("/")
        shape = self._shapes.get((segments[1], len(segments) - 1)) if len(segments) > 1 else None
        for candidate in shape.candidates(segments) if shape is not None else ():
            found = candidate.pattern.fullmatch(path)
            if found is None:
                continue
            bound = candidate.methods.get(method)
            if bound is None:
                offered = ", ".join(sorted(candidate.methods))
                raise ApiError(
                    "NOT_FOUND", f"{method} is not offered on {path}; it takes {offered}"
                )
            params = found.groupdict()
            check_scope(bound[0].permission, params)
            return Match(bound[0], bound[1], params)
        raise ApiError("NOT_FOUND", f"no such resource: {path} (the emulator serves {self.served})")


def object_body(raw: bytes, fields: Collection[str]) -> dict[str, Any]:
    """The JSON object body of a ``body: "*"`` request whose only fields are ``fields``.

    ``{}`` for no body. Field names may be camelCase or snake_case (``fields`` are snake_case).

    Raises:
        ApiError: the body is not a JSON object, or names a field not in ``fields``.
    """
    if not raw.strip():
        return {}
    doc = decode_json(raw, "*")
    if not isinstance(doc, dict):
        raise ApiError("INVALID_ARGUMENT", "Invalid JSON payload received: expected an object")
    refuse_unknown(key for key in doc if _snake(key) not in fields)
    for key, value in doc.items():
        check_request_field(_snake(key), value)
    return doc
