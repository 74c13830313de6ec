"""Hypothesis strategies shared by the request tests: mutations of a valid CustomJob body."""

from __future__ import annotations

import copy
import string
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

JOB_FIELDS = [
    "displayName",
    "jobSpec",
    "workerPoolSpecs",
    "machineSpec",
    "machineType",
    "replicaCount",
    "pythonPackageSpec",
    "containerSpec",
    "packageUris",
    "pythonModule",
    "scheduling",
    "strategy",
    "acceleratorType",
    "acceleratorCount",
    "labels",
    "createTime",
    "name",
]
"""CustomJob field names (JSON) worth mutating: a body's path to them, and output-only ones."""


def mutated_bodies(
    good: Mapping[str, Any],
    keys: st.SearchStrategy[str],
    values: st.SearchStrategy[Any],
    *,
    max_changes: int,
    max_depth: int,
) -> st.SearchStrategy[dict[str, Any]]:
    """``good`` with 1..max_changes fields replaced, removed or added at any depth.

    Each change walks down ``keys`` (at most ``max_depth``; into any element of a list of
    objects) as far as objects go, then deletes or sets (to one of ``values``) a key there: one of
    ``keys`` or a random name.
    """

    @st.composite
    def draw_body(draw: st.DrawFn) -> dict[str, Any]:
        body = copy.deepcopy(dict(good))
        for _ in range(draw(st.integers(1, max_changes))):
            node: Any = body
            for key in draw(st.lists(keys, max_size=max_depth)):
                child = node.get(key) if isinstance(node, dict) else None
                if isinstance(child, list) and child and isinstance(child[0], dict):
                    child = child[draw(st.integers(0, len(child) - 1))]
                if not isinstance(child, dict):
                    break
                node = child
            key = draw(keys | st.text(string.ascii_letters, min_size=1, max_size=6))
            if draw(st.booleans()):
                node.pop(key, None)
            else:
                node[key] = draw(values)
        return body

    return draw_body()
