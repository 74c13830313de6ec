"""The one way kfp_spot reads YAML documents: PyYAML's ``safe_load_all``, each text parsed once.

A command reads its template several times (the submission's checks, the images' check, the
launch tasks' check, the loaded component) and a compiled spec of ours costs ~50-60 ms of CPU to
parse with PyYAML's pure-Python loader. :func:`documents` keeps the last few texts' documents,
pickled, and hands every caller a fresh copy (~0.3 ms), so a caller may change what it gets.

It is the pure-Python ``SafeLoader`` on purpose: KFP's loader and the Vertex AI SDK read templates
with it, and libyaml's ``CSafeLoader`` reads some text differently (it accepts a tab after
``key:`` and ``|#``, refuses ``[a:,]``, and gives ``''`` for a bare ``!``), so a template it
accepted could still fail in KFP or on Vertex AI.
"""

from __future__ import annotations

import functools
import pickle
from typing import Any

import yaml

EXPANDED_VALUES = 1_000_000
"""The most values a document may hold once its aliases are expanded, beyond its text's length.

PyYAML builds an alias (``*name``) as a reference to its anchor's value, so ten lines of aliases
of aliases ("billion laughs") parse in a moment into billions of values: every reader that walks
the document (KFP's protobuf parse of a template, ``json.dumps``) then ran for ever. Text without
aliases holds fewer values than characters; a compiled spec of ours holds about a thousand.
"""


def first_document(text: str | bytes) -> Any:
    """The first YAML document of ``text`` (None for an empty one); later ones are not parsed.

    Raises:
        yaml.YAMLError: the first document is not YAML, or is nested too deeply to read.
    """
    try:
        document = next(yaml.safe_load_all(text), None)
    except RecursionError:
        raise _too_deep() from None
    _check_expansion(document, len(text))
    return document


def documents(text: str | bytes, name: str | None = None) -> list[Any]:
    """Every YAML document of ``text``: a new copy per call, the parse shared with earlier calls.

    Args:
        text: the YAML.
        name: the file it was read from, for an error's position (as PyYAML names an open file).

    Raises:
        yaml.YAMLError: one of them is not YAML, or is nested too deeply to read (never cached:
            each call raises it again).
    """
    try:
        return list(pickle.loads(_parsed(text)))
    except yaml.MarkedYAMLError as exc:
        for mark in (exc.context_mark, exc.problem_mark):
            if mark is not None and name is not None:
                mark.name = name
        raise


@functools.lru_cache(maxsize=8)
def _parsed(text: str | bytes) -> bytes:
    # safe_load builds only plain types (dict, list, str, bytes, numbers, dates, sets): picklable.
    try:
        parsed = list(yaml.safe_load_all(text))
    except RecursionError:  # PyYAML's parser recurses once per level of nesting
        raise _too_deep() from None
    for document in parsed:
        _check_expansion(document, len(text))
    return pickle.dumps(parsed, protocol=pickle.HIGHEST_PROTOCOL)


def _check_expansion(document: Any, text_length: int) -> None:
    """Refuse a document whose aliases expand it past :data:`EXPANDED_VALUES`, or into itself.

    Each list and mapping is sized once (by identity), so the walk costs what the text holds,
    not what the aliases would expand to.
    """
    limit = EXPANDED_VALUES + text_length
    sizes: dict[int, int] = {}
    entered: set[int] = set()  # the lists and mappings the walk is inside of
    stack: list[tuple[Any, bool]] = [(document, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, (dict, list)):  # a scalar document
            continue
        children = list(node.values()) if isinstance(node, dict) else node
        if done:
            size = 1 + sum(sizes.get(id(c), 1) for c in children)
            if size > limit:
                raise yaml.YAMLError(
                    f"its aliases (*name) expand it to more than {limit} values; a compiled "
                    "spec holds a few thousand"
                )
            sizes[id(node)] = size
            entered.discard(id(node))
            continue
        if id(node) in sizes:
            continue
        if id(node) in entered:
            raise yaml.YAMLError("an alias (*name) refers to a list or mapping that holds it")
        entered.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if isinstance(c, (dict, list)))


def _too_deep() -> yaml.YAMLError:
    """The error for text nested deeper than the parser's recursion takes (``[[[[...``)."""
    return yaml.YAMLError(
        "nested too deeply to read (hundreds of levels of lists or mappings); "
        "a compiled spec holds a few dozen"
    )
